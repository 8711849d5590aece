//! Wavefront OBJ writer with per-vertex colours: `v x y z r g b` (**sRGB** floats, read as such by Blender's
//! importer), `vn`, faces `f a//a b//b c//c` (1-based), one object with contiguous `v` lines and no `mtllib`
//! (trimesh drops vertex colours when an .mtl is referenced, `docs/mesh.md`). Coordinates are +Y up
//! ([`super::axes::to_y_up`]).

use std::io::Write;
use std::path::Path;

use super::axes::to_y_up;
use super::colour::srgb_floats;
use super::error::ExportError;
use super::mesh::Mesh;
use crate::atomic::write_atomic_with;

/// Writes the OBJ text of `mesh` (object `name`) to `w`.
pub(crate) fn write_obj_to(mesh: &Mesh, name: &str, w: &mut impl Write) -> std::io::Result<()> {
    writeln!(
        w,
        "# clipsculpt {}: +Y up, sRGB vertex colours",
        env!("CARGO_PKG_VERSION")
    )?;
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
    for t in &mesh.faces {
        let [a, b, c] = t.map(|i| i as u64 + 1);
        writeln!(w, "f {a}//{a} {b}//{b} {c}//{c}")?;
    }
    Ok(())
}

/// Writes `mesh` to `path` as OBJ, atomically.
pub(crate) fn write_obj(mesh: &Mesh, path: &Path) -> Result<(), ExportError> {
    mesh.validate()?;
    let name: String = path.file_stem().map_or("mesh".into(), |s| {
        s.to_string_lossy()
            .chars()
            .filter(|c| !c.is_whitespace())
            .collect()
    });
    write_atomic_with(path, |w| write_obj_to(mesh, &name, w)).map_err(ExportError::io(path))
}
