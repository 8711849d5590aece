//! Binary glTF 2.0 (`.glb`) writer, hand-written (`docs/mesh.md`, "Formats"; the Khronos glTF 2.0 specification).
//!
//! One buffer with four 4-byte-aligned views: POSITION (VEC3 f32, with min/max), NORMAL (VEC3 f32, unit),
//! COLOR_0 (VEC3 f32, **linear**), indices (SCALAR u32). One triangle primitive, no material (viewers and
//! Blender ≥ 4.5 use COLOR_0 directly). Coordinates are converted to glTF's +Y up ([`super::axes::to_y_up`]).

use std::path::Path;

use serde_json::json;

use super::axes::to_y_up;
use super::colour::clamp_linear;
use super::error::ExportError;
use super::mesh::Mesh;
use crate::atomic::write_atomic;

const ARRAY_BUFFER: u32 = 34962;
const ELEMENT_ARRAY_BUFFER: u32 = 34963;
const FLOAT: u32 = 5126;
const UNSIGNED_INT: u32 = 5125;

/// Encodes `mesh` as GLB bytes (`name` becomes the node and mesh name).
pub(crate) fn to_glb(mesh: &Mesh, name: &str) -> Result<Vec<u8>, ExportError> {
    mesh.validate()?;
    let positions: Vec<[f32; 3]> = mesh.positions.iter().map(|&p| to_y_up(p)).collect();
    let normals: Vec<[f32; 3]> = mesh.normals.iter().map(|&n| to_y_up(n)).collect();
    let colours: Vec<[f32; 3]> = mesh.colours.iter().map(|&c| clamp_linear(c)).collect();
    let (min, max) = Mesh {
        positions: positions.clone(),
        ..Mesh::default()
    }
    .bounds();

    let mut bin = Vec::with_capacity(mesh.positions.len() * 36 + mesh.faces.len() * 12);
    let vec3 = |v: &[[f32; 3]]| {
        v.iter()
            .flatten()
            .map(|x| x.to_le_bytes())
            .collect::<Vec<_>>()
    };
    let views = [
        (vec3(&positions), ARRAY_BUFFER),
        (vec3(&normals), ARRAY_BUFFER),
        (vec3(&colours), ARRAY_BUFFER),
        (mesh.faces.iter().flatten().map(|i| i.to_le_bytes()).collect(), ELEMENT_ARRAY_BUFFER),
    ]
    .map(|(words, target)| {
        let offset = bin.len();
        words.iter().for_each(|w| bin.extend_from_slice(w));
        json!({"buffer": 0, "byteOffset": offset, "byteLength": bin.len() - offset, "target": target})
    });
    // Every view holds 4-byte elements, so offsets and the chunk length are already multiples of 4.

    let n = mesh.positions.len();
    let doc = json!({
        "asset": {"version": "2.0", "generator": concat!("clipsculpt ", env!("CARGO_PKG_VERSION"))},
        "scene": 0,
        "scenes": [{"nodes": [0]}],
        "nodes": [{"mesh": 0, "name": name}],
        "meshes": [{"name": name, "primitives": [{
            "attributes": {"POSITION": 0, "NORMAL": 1, "COLOR_0": 2}, "indices": 3, "mode": 4}]}],
        "buffers": [{"byteLength": bin.len()}],
        "bufferViews": views,
        "accessors": [
            {"bufferView": 0, "componentType": FLOAT, "count": n, "type": "VEC3", "min": min, "max": max},
            {"bufferView": 1, "componentType": FLOAT, "count": n, "type": "VEC3"},
            {"bufferView": 2, "componentType": FLOAT, "count": n, "type": "VEC3"},
            {"bufferView": 3, "componentType": UNSIGNED_INT, "count": mesh.faces.len() * 3, "type": "SCALAR"},
        ],
    });
    let mut js = doc.to_string().into_bytes();
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

/// Writes `mesh` to `path` as GLB, atomically.
pub(crate) fn write_glb(mesh: &Mesh, path: &Path) -> Result<(), ExportError> {
    let name = path
        .file_stem()
        .map_or("mesh".into(), |s| s.to_string_lossy());
    let bytes = to_glb(mesh, &name)?;
    write_atomic(path, &bytes).map_err(ExportError::io(path))
}
