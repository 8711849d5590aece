//! Voxelisation of a triangle mesh by ray parity along z columns (`docs/mesh.md`, "Evaluation by
//! voxelisation"): a voxel centre is inside when a ray from it towards −z crosses the surface an odd
//! number of times. Column positions carry a tiny irrational offset so that rays do not hit shared edges or
//! vertices exactly.

use clipsculpt::mesh::Mesh;

/// Inside flags at the centres of an `n`³ lattice of cells over an axis-aligned box (x fastest).
#[derive(Debug, Clone)]
pub struct Voxels {
    /// Lower corner of the box.
    pub lo: [f32; 3],
    /// Cell size per axis.
    pub step: [f32; 3],
    /// Cells per axis.
    pub n: usize,
    /// `n³` flags, index `(z·n + y)·n + x`.
    pub inside: Vec<bool>,
}

impl Voxels {
    /// Centre of cell (x, y, z), without the column offset.
    pub fn centre(&self, x: usize, y: usize, z: usize) -> [f32; 3] {
        let i = [x, y, z];
        [0, 1, 2].map(|a| self.lo[a] + (i[a] as f32 + 0.5) * self.step[a])
    }

    /// Volume of one cell.
    pub fn cell_volume(&self) -> f32 {
        self.step.iter().product()
    }

    /// Centres of the inside cells.
    pub fn inside_centres(&self) -> Vec<[f32; 3]> {
        let n = self.n;
        (0..self.inside.len())
            .filter(|&i| self.inside[i])
            .map(|i| self.centre(i % n, (i / n) % n, i / (n * n)))
            .collect()
    }
}

/// Column offsets as fractions of a cell (irrational, so rays miss the lattice the mesh came from).
const JITTER: [f32; 2] = [0.001_414_213_5, 0.001_732_050_8];

/// Voxelises `mesh` on `n`³ cells over `[lo, hi]`. Faces must index valid vertices (checked by the caller).
pub fn voxelise(mesh: &Mesh, lo: [f32; 3], hi: [f32; 3], n: usize) -> Voxels {
    let step = [0, 1, 2].map(|a| (hi[a] - lo[a]) / n as f32);
    let col = |a: usize, i: usize| lo[a] + (i as f32 + 0.5 + JITTER[a]) * step[a];
    // z of every crossing per (x, y) column.
    let mut hits: Vec<Vec<f32>> = vec![Vec::new(); n * n];
    for face in &mesh.faces {
        let [a, b, c] = face.map(|i| mesh.positions[i as usize]);
        let area = (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0]);
        if area == 0.0 || !area.is_finite() {
            continue;
        }
        // Columns whose centre can fall inside the triangle's xy bounds.
        let range = |axis: usize| {
            let (mn, mx) = (
                a[axis].min(b[axis]).min(c[axis]),
                a[axis].max(b[axis]).max(c[axis]),
            );
            let first = ((mn - lo[axis]) / step[axis] - 0.5 - JITTER[axis])
                .ceil()
                .max(0.0) as usize;
            let last = ((mx - lo[axis]) / step[axis] - 0.5 - JITTER[axis]).floor();
            if last < 0.0 {
                return first..first;
            }
            first..(last as usize + 1).min(n)
        };
        for y in range(1) {
            for x in range(0) {
                let p = [col(0, x), col(1, y)];
                // Barycentric weights from edge functions, normalised by the signed area.
                let edge = |u: [f32; 3], v: [f32; 3]| {
                    ((v[0] - u[0]) * (p[1] - u[1]) - (v[1] - u[1]) * (p[0] - u[0])) / area
                };
                let (wa, wb, wc) = (edge(b, c), edge(c, a), edge(a, b));
                if wa >= 0.0 && wb >= 0.0 && wc >= 0.0 {
                    hits[y * n + x].push(wa * a[2] + wb * b[2] + wc * c[2]);
                }
            }
        }
    }
    let mut inside = vec![false; n * n * n];
    for (column, zs) in hits.iter_mut().enumerate() {
        if zs.is_empty() {
            continue;
        }
        zs.sort_unstable_by(f32::total_cmp);
        let mut below = 0;
        for z in 0..n {
            let zc = lo[2] + (z as f32 + 0.5) * step[2];
            while below < zs.len() && zs[below] < zc {
                below += 1;
            }
            inside[z * n * n + column] = below % 2 == 1;
        }
    }
    Voxels {
        lo,
        step,
        n,
        inside,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clipsculpt::mesh::{marching_cubes, shapes, Bounds, Grid, McOptions};

    #[test]
    fn sphere_volume_and_centroid_match() {
        // Sphere r = 0.6 at (0.1, 0, −0.2) from a 48³ field: 4/3·π·0.216 = 0.9048; centroid = centre.
        let centre = [0.1, 0.0, -0.2];
        let grid = Grid::from_fn(48, Bounds::SHAP_E, |p| shapes::sphere(p, centre, 0.6)).unwrap();
        let mesh = marching_cubes(&grid, &McOptions::default()).unwrap();
        let v = voxelise(&mesh, [-1.0; 3], [1.0; 3], 40);
        let cells = v.inside_centres();
        let volume = cells.len() as f32 * v.cell_volume();
        assert!((volume / 0.9048 - 1.0).abs() < 0.02, "volume {volume}");
        for a in 0..3 {
            let mean = cells.iter().map(|p| p[a]).sum::<f32>() / cells.len() as f32;
            assert!((mean - centre[a]).abs() < 0.01, "axis {a}: {mean}");
        }
    }
}
