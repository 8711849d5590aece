//! The `asset.extras` of a binary glTF (`.glb`): what a file says about itself (glTF 2.0 allows an
//! application's JSON in any object's `extras`). Set on written bytes, so it works on whatever the
//! [`super::glb`] writer produced; the binary chunk is kept as it is.

use serde_json::Value;

/// The GLB header: magic, version, total length.
const HEADER: usize = 12;
/// A chunk header: length, type.
const CHUNK_HEADER: usize = 8;

/// Why a file is not a GLB whose JSON can be read.
#[derive(Debug, thiserror::Error)]
#[error("not a binary glTF 2.0 file: {0}")]
pub struct GlbError(String);

/// Whether `bytes` start like a GLB file (the `glTF` magic).
pub fn is_glb(bytes: &[u8]) -> bool {
    bytes.starts_with(b"glTF")
}

/// The JSON chunk of `glb` and the bytes after it (the binary chunk, if any).
fn split(glb: &[u8]) -> Result<(Value, &[u8]), GlbError> {
    let bad = |why: &str| GlbError(why.to_string());
    if !is_glb(glb) || glb.len() < HEADER + CHUNK_HEADER {
        return Err(bad("no glTF header"));
    }
    let word = |at: usize| u32::from_le_bytes([glb[at], glb[at + 1], glb[at + 2], glb[at + 3]]);
    if word(4) != 2 {
        return Err(bad("not version 2"));
    }
    let len = word(HEADER) as usize;
    let start = HEADER + CHUNK_HEADER;
    if &glb[HEADER + 4..start] != b"JSON" || glb.len() < start + len {
        return Err(bad("the first chunk is not a complete JSON chunk"));
    }
    let json = serde_json::from_slice(&glb[start..start + len])
        .map_err(|e| GlbError(format!("its JSON chunk does not parse: {e}")))?;
    Ok((json, &glb[start + len..]))
}

/// `asset.extras` of `glb` (`None` when the file has none).
pub fn read_extras(glb: &[u8]) -> Result<Option<Value>, GlbError> {
    let (json, _) = split(glb)?;
    Ok(json.pointer("/asset/extras").cloned())
}

/// `glb` with `asset.extras` set to `extras` (replacing any), its other JSON and binary chunk kept.
pub fn with_extras(glb: &[u8], extras: Value) -> Result<Vec<u8>, GlbError> {
    let (mut json, rest) = split(glb)?;
    let asset = json
        .get_mut("asset")
        .and_then(Value::as_object_mut)
        .ok_or_else(|| GlbError("no asset object".into()))?;
    asset.insert("extras".into(), extras);
    let mut js = json.to_string().into_bytes();
    while !js.len().is_multiple_of(4) {
        js.push(b' ');
    }
    let total = HEADER + CHUNK_HEADER + js.len() + rest.len();
    let total = u32::try_from(total).map_err(|_| GlbError("over the 4 GiB limit".into()))?;
    let mut out = Vec::with_capacity(total as usize);
    out.extend_from_slice(&glb[..8]);
    out.extend_from_slice(&total.to_le_bytes());
    out.extend_from_slice(&(js.len() as u32).to_le_bytes());
    out.extend_from_slice(b"JSON");
    out.extend_from_slice(&js);
    out.extend_from_slice(rest);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::glb::to_glb;
    use crate::mesh::grid::{Bounds, Grid};
    use crate::mesh::marching_cubes::{marching_cubes, McOptions};
    use crate::mesh::shapes;

    /// Extras set on a written GLB are read back (by us and by the `gltf` crate), and the mesh
    /// data is unchanged.
    #[test]
    fn extras_round_trip_and_keep_the_mesh() -> anyhow::Result<()> {
        let g = Grid::from_fn(12, Bounds::SHAP_E, |p| shapes::sphere(p, [0.0; 3], 0.6))?;
        let mut m = marching_cubes(&g, &McOptions::default())?;
        m.colours = vec![[0.2, 0.4, 0.6]; m.positions.len()];
        let plain = to_glb(&m, None, "ball")?;
        assert_eq!(read_extras(&plain)?, None);
        let extras = serde_json::json!({"clipsculpt": {"prompt": "a ball", "seed": 3}});
        let stamped = with_extras(&plain, extras.clone())?;
        assert_eq!(read_extras(&stamped)?, Some(extras.clone()));
        let (doc, buffers, _) = gltf::import_slice(&stamped)?;
        let raw = doc.as_json().asset.extras.as_ref().map(|r| r.get());
        assert_eq!(
            serde_json::from_str::<Value>(raw.unwrap_or("null"))?,
            extras
        );
        let mesh = doc
            .meshes()
            .next()
            .ok_or_else(|| anyhow::anyhow!("no mesh"))?;
        let prim = mesh
            .primitives()
            .next()
            .ok_or_else(|| anyhow::anyhow!("no primitive"))?;
        let reader = prim.reader(|b| Some(&buffers[b.index()]));
        assert_eq!(reader.read_positions().unwrap().count(), m.positions.len());
        assert!(read_extras(b"glTF\x01\0\0\0").is_err());
        assert!(with_extras(b"not a glb at all....", extras).is_err());
        Ok(())
    }
}
