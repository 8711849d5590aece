//! Polycount control: quadric edge-collapse simplification by meshoptimizer (the `meshopt` crate), which keeps
//! the input's vertices (so normals and colours carry over) and its topology: a closed, manifold mesh stays closed
//! and manifold (`docs/mesh.md`, "Polycount").

use meshopt::{SimplifyOptions, VertexDataAdapter};

use super::error::ExportError;
use super::mesh::Mesh;

/// What [`simplify`] did (recorded in `report.json`).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct SimplifyReport {
    /// Triangles before.
    pub faces_before: usize,
    /// Triangles after.
    pub faces_after: usize,
    /// The simplifier's geometric error bound, as a fraction of the mesh's extent (its largest side).
    pub relative_error: f32,
    /// Whether the simplified mesh is closed and edge-manifold (every edge in exactly two faces).
    pub watertight: bool,
}

/// Simplifies `mesh` to about `target` triangles (a mesh already at or below it is returned as is) and drops the
/// vertices no face uses any more.
///
/// No error bound limits the collapse: the target decides. Borders (an open input's holes) stay where they are.
pub(crate) fn simplify(mesh: &Mesh, target: usize) -> Result<(Mesh, SimplifyReport), ExportError> {
    mesh.validate()?;
    let before = mesh.faces.len();
    let mut report = SimplifyReport {
        faces_before: before,
        faces_after: before,
        relative_error: 0.0,
        watertight: mesh.stats().is_watertight(),
    };
    if before <= target {
        return Ok((mesh.clone(), report));
    }
    let bytes: &[u8] = bytemuck::cast_slice(&mesh.positions);
    let adapter = VertexDataAdapter::new(bytes, 12, 0).map_err(|e| ExportError::Invalid {
        what: "mesh",
        reason: format!("simplifier input: {e}"),
    })?;
    let indices: &[u32] = bytemuck::cast_slice(&mesh.faces);
    let mut error = 0.0f32;
    let kept = meshopt::simplify(
        indices,
        &adapter,
        target * 3,
        f32::MAX,
        SimplifyOptions::LockBorder,
        Some(&mut error),
    );
    let faces: Vec<[u32; 3]> = kept.chunks_exact(3).map(|t| [t[0], t[1], t[2]]).collect();
    report.faces_after = faces.len();
    report.relative_error = error;
    let out = compact(mesh, faces);
    report.watertight = out.stats().is_watertight();
    Ok((out, report))
}

/// `mesh`'s vertices that `faces` use, in first-use order, with `faces` reindexed.
pub(crate) fn compact(mesh: &Mesh, mut faces: Vec<[u32; 3]>) -> Mesh {
    let mut remap = vec![u32::MAX; mesh.positions.len()];
    let mut out = Mesh::default();
    for i in faces.iter_mut().flatten() {
        let old = *i as usize;
        if remap[old] == u32::MAX {
            remap[old] = out.positions.len() as u32;
            out.positions.push(mesh.positions[old]);
            out.normals.push(mesh.normals[old]);
            out.colours.push(mesh.colours[old]);
        }
        *i = remap[old];
    }
    out.faces = faces;
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::grid::{Bounds, Grid};
    use crate::mesh::marching_cubes::{marching_cubes, McOptions};
    use crate::mesh::shapes;

    fn torus() -> Mesh {
        let g = Grid::from_fn(48, Bounds::SHAP_E, |p| shapes::torus(p, 0.55, 0.22)).unwrap();
        marching_cubes(&g, &McOptions::default()).unwrap()
    }

    /// Every edge of a closed torus stays shared by exactly two faces, the genus stays (χ = 0), and the face
    /// count lands within 10 % of the target.
    #[test]
    fn keeps_a_closed_torus_closed_and_hits_the_target() {
        let full = torus();
        assert!(full.stats().is_clean_solid());
        for target in [4000, 1000, 300] {
            let (m, r) = simplify(&full, target).unwrap();
            let s = m.stats();
            assert!(s.is_clean_solid(), "{target}: {s:?}");
            assert_eq!((s.euler, s.components), (0, 1), "{target}");
            let off = (s.faces as f64 - target as f64).abs() / target as f64;
            assert!(off <= 0.10, "{target}: {} faces", s.faces);
            assert_eq!((r.faces_before, r.faces_after), (full.faces.len(), s.faces));
            assert!(r.watertight);
            assert!(r.relative_error > 0.0 && r.relative_error < 0.05, "{r:?}");
        }
    }

    #[test]
    fn a_mesh_under_the_target_is_kept_whole() {
        let full = torus();
        let (m, r) = simplify(&full, full.faces.len() + 1).unwrap();
        assert_eq!(m, full);
        assert_eq!(r.relative_error, 0.0);
    }
}
