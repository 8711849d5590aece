//! Binary little-endian PLY writer: `float x y z`, `float nx ny nz`, `uchar red green blue` (**sRGB**-encoded, as
//! Blender reads PLY colours) and `list uchar int vertex_indices`. Coordinates stay in the field's +Z-up frame,
//! which Blender keeps for PLY ([`super::axes`]).

use std::io::Write;
use std::path::Path;

use super::axes::to_z_up;
use super::colour::srgb_bytes;
use super::error::ExportError;
use super::mesh::Mesh;
use crate::atomic::write_atomic_with;

/// Writes the PLY bytes of `mesh` to `w`.
pub(crate) fn write_ply_to(mesh: &Mesh, w: &mut impl Write) -> std::io::Result<()> {
    write!(
        w,
        "ply\nformat binary_little_endian 1.0\ncomment clipsculpt: +Z up, sRGB vertex colours\n\
         element vertex {}\nproperty float x\nproperty float y\nproperty float z\n\
         property float nx\nproperty float ny\nproperty float nz\n\
         property uchar red\nproperty uchar green\nproperty uchar blue\n\
         element face {}\nproperty list uchar int vertex_indices\nend_header\n",
        mesh.positions.len(),
        mesh.faces.len()
    )?;
    let mut record = [0u8; 27];
    for ((p, n), c) in mesh.positions.iter().zip(&mesh.normals).zip(&mesh.colours) {
        for (k, x) in to_z_up(*p).iter().chain(&to_z_up(*n)).enumerate() {
            record[k * 4..k * 4 + 4].copy_from_slice(&x.to_le_bytes());
        }
        record[24..27].copy_from_slice(&srgb_bytes(*c));
        w.write_all(&record)?;
    }
    let mut face = [3u8; 13];
    for t in &mesh.faces {
        for (k, &i) in t.iter().enumerate() {
            // ok: Mesh::validate keeps indices below the vertex count, itself below 2³¹ (grid size limit).
            face[1 + k * 4..5 + k * 4].copy_from_slice(&(i as i32).to_le_bytes());
        }
        w.write_all(&face)?;
    }
    Ok(())
}

/// Writes `mesh` to `path` as binary PLY, atomically.
pub(crate) fn write_ply(mesh: &Mesh, path: &Path) -> Result<(), ExportError> {
    mesh.validate()?;
    if mesh.positions.len() > i32::MAX as usize {
        return Err(ExportError::Invalid {
            what: "mesh",
            reason: "too many vertices for PLY int indices".into(),
        });
    }
    write_atomic_with(path, |w| write_ply_to(mesh, w)).map_err(ExportError::io(path))
}
