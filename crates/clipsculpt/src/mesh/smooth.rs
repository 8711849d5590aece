//! Optional surface smoothing before simplification: Taubin's λ|μ filter (SIGGRAPH 1995), a Laplacian step
//! that shrinks followed by one that inflates, which removes the decoder's ripples (high frequencies) without the
//! shrinkage of plain Laplacian smoothing (`docs/mesh.md`, "Smoothing").

use super::mesh::{cross3, sub3, Mesh};

/// Taubin's shrink factor λ.
const LAMBDA: f32 = 0.5;
/// Taubin's inflate factor μ (μ < −λ; pass-band frequency k = 1/λ + 1/μ ≈ 0.1).
const MU: f32 = -0.53;

/// Applies `iterations` λ|μ pairs with uniform (umbrella) weights over each vertex's edge neighbours, then
/// recomputes the normals from the faces (area-weighted).
pub(crate) fn taubin(mesh: &mut Mesh, iterations: usize) {
    if iterations == 0 || mesh.positions.is_empty() {
        return;
    }
    let neighbours = neighbours(mesh);
    for _ in 0..iterations {
        for factor in [LAMBDA, MU] {
            let old = mesh.positions.clone();
            for (v, ring) in neighbours.iter().enumerate() {
                if ring.is_empty() {
                    continue;
                }
                let mut mean = [0.0f32; 3];
                for &u in ring {
                    (0..3).for_each(|a| mean[a] += old[u as usize][a]);
                }
                let n = ring.len() as f32;
                let p = &mut mesh.positions[v];
                (0..3).for_each(|a| p[a] += factor * (mean[a] / n - old[v][a]));
            }
        }
    }
    mesh.normals = face_normals(mesh);
}

/// Each vertex's distinct edge neighbours.
fn neighbours(mesh: &Mesh) -> Vec<Vec<u32>> {
    let mut ring: Vec<Vec<u32>> = vec![Vec::new(); mesh.positions.len()];
    for t in &mesh.faces {
        for k in 0..3 {
            let (a, b) = (t[k], t[(k + 1) % 3]);
            ring[a as usize].push(b);
            ring[b as usize].push(a);
        }
    }
    for r in &mut ring {
        r.sort_unstable();
        r.dedup();
    }
    ring
}

/// Area-weighted vertex normals (unit; a vertex in no face keeps +Z).
pub(crate) fn face_normals(mesh: &Mesh) -> Vec<[f32; 3]> {
    let mut acc = vec![[0.0f64; 3]; mesh.positions.len()];
    for t in &mesh.faces {
        let [a, b, c] = t.map(|i| mesh.positions[i as usize].map(f64::from));
        let n = cross3(sub3(b, a), sub3(c, a));
        for &i in t {
            (0..3).for_each(|k| acc[i as usize][k] += n[k]);
        }
    }
    acc.iter()
        .map(|n| {
            let l = (n[0] * n[0] + n[1] * n[1] + n[2] * n[2]).sqrt();
            if l > 0.0 {
                n.map(|x| (x / l) as f32)
            } else {
                [0.0, 0.0, 1.0]
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::grid::{Bounds, Grid};
    use crate::mesh::marching_cubes::{marching_cubes, McOptions};
    use crate::mesh::shapes;

    /// A rippled sphere gets closer to round (less spread of radii) and keeps its volume within 2 %.
    #[test]
    fn smooths_ripples_and_keeps_the_volume() {
        let g = Grid::from_fn(48, Bounds::SHAP_E, |p| {
            let r = shapes::sphere(p, [0.0; 3], 0.6);
            r + 0.02 * (p[0] * 40.0).sin() * (p[1] * 40.0).sin()
        })
        .unwrap();
        let mut m = marching_cubes(&g, &McOptions::default()).unwrap();
        let spread = |m: &Mesh| {
            let r: Vec<f32> = m
                .positions
                .iter()
                .map(|p| (p[0] * p[0] + p[1] * p[1] + p[2] * p[2]).sqrt())
                .collect();
            let mean = r.iter().sum::<f32>() / r.len() as f32;
            (r.iter().map(|x| (x - mean).powi(2)).sum::<f32>() / r.len() as f32).sqrt()
        };
        let (before, volume) = (spread(&m), m.stats().signed_volume);
        taubin(&mut m, 10);
        let s = m.stats();
        assert!(spread(&m) < 0.6 * before, "{} vs {before}", spread(&m));
        assert!((s.signed_volume / volume - 1.0).abs() < 0.02, "{s:?}");
        assert!(s.is_clean_solid());
    }
}
