//! Real size and placement (`docs/mesh.md`, "Scale and placement"): the exported object is `height` metres
//! tall along its up axis (the field's +Z, Blender's +Z after import), its origin at the centre of its base:
//! the lowest point's plane, the bounding box's centre across.

use super::mesh::Mesh;

/// Scales `mesh` uniformly so its extent along +Z is `height` and moves it so that its lowest point lies at
/// z = 0 and its bounding box is centred on x = y = 0. Normals keep (a uniform scale and a shift). An empty or
/// flat mesh is only moved.
pub(crate) fn place(mesh: &mut Mesh, height: f32) {
    if mesh.positions.is_empty() {
        return;
    }
    let (lo, hi) = mesh.bounds();
    let extent = hi[2] - lo[2];
    let scale = if extent > 0.0 { height / extent } else { 1.0 };
    let base = [(lo[0] + hi[0]) * 0.5, (lo[1] + hi[1]) * 0.5, lo[2]];
    for p in &mut mesh.positions {
        *p = [0, 1, 2].map(|a| (p[a] - base[a]) * scale);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::mesh::tests::tetra;

    #[test]
    fn the_base_centre_goes_to_the_origin_and_the_height_is_exact() {
        let mut m = tetra();
        m.positions.iter_mut().for_each(|p| {
            *p = [p[0] * 2.0 + 3.0, p[1] - 1.0, p[2] * 0.5 + 7.0];
        });
        place(&mut m, 1.8);
        let (lo, hi) = m.bounds();
        assert!((hi[2] - 1.8).abs() < 1e-6 && lo[2] == 0.0, "{lo:?} {hi:?}");
        // Uniform scale: the x extent 2 and z extent 0.5 keep their ratio 4.
        assert!(((hi[0] - lo[0]) - 4.0 * 1.8).abs() < 1e-5);
        assert!((lo[0] + hi[0]).abs() < 1e-5 && (lo[1] + hi[1]).abs() < 1e-5);
    }
}
