//! Wavefront OBJ writer with per-vertex colours: `v x y z r g b` (**sRGB** floats, read as such by Blender's
//! importer), `vn`, faces `f a//a b//b c//c` (1-based), one object with contiguous `v` lines. Untextured, it
//! references no `mtllib` (trimesh drops vertex colours when an .mtl is referenced, `docs/mesh.md`); with a
//! [`Texture`] it adds `vt`, `f a/a/a`, and writes `<stem>.mtl` ([`super::material`]) and the image
//! [`texture_file_name`] beside it. Coordinates are +Y up ([`super::axes::to_y_up`]).

use std::io::Write;
use std::path::Path;

use super::axes::to_y_up;
use super::colour::srgb_floats;
use super::error::ExportError;
use super::material::{self, write_mtl_to};
use super::mesh::Mesh;
use super::texture::Texture;
use crate::atomic::{write_atomic, write_atomic_with};

/// The texture image written beside a textured `<stem>.obj`.
pub(crate) fn texture_file_name(stem: &str) -> String {
    format!("{stem}_texture.png")
}

/// Writes the OBJ text of `mesh` (object `name`) to `w`; with `mtl`, the UVs of the texture and a reference to
/// the material library `mtl.0`.
pub(crate) fn write_obj_to(
    mesh: &Mesh,
    name: &str,
    mtl: Option<(&str, &Texture)>,
    w: &mut impl Write,
) -> std::io::Result<()> {
    writeln!(
        w,
        "# clipsculpt {}: +Y up, sRGB vertex colours",
        env!("CARGO_PKG_VERSION")
    )?;
    if let Some((lib, _)) = mtl {
        writeln!(w, "mtllib {lib}")?;
    }
    writeln!(w, "o {name}")?;
    for (p, c) in mesh.positions.iter().zip(&mesh.colours) {
        let [x, y, z] = to_y_up(*p);
        let [r, g, b] = srgb_floats(*c);
        writeln!(w, "v {x} {y} {z} {r:.6} {g:.6} {b:.6}")?;
    }
    for n in &mesh.normals {
        let [x, y, z] = to_y_up(*n);
        writeln!(w, "vn {x} {y} {z}")?;
    }
    if let Some((_, texture)) = mtl {
        // OBJ's v runs up from the image's bottom row; glTF's (ours) down from its top.
        for [u, v] in &texture.uvs {
            writeln!(w, "vt {u} {}", 1.0 - v)?;
        }
        writeln!(w, "usemtl {}", material::NAME)?;
    }
    for t in &mesh.faces {
        let [a, b, c] = t.map(|i| i as u64 + 1);
        match mtl {
            None => writeln!(w, "f {a}//{a} {b}//{b} {c}//{c}")?,
            Some(_) => writeln!(w, "f {a}/{a}/{a} {b}/{b}/{b} {c}/{c}/{c}")?,
        }
    }
    Ok(())
}

/// Writes `mesh` to `path` as OBJ, atomically; with `texture`, also `<stem>.mtl` and the PNG beside it. Returns
/// the companion files written.
pub(crate) fn write_obj(
    mesh: &Mesh,
    texture: Option<&Texture>,
    path: &Path,
) -> Result<Vec<std::path::PathBuf>, ExportError> {
    mesh.validate()?;
    let stem: String = path.file_stem().map_or("mesh".into(), |s| {
        s.to_string_lossy()
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect()
    });
    let mut companions = Vec::new();
    let mtl_name = format!("{stem}.mtl");
    if let Some(t) = texture {
        t.validate(mesh.positions.len())?;
        let png_path = path.with_file_name(texture_file_name(&stem));
        let png = t.png().map_err(|source| ExportError::Image {
            path: png_path.clone(),
            source,
        })?;
        write_atomic(&png_path, &png).map_err(ExportError::io(&png_path))?;
        let mtl_path = path.with_file_name(&mtl_name);
        write_atomic_with(&mtl_path, |w| write_mtl_to(&texture_file_name(&stem), w))
            .map_err(ExportError::io(&mtl_path))?;
        companions.extend([mtl_path, png_path]);
    }
    let mtl = texture.map(|t| (mtl_name.as_str(), t));
    write_atomic_with(path, |w| write_obj_to(mesh, &stem, mtl, w))
        .map_err(ExportError::io(path))?;
    Ok(companions)
}
