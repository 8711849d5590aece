//! Binary glTF 2.0 (`.glb`) writer, hand-written (`docs/mesh.md`, "Formats"; the Khronos glTF 2.0 specification).
//!
//! One buffer with 4-byte-aligned views: POSITION (VEC3 f32, with min/max), NORMAL (VEC3 f32, unit), then either
//! COLOR_0 (VEC3 f32, **linear**) or, with a [`Texture`], TEXCOORD_0 (VEC2 f32) and the PNG; indices (SCALAR u32).
//! One triangle primitive with the [`super::material`]: white base colour × COLOR_0 (the spec multiplies them) or
//! × the texture. Coordinates are converted to glTF's +Y up ([`super::axes::to_y_up`]).

use std::path::Path;

use serde_json::{json, Value};

use super::axes::to_y_up;
use super::colour::clamp_linear;
use super::error::ExportError;
use super::material;
use super::mesh::Mesh;
use super::texture::Texture;
use crate::atomic::write_atomic;

const ARRAY_BUFFER: u32 = 34962;
const ELEMENT_ARRAY_BUFFER: u32 = 34963;
const FLOAT: u32 = 5126;
const UNSIGNED_INT: u32 = 5125;
const LINEAR: u32 = 9729;
const LINEAR_MIPMAP_LINEAR: u32 = 9987;
const CLAMP_TO_EDGE: u32 = 33071;

/// The binary chunk under construction: bytes and the views into it.
#[derive(Default)]
struct Bin {
    bytes: Vec<u8>,
    views: Vec<Value>,
}

impl Bin {
    /// Appends `data` as a view (padded to 4 bytes) and returns its index.
    fn view(&mut self, data: &[u8], target: Option<u32>) -> usize {
        let offset = self.bytes.len();
        self.bytes.extend_from_slice(data);
        let mut view = json!({"buffer": 0, "byteOffset": offset, "byteLength": data.len()});
        if let Some(t) = target {
            view["target"] = t.into();
        }
        while !self.bytes.len().is_multiple_of(4) {
            self.bytes.push(0);
        }
        self.views.push(view);
        self.views.len() - 1
    }
}

fn floats<const N: usize>(v: &[[f32; N]]) -> Vec<u8> {
    v.iter().flatten().flat_map(|x| x.to_le_bytes()).collect()
}

/// Encodes `mesh` (with `texture`, if any) as GLB bytes (`name` becomes the node and mesh name).
pub(crate) fn to_glb(
    mesh: &Mesh,
    texture: Option<&Texture>,
    name: &str,
) -> Result<Vec<u8>, ExportError> {
    mesh.validate()?;
    let n = mesh.positions.len();
    let positions: Vec<[f32; 3]> = mesh.positions.iter().map(|&p| to_y_up(p)).collect();
    let normals: Vec<[f32; 3]> = mesh.normals.iter().map(|&n| to_y_up(n)).collect();
    let (min, max) = Mesh {
        positions: positions.clone(),
        ..Mesh::default()
    }
    .bounds();
    let mut bin = Bin::default();
    let mut accessors = vec![
        json!({"bufferView": bin.view(&floats(&positions), Some(ARRAY_BUFFER)),
               "componentType": FLOAT, "count": n, "type": "VEC3", "min": min, "max": max}),
        json!({"bufferView": bin.view(&floats(&normals), Some(ARRAY_BUFFER)),
               "componentType": FLOAT, "count": n, "type": "VEC3"}),
    ];
    let mut attributes = json!({"POSITION": 0, "NORMAL": 1});
    let mut pbr = json!({"baseColorFactor": [1.0, 1.0, 1.0, 1.0], "metallicFactor": 0.0,
                         "roughnessFactor": material::ROUGHNESS});
    let mut doc = json!({});
    match texture {
        None => {
            let colours: Vec<[f32; 3]> = mesh.colours.iter().map(|&c| clamp_linear(c)).collect();
            attributes["COLOR_0"] = accessors.len().into();
            accessors.push(
                json!({"bufferView": bin.view(&floats(&colours), Some(ARRAY_BUFFER)),
                                  "componentType": FLOAT, "count": n, "type": "VEC3"}),
            );
        }
        Some(t) => {
            t.validate(n)?;
            attributes["TEXCOORD_0"] = accessors.len().into();
            accessors.push(
                json!({"bufferView": bin.view(&floats(&t.uvs), Some(ARRAY_BUFFER)),
                                  "componentType": FLOAT, "count": n, "type": "VEC2"}),
            );
            let png = t.png().map_err(|source| ExportError::Image {
                path: format!("{name}.glb").into(),
                source,
            })?;
            doc["images"] = json!([{"bufferView": bin.view(&png, None), "mimeType": "image/png"}]);
            doc["samplers"] = json!([{"magFilter": LINEAR, "minFilter": LINEAR_MIPMAP_LINEAR,
                                      "wrapS": CLAMP_TO_EDGE, "wrapT": CLAMP_TO_EDGE}]);
            doc["textures"] = json!([{"sampler": 0, "source": 0}]);
            pbr["baseColorTexture"] = json!({"index": 0, "texCoord": 0});
        }
    }
    let indices: Vec<u8> = mesh
        .faces
        .iter()
        .flatten()
        .flat_map(|i| i.to_le_bytes())
        .collect();
    let index_accessor = accessors.len();
    accessors.push(json!({"bufferView": bin.view(&indices, Some(ELEMENT_ARRAY_BUFFER)),
                          "componentType": UNSIGNED_INT, "count": mesh.faces.len() * 3, "type": "SCALAR"}));
    let fields = json!({
        "asset": {"version": "2.0", "generator": concat!("clipsculpt ", env!("CARGO_PKG_VERSION"))},
        "scene": 0,
        "scenes": [{"nodes": [0]}],
        "nodes": [{"mesh": 0, "name": name}],
        "meshes": [{"name": name, "primitives": [{
            "attributes": attributes, "indices": index_accessor, "material": 0, "mode": 4}]}],
        "materials": [{"name": material::NAME, "pbrMetallicRoughness": pbr}],
        "buffers": [{"byteLength": bin.bytes.len()}],
        "bufferViews": bin.views,
        "accessors": accessors,
    });
    if let (Some(doc), Value::Object(fields)) = (doc.as_object_mut(), fields) {
        doc.extend(fields);
    }
    chunks(doc.to_string().into_bytes(), bin.bytes)
}

/// The GLB container: header, JSON chunk (space-padded), BIN chunk.
fn chunks(mut js: Vec<u8>, bin: Vec<u8>) -> Result<Vec<u8>, ExportError> {
    while !js.len().is_multiple_of(4) {
        js.push(b' ');
    }
    let total = 12 + 8 + js.len() + 8 + bin.len();
    let total32 = u32::try_from(total).map_err(|_| ExportError::Invalid {
        what: "mesh",
        reason: format!("GLB would be {total} bytes, over the format's 4 GiB limit"),
    })?;
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(b"glTF");
    out.extend_from_slice(&2u32.to_le_bytes());
    out.extend_from_slice(&total32.to_le_bytes());
    out.extend_from_slice(&(js.len() as u32).to_le_bytes());
    out.extend_from_slice(b"JSON");
    out.extend_from_slice(&js);
    out.extend_from_slice(&(bin.len() as u32).to_le_bytes());
    out.extend_from_slice(b"BIN\0");
    out.extend_from_slice(&bin);
    Ok(out)
}

/// Writes `mesh` (and `texture`) to `path` as GLB, atomically.
pub(crate) fn write_glb(
    mesh: &Mesh,
    texture: Option<&Texture>,
    path: &Path,
) -> Result<(), ExportError> {
    let name = path
        .file_stem()
        .map_or("mesh".into(), |s| s.to_string_lossy());
    let bytes = to_glb(mesh, texture, &name)?;
    write_atomic(path, &bytes).map_err(ExportError::io(path))
}
