//! The toy evaluator: judges an exported [`Mesh`] without CLIP, against the analytic ground truth of the toy
//! world (`docs/toy-world.md`; metrics in `docs/mesh.md`, "Evaluation by voxelisation").
//!
//! * **Shape.** The mesh is voxelised by ray parity ([`crate::voxel`]) over its bounding box. For each
//!   [`Shape`], the canonical shape is scaled to the mesh's volume, its volume centroid is put on the mesh's, and it
//!   is turned about +Z over a sweep of yaws (none for shapes symmetric about Z); the score is the best volumetric
//!   IoU `I / (V_mesh + V_shape − I)`, the intersection counted on the mesh's inside cells.
//! * **Colour.** The area-weighted mean vertex colour (linear RGB) goes to CIE Lab (D65) and takes the nearest
//!   [`Colour`] by ΔE*76.

use serde::{Deserialize, Serialize};

use crate::voxel::voxelise;
use crate::world::{rotate_z, Colour, Shape};
use clipsculpt::mesh::Mesh;

/// Evaluator settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EvalOptions {
    /// Voxels per axis over the mesh's bounding box.
    pub resolution: usize,
    /// Yaws tried over one symmetry period, for shapes not symmetric about +Z.
    pub yaw_steps: usize,
}

impl Default for EvalOptions {
    fn default() -> Self {
        Self {
            resolution: 40,
            yaw_steps: 12,
        }
    }
}

/// One shape's best IoU with the mesh.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ShapeScore {
    /// The candidate shape.
    pub shape: Shape,
    /// Best volumetric IoU over the yaw sweep, in [0, 1].
    pub iou: f32,
    /// The yaw (radians) that achieved it.
    pub yaw: f32,
}

/// The verdict on one mesh.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Classification {
    /// The best-matching shape.
    pub shape: Shape,
    /// Its IoU.
    pub shape_iou: f32,
    /// Every shape, best first.
    pub ranking: Vec<ShapeScore>,
    /// The nearest colour name.
    pub colour: Colour,
    /// ΔE*76 from the mean colour to that colour's canonical value.
    pub colour_distance: f32,
    /// Area-weighted mean vertex colour, linear RGB.
    pub mean_colour: [f32; 3],
    /// Connected components of the mesh (1 for every toy object).
    pub components: usize,
    /// Euler characteristic V − E + F (2 for a sphere-like piece, 0 for the torus).
    pub euler: i64,
}

/// Why a mesh cannot be judged.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum EvalError {
    /// No triangles.
    #[error("mesh has no triangles, so there is nothing to classify; check that the export found a surface")]
    Empty,
    /// Array lengths or indices are inconsistent.
    #[error("mesh is malformed: {0}")]
    Malformed(String),
    /// Positions or colours hold NaN or infinity.
    #[error("mesh has {0} non-finite positions or colours; the field produced NaN or inf")]
    NonFinite(usize),
    /// Every triangle has zero area.
    #[error(
        "mesh has zero surface area, so its colour is undefined; every triangle is degenerate"
    )]
    ZeroArea,
    /// The mesh encloses no volume at the voxel resolution (flat, open or tiny).
    #[error(
        "mesh encloses no volume on a {resolution}³ voxel grid (bounding box {extent:?}); it is flat, open or \
         degenerate"
    )]
    NoVolume {
        /// Voxels per axis.
        resolution: usize,
        /// Size of the bounding box per axis.
        extent: [f32; 3],
    },
    /// Guidance stopped before there was a mesh (its loss stayed non-finite): the run exported
    /// nothing and counts as wrong.
    #[error("guidance stopped, nothing was exported: {0}")]
    GuidanceStopped(String),
}

/// Classifies `mesh` by shape and colour with the default [`EvalOptions`].
pub fn classify(mesh: &Mesh) -> Result<Classification, EvalError> {
    classify_with(mesh, &EvalOptions::default())
}

/// Classifies `mesh` by shape ([`shape_scores`]) and colour ([`mean_colour`], [`nearest_colour`]).
pub fn classify_with(mesh: &Mesh, opts: &EvalOptions) -> Result<Classification, EvalError> {
    let ranking = shape_scores(mesh, opts)?;
    let mean = mean_colour(mesh)?;
    let (colour, colour_distance) = nearest_colour(mean);
    // ok: shape_scores returns one score per shape, and Shape::ALL is not empty.
    let best = ranking[0];
    let stats = mesh.stats();
    Ok(Classification {
        components: stats.components,
        euler: stats.euler,
        shape: best.shape,
        shape_iou: best.iou,
        ranking,
        colour,
        colour_distance,
        mean_colour: mean,
    })
}

/// Best IoU of `mesh` against every [`Shape`], best first (see the module docs).
pub fn shape_scores(mesh: &Mesh, opts: &EvalOptions) -> Result<Vec<ShapeScore>, EvalError> {
    check(mesh)?;
    let n = opts.resolution.clamp(8, 256);
    let (lo, hi) = mesh.bounds();
    let extent = [0, 1, 2].map(|a| hi[a] - lo[a]);
    // Pad the box by half a cell so that cells on the surface are not cut off.
    let pad = extent.map(|e| e / (2 * n) as f32);
    let (blo, bhi) = (
        [0, 1, 2].map(|a| lo[a] - pad[a]),
        [0, 1, 2].map(|a| hi[a] + pad[a]),
    );
    let no_volume = EvalError::NoVolume {
        resolution: n,
        extent,
    };
    if extent.iter().any(|&e| e.is_nan() || e <= 0.0) {
        return Err(no_volume);
    }
    let voxels = voxelise(mesh, blo, bhi, n);
    let cells = voxels.inside_centres();
    if cells.is_empty() {
        return Err(no_volume);
    }
    let volume = cells.len() as f32 * voxels.cell_volume();
    let count = cells.len() as f32;
    let centroid = [0, 1, 2].map(|a| cells.iter().map(|p| p[a]).sum::<f32>() / count);
    let mut scores: Vec<ShapeScore> = Shape::ALL
        .into_iter()
        .map(|shape| {
            let k = (volume / shape.canonical_volume()).cbrt();
            // Canonical coordinates: q = R(−yaw)·(p − c)/k + (0, 0, z̄), z̄ the canonical centroid height.
            let local: Vec<[f32; 3]> = cells
                .iter()
                .map(|p| {
                    let d = [0, 1, 2].map(|a| (p[a] - centroid[a]) / k);
                    [d[0], d[1], d[2] + shape.canonical_centroid_z()]
                })
                .collect();
            let yaws: Vec<f32> = match shape.yaw_period() {
                Some(period) => {
                    let steps = opts.yaw_steps.max(1);
                    (0..steps)
                        .map(|i| period * i as f32 / steps as f32)
                        .collect()
                }
                None => vec![0.0],
            };
            let mut best = ShapeScore {
                shape,
                iou: 0.0,
                yaw: 0.0,
            };
            for yaw in yaws {
                let hits = local
                    .iter()
                    .filter(|q| shape.canonical_sdf(rotate_z(**q, -yaw)) > 0.0)
                    .count() as f32;
                // Both solids have `count` cells' volume; the intersection has `hits`.
                let iou = hits / (2.0 * count - hits);
                if iou > best.iou {
                    best = ShapeScore { shape, iou, yaw };
                }
            }
            best
        })
        .collect();
    scores.sort_by(|a, b| b.iou.total_cmp(&a.iou));
    Ok(scores)
}

/// Mean vertex colour (linear RGB), each vertex weighted by a third of the area of its faces.
pub fn mean_colour(mesh: &Mesh) -> Result<[f32; 3], EvalError> {
    check(mesh)?;
    let mut weight = vec![0.0f64; mesh.positions.len()];
    for face in &mesh.faces {
        let [a, b, c] = face.map(|i| mesh.positions[i as usize].map(f64::from));
        let (u, v) = (
            [0, 1, 2].map(|k| b[k] - a[k]),
            [0, 1, 2].map(|k| c[k] - a[k]),
        );
        let cross = [
            u[1] * v[2] - u[2] * v[1],
            u[2] * v[0] - u[0] * v[2],
            u[0] * v[1] - u[1] * v[0],
        ];
        let area = (cross.iter().map(|x| x * x).sum::<f64>()).sqrt() / 2.0;
        for &i in face {
            weight[i as usize] += area / 3.0;
        }
    }
    let total: f64 = weight.iter().sum();
    if total.is_nan() || total <= 0.0 {
        return Err(EvalError::ZeroArea);
    }
    let mut sum = [0.0f64; 3];
    for (c, w) in mesh.colours.iter().zip(&weight) {
        for k in 0..3 {
            sum[k] += f64::from(c[k].clamp(0.0, 1.0)) * w;
        }
    }
    Ok(sum.map(|s| (s / total) as f32))
}

/// The colour name nearest to a linear RGB colour in CIE Lab, with the ΔE*76 distance.
pub fn nearest_colour(linear: [f32; 3]) -> (Colour, f32) {
    let lab = linear_to_lab(linear);
    Colour::ALL
        .into_iter()
        .map(|c| {
            let d = linear_to_lab(c.linear());
            let dist = [0, 1, 2]
                .map(|k| (lab[k] - d[k]).powi(2))
                .iter()
                .sum::<f32>()
                .sqrt();
            (c, dist)
        })
        .min_by(|a, b| a.1.total_cmp(&b.1))
        // ok: Colour::ALL is a non-empty constant.
        .expect("Colour::ALL is not empty") // ok: constant non-empty list
}

/// Linear sRGB (D65) to CIE L*a*b*.
pub fn linear_to_lab(rgb: [f32; 3]) -> [f32; 3] {
    let [r, g, b] = rgb.map(|c| c.clamp(0.0, 1.0));
    let xyz = [
        0.412_456_4 * r + 0.357_576_1 * g + 0.180_437_5 * b,
        0.212_672_9 * r + 0.715_152_2 * g + 0.072_175 * b,
        0.019_333_9 * r + 0.119_192 * g + 0.950_304_1 * b,
    ];
    let white = [0.950_47, 1.0, 1.088_83];
    let f = |t: f32| {
        if t > 216.0 / 24389.0 {
            t.cbrt()
        } else {
            (24389.0 / 27.0 * t + 16.0) / 116.0
        }
    };
    let [fx, fy, fz] = [0, 1, 2].map(|k| f(xyz[k] / white[k]));
    [116.0 * fy - 16.0, 500.0 * (fx - fy), 200.0 * (fy - fz)]
}

/// Rejects meshes the evaluator cannot read: empty, malformed, non-finite.
fn check(mesh: &Mesh) -> Result<(), EvalError> {
    if mesh.faces.is_empty() {
        return Err(EvalError::Empty);
    }
    mesh.validate()
        .map_err(|e| EvalError::Malformed(e.to_string()))?;
    let bad = mesh
        .positions
        .iter()
        .chain(&mesh.colours)
        .filter(|v| !v.iter().all(|x| x.is_finite()))
        .count();
    if bad > 0 {
        return Err(EvalError::NonFinite(bad));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::world::{combinations, WorldObject};
    use candle_core::Device;
    use clipsculpt::autodiff::rng::Rng;
    use clipsculpt::mesh::field::DEFAULT_CHUNK;
    use clipsculpt::mesh::{marching_cubes, sample_colours, sample_grid, Bounds, McOptions};

    /// Marching cubes of `obj` at `n`³ over [−1, 1]³, coloured from the field.
    fn mesh_of(obj: &WorldObject, n: usize) -> Mesh {
        let grid = sample_grid(obj, &Device::Cpu, n, Bounds::SHAP_E, DEFAULT_CHUNK).unwrap();
        let mut mesh = marching_cubes(&grid, &McOptions::default()).unwrap();
        mesh.colours = sample_colours(obj, &Device::Cpu, &mesh.positions, DEFAULT_CHUNK).unwrap();
        mesh
    }

    #[test]
    fn ground_truth_meshes_are_classified_correctly() {
        // Every shape × colour, each with its own random size, yaw and shade, meshed at 64³: all must be right.
        // The margin (best IoU − runner-up) shows how safely the shapes are told apart.
        let mut rng = Rng::new(2024);
        let (mut worst_iou, mut worst_margin) = (1.0f32, 1.0f32);
        for (shape, colour) in combinations() {
            let obj = WorldObject::random(shape, colour, &mut rng);
            let verdict = classify(&mesh_of(&obj, 64)).unwrap();
            assert_eq!(
                (verdict.shape, verdict.colour),
                (shape, colour),
                "{obj:?}: {verdict:?}"
            );
            worst_iou = worst_iou.min(verdict.shape_iou);
            worst_margin = worst_margin.min(verdict.shape_iou - verdict.ranking[1].iou);
        }
        eprintln!(
            "ground truth: 36/36, lowest IoU {worst_iou:.3}, smallest margin {worst_margin:.3}"
        );
        assert!(worst_iou > 0.9, "lowest IoU {worst_iou}");
        assert!(worst_margin > 0.05, "smallest margin {worst_margin}");
    }

    #[test]
    fn verdicts_survive_other_seeds_translation_and_coarse_meshes() {
        // Two more variations per combination: one moved off-centre (meshed at 64³), one meshed at 32³.
        let mut rng = Rng::new(7);
        for (shape, colour) in combinations() {
            let mut shifted = mesh_of(&WorldObject::random(shape, colour, &mut rng), 64);
            for p in &mut shifted.positions {
                *p = [p[0] + 0.1, p[1] - 0.05, p[2] + 0.08];
            }
            let coarse = mesh_of(&WorldObject::random(shape, colour, &mut rng), 32);
            for mesh in [shifted, coarse] {
                let v = classify(&mesh).unwrap();
                assert_eq!((v.shape, v.colour), (shape, colour), "{v:?}");
            }
        }
    }

    #[test]
    fn empty_and_degenerate_meshes_are_errors() {
        assert_eq!(classify(&Mesh::default()).unwrap_err(), EvalError::Empty);
        // One flat triangle: valid indices, no volume.
        let flat = Mesh {
            positions: vec![[0.0; 3], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]],
            normals: vec![[0.0, 0.0, 1.0]; 3],
            colours: vec![[0.5; 3]; 3],
            faces: vec![[0, 1, 2]],
        };
        assert!(matches!(classify(&flat), Err(EvalError::NoVolume { .. })));
        let mut bad = flat.clone();
        bad.faces.push([0, 1, 7]);
        assert!(matches!(classify(&bad), Err(EvalError::Malformed(_))));
        let mut nan = flat.clone();
        nan.positions[1][0] = f32::NAN;
        assert_eq!(classify(&nan).unwrap_err(), EvalError::NonFinite(1));
        // All vertices on one point: zero area everywhere.
        let mut point = flat;
        point.positions = vec![[0.2; 3]; 3];
        assert!(classify(&point).is_err());
    }

    #[test]
    fn canonical_colours_are_their_own_nearest() {
        for c in Colour::ALL {
            let (found, dist) = nearest_colour(c.linear());
            assert_eq!((found, dist), (c, 0.0));
        }
        // Lab anchors: white (1, 1, 1) is L* = 100, a* = b* = 0; black is L* = 0.
        let w = linear_to_lab([1.0; 3]);
        assert!(
            (w[0] - 100.0).abs() < 0.01 && w[1].abs() < 0.01 && w[2].abs() < 0.01,
            "{w:?}"
        );
        assert!(linear_to_lab([0.0; 3])[0].abs() < 1e-4);
    }
}
