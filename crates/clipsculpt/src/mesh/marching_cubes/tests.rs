use std::f64::consts::PI;

use super::*;
use crate::mesh::grid::Bounds;
use crate::mesh::shapes;

fn grid(n: usize, f: impl Fn([f32; 3]) -> f32 + Sync) -> Grid {
    Grid::from_fn(n, Bounds::SHAP_E, f).unwrap()
}

fn extract(g: &Grid, parallel: bool) -> Mesh {
    marching_cubes(
        g,
        &McOptions {
            parallel,
            ..McOptions::default()
        },
    )
    .unwrap()
}

#[test]
fn sphere_is_a_closed_genus_zero_solid_with_accurate_volume() {
    // r = 0.8 at 128³: volume 4/3·π·r³ = 2.1447; MC chords lose ~0.02 % (`docs/mesh.md`), we allow 1 %.
    let g = grid(128, |p| shapes::sphere(p, [0.0; 3], 0.8));
    let m = extract(&g, true);
    let s = m.stats();
    assert!(s.is_clean_solid(), "{s:?}");
    assert_eq!((s.euler, s.components), (2, 1));
    let exact = 4.0 / 3.0 * PI * 0.8f64.powi(3);
    assert!(
        (s.signed_volume / exact - 1.0).abs() < 0.01,
        "{} vs {exact}",
        s.signed_volume
    );
    // Same V/F as skimage / VTK on this sphere (`docs/mesh.md`, "Quality gates"), and F = 2V − 4.
    assert_eq!((m.positions.len(), m.faces.len()), (48_576, 97_148));
    for (p, n) in m.positions.iter().zip(&m.normals) {
        let r = (p[0] * p[0] + p[1] * p[1] + p[2] * p[2]).sqrt();
        assert!((r - 0.8).abs() < 2e-4, "vertex {p:?} off the sphere");
        // Normals are unit and point outward (along p/|p| for a sphere).
        let dot = (p[0] * n[0] + p[1] * n[1] + p[2] * n[2]) / r;
        assert!(dot > 0.999, "normal {n:?} at {p:?}");
    }
}

#[test]
fn single_thread_and_parallel_give_the_same_mesh() {
    let g = grid(40, |p| shapes::torus(p, 0.5, 0.2));
    let (a, b) = (extract(&g, false), extract(&g, true));
    assert_eq!(a.positions.len(), b.positions.len());
    assert_eq!(a.faces.len(), b.faces.len());
    // Vertex numbering is canonical (layer by layer), so the meshes are identical.
    assert_eq!(a, b);
}

#[test]
fn torus_has_euler_characteristic_zero() {
    let g = grid(64, |p| shapes::torus(p, 0.5, 0.2));
    let s = extract(&g, true).stats();
    assert!(s.is_clean_solid(), "{s:?}");
    assert_eq!((s.euler, s.components), (0, 1));
    // 2π²·R·r² = 0.3948
    let exact = 2.0 * PI * PI * 0.5 * 0.04;
    assert!(
        (s.signed_volume / exact - 1.0).abs() < 0.02,
        "{}",
        s.signed_volume
    );
}

#[test]
fn box_with_faces_on_grid_samples_has_no_degenerate_triangles() {
    // 33 samples over [−1, 1]: spacing 1/16, so the faces at ±0.5 lie exactly on samples (value == level there).
    let g = grid(33, |p| shapes::cuboid(p, [0.5, 0.5, 0.5]));
    let s = extract(&g, true).stats();
    assert!(s.is_clean_solid(), "{s:?}");
    assert_eq!(s.euler, 2);
    // Samples on the level count as outside, so the faces sit just inside ±0.5 (within T_EPS of a spacing); MC
    // chamfers the 12 box edges by about h²/2 per unit length: 1 − 12·(1/16)²/2 = 0.977.
    assert!(
        (s.signed_volume - 0.977).abs() < 0.002,
        "{}",
        s.signed_volume
    );
}

#[test]
fn two_disjoint_spheres_are_two_components() {
    let g = grid(48, |p| {
        shapes::union(
            shapes::sphere(p, [-0.5, 0.0, 0.0], 0.3),
            shapes::sphere(p, [0.5, 0.0, 0.0], 0.3),
        )
    });
    let s = extract(&g, true).stats();
    assert!(s.is_clean_solid(), "{s:?}");
    assert_eq!((s.components, s.euler), (2, 4));
}

#[test]
fn empty_field_is_a_clear_error() {
    let g = grid(16, |_| -1.0);
    let err = marching_cubes(&g, &McOptions::default()).unwrap_err();
    assert!(matches!(err, ExportError::EmptySurface { .. }));
    assert!(err.to_string().contains("choose a level"), "{err}");
}

#[test]
fn full_field_closes_against_the_padding_as_a_box() {
    // Everything inside: the pad (level − 1) closes the surface half a spacing outside the box.
    let g = grid(9, |_| 1.0);
    let m = marching_cubes(&g, &McOptions::default()).unwrap();
    let s = m.stats();
    assert!(s.is_clean_solid(), "{s:?}");
    assert_eq!(s.euler, 2);
    let (lo, hi) = m.bounds();
    // Spacing 0.25, so the faces sit at ±1.125.
    assert_eq!((lo, hi), ([-1.125; 3], [1.125; 3]));
}

#[test]
fn non_finite_values_are_rejected() {
    let g = grid(8, |p| if p[0] > 0.9 { f32::NAN } else { 1.0 });
    let err = marching_cubes(&g, &McOptions::default()).unwrap_err();
    assert!(
        matches!(err, ExportError::NonFiniteField { count: 64, .. }),
        "{err}"
    );
}

#[test]
fn noise_stays_watertight_and_manifold() {
    // Ambiguous faces everywhere: the consistent face rule must not crack (`docs/mesh.md`, "Quality gates").
    let mut state = 0x2545_f491u32;
    let mut values = Vec::with_capacity(20 * 20 * 20);
    for _ in 0..20 * 20 * 20 {
        state ^= state << 13;
        state ^= state >> 17;
        state ^= state << 5;
        values.push(state as f32 / u32::MAX as f32 - 0.5);
    }
    let g = Grid::new([20; 3], Bounds::SHAP_E, values).unwrap();
    for parallel in [false, true] {
        let s = extract(&g, parallel).stats();
        assert!(s.is_watertight(), "{s:?}");
        assert_eq!(s.inconsistent_edges, 0);
        assert_eq!(s.degenerate_faces, 0);
    }
}

#[test]
fn parity_mode_applies_the_shap_e_coordinate_quirk() {
    // Sphere sampled on 32³ over [−1, 1]; parity maps padded index v to v/33·2 − 1 instead of (v − 1)/31·2 − 1,
    // i.e. scales by 31/33 about the centre: the radius shrinks from 0.6 to 0.6·31/33.
    let g = grid(32, |p| shapes::sphere(p, [0.0; 3], 0.6));
    let exact = marching_cubes(&g, &McOptions::default()).unwrap();
    let parity = marching_cubes(
        &g,
        &McOptions {
            mode: McMode::ShapEParity,
            ..McOptions::default()
        },
    )
    .unwrap();
    assert_eq!(exact.positions.len(), parity.positions.len());
    assert_eq!(exact.faces.len(), parity.faces.len());
    let mean_r = |m: &Mesh| {
        m.positions
            .iter()
            .map(|p| (p[0] * p[0] + p[1] * p[1] + p[2] * p[2]).sqrt() as f64)
            .sum::<f64>()
            / m.positions.len() as f64
    };
    assert!((mean_r(&exact) - 0.6).abs() < 2e-3);
    assert!((mean_r(&parity) - 0.6 * 31.0 / 33.0).abs() < 2e-3);
    assert!(parity.stats().is_clean_solid());
}
