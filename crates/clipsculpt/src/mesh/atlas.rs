//! UV unwrapping (`docs/mesh.md`, "Texture"): axis-projected charts packed into a square.
//!
//! Each face takes the axis (±X, ±Y, ±Z) its normal points most along; labels are smoothed so that ripples do
//! not shred the charts (a face only joins an axis it faces by at least [`MIN_FACING`]). A chart grows over
//! edge-adjacent faces of one label and is projected orthographically on that axis's plane: every projected
//! triangle keeps its orientation, so neighbours cannot fold over each other, and a face whose projection would
//! overlap a non-neighbour of its chart starts a chart of its own. All charts share one texel density (the
//! detail is the texture's, whatever the polycount) and are shelf-packed with a gutter of [`PADDING`] texels.
//! The mesh is split at chart seams, so it has one UV per vertex.
//!
//! xatlas would cut better charts, but its Rust binding (`xatlas-rs` 0.1.3) names the C++ functions by their
//! MSVC-mangled symbols and does not link on Linux.

use std::collections::HashMap;

use super::error::ExportError;
use super::mesh::{cross3, dot3, sub3, Mesh};

/// Texels between charts (each side is dilated by half of it when baking).
pub(crate) const PADDING: u32 = 4;
/// Least cosine between a face's normal and the axis of a chart it joins through label smoothing.
const MIN_FACING: f64 = 0.3;
/// Label smoothing passes.
const SMOOTHING_PASSES: usize = 3;

/// The mesh split at chart seams and its UVs in [0, 1] (glTF's convention: v down from the top row), packed
/// into a square of `size` texels.
pub(crate) fn unwrap(mesh: &Mesh, size: u32) -> Result<(Mesh, Vec<[f32; 2]>), ExportError> {
    mesh.validate()?;
    if mesh.faces.is_empty() {
        return Err(ExportError::Invalid {
            what: "mesh",
            reason: "no faces to unwrap".into(),
        });
    }
    let normals: Vec<[f64; 3]> = mesh.faces.iter().map(|t| face_normal(mesh, t)).collect();
    let neighbours = edge_neighbours(&mesh.faces);
    let labels = smooth_labels(&normals, &neighbours);
    let charts = grow_charts(mesh, &labels, &neighbours);
    let placed = pack(&charts, size);
    Ok(split(mesh, &charts, &placed, size))
}

/// The unit normal of face `t` (zero for a degenerate face).
fn face_normal(mesh: &Mesh, t: &[u32; 3]) -> [f64; 3] {
    let [a, b, c] = t.map(|i| mesh.positions[i as usize].map(f64::from));
    let n = cross3(sub3(b, a), sub3(c, a));
    let l = dot3(n, n).sqrt();
    if l > 0.0 {
        n.map(|x| x / l)
    } else {
        [0.0; 3]
    }
}

/// The faces across each edge of every face (`u32::MAX` on a border or non-manifold edge).
fn edge_neighbours(faces: &[[u32; 3]]) -> Vec<[u32; 3]> {
    let mut by_edge: HashMap<(u32, u32), Vec<u32>> = HashMap::with_capacity(faces.len() * 3 / 2);
    for (f, t) in faces.iter().enumerate() {
        for k in 0..3 {
            let (a, b) = (t[k], t[(k + 1) % 3]);
            by_edge
                .entry((a.min(b), a.max(b)))
                .or_default()
                .push(f as u32);
        }
    }
    faces
        .iter()
        .enumerate()
        .map(|(f, t)| {
            [0, 1, 2].map(|k| {
                let (a, b) = (t[k], t[(k + 1) % 3]);
                match by_edge[&(a.min(b), a.max(b))].as_slice() {
                    [x, y] if *x == f as u32 => *y,
                    [x, y] if *y == f as u32 => *x,
                    _ => u32::MAX,
                }
            })
        })
        .collect()
}

/// Axis index 0..6 (+X, +Y, +Z, −X, −Y, −Z) and its unit vector.
fn axis(label: u8) -> [f64; 3] {
    let mut v = [0.0; 3];
    v[(label % 3) as usize] = if label < 3 { 1.0 } else { -1.0 };
    v
}

/// Each face's dominant axis, then [`SMOOTHING_PASSES`] passes that give a face the label two of its three
/// neighbours share, where it faces that axis by at least [`MIN_FACING`].
fn smooth_labels(normals: &[[f64; 3]], neighbours: &[[u32; 3]]) -> Vec<u8> {
    let mut labels: Vec<u8> = normals
        .iter()
        .map(|n| {
            let a = (0..3)
                .max_by(|&i, &j| n[i].abs().total_cmp(&n[j].abs()))
                .unwrap_or(2);
            if n[a] >= 0.0 {
                a as u8
            } else {
                a as u8 + 3
            }
        })
        .collect();
    for _ in 0..SMOOTHING_PASSES {
        let before = labels.clone();
        for (f, ns) in neighbours.iter().enumerate() {
            let l: Vec<u8> = ns
                .iter()
                .filter(|&&g| g != u32::MAX)
                .map(|&g| before[g as usize])
                .collect();
            for &cand in &l {
                let votes = l.iter().filter(|&&x| x == cand).count();
                if cand != before[f] && votes >= 2 && dot3(normals[f], axis(cand)) >= MIN_FACING {
                    labels[f] = cand;
                }
            }
        }
    }
    labels
}

/// One chart: its faces and their projected corners (world units, in the chart's plane).
struct Chart {
    faces: Vec<u32>,
    corners: Vec<[[f64; 2]; 3]>,
    lo: [f64; 2],
    hi: [f64; 2],
}

/// Projects `p` on the plane of axis `label`, keeping orientation (a face along the axis stays counter-clockwise).
fn project(p: [f32; 3], label: u8) -> [f64; 2] {
    let a = (label % 3) as usize;
    let (u, v) = ((a + 1) % 3, (a + 2) % 3);
    let (u, v) = if label < 3 { (u, v) } else { (v, u) };
    [f64::from(p[u]), f64::from(p[v])]
}

/// Grows charts breadth-first over edge-adjacent faces of one label; a face whose projection overlaps a face
/// of the chart it does not share an edge with is left for a later chart.
fn grow_charts(mesh: &Mesh, labels: &[u8], neighbours: &[[u32; 3]]) -> Vec<Chart> {
    let mut chart_of = vec![u32::MAX; mesh.faces.len()];
    let mut charts = Vec::new();
    let corners = |f: u32, label: u8| {
        mesh.faces[f as usize].map(|i| project(mesh.positions[i as usize], label))
    };
    for seed in 0..mesh.faces.len() as u32 {
        if chart_of[seed as usize] != u32::MAX {
            continue;
        }
        let id = charts.len() as u32;
        let label = labels[seed as usize];
        let mut chart = Chart {
            faces: Vec::new(),
            corners: Vec::new(),
            lo: [f64::INFINITY; 2],
            hi: [f64::NEG_INFINITY; 2],
        };
        let mut grid = OverlapGrid::new(mesh, seed);
        let mut queue = std::collections::VecDeque::from([seed]);
        chart_of[seed as usize] = id;
        while let Some(f) = queue.pop_front() {
            let c = corners(f, label);
            if f != seed && grid.overlaps(&c, &mesh.faces, f, &chart.faces, &chart.corners) {
                chart_of[f as usize] = u32::MAX;
                continue;
            }
            grid.insert(&c, chart.faces.len() as u32);
            for p in &c {
                (0..2).for_each(|k| {
                    chart.lo[k] = chart.lo[k].min(p[k]);
                    chart.hi[k] = chart.hi[k].max(p[k]);
                });
            }
            chart.faces.push(f);
            chart.corners.push(c);
            for &g in &neighbours[f as usize] {
                if g != u32::MAX && chart_of[g as usize] == u32::MAX && labels[g as usize] == label
                {
                    chart_of[g as usize] = id;
                    queue.push_back(g);
                }
            }
        }
        // Faces turned away are free again; a later seed picks them up.
        for &f in &chart.faces {
            chart_of[f as usize] = id;
        }
        charts.push(chart);
    }
    charts
}

/// A hash grid of a chart's projected triangles, for overlap queries.
struct OverlapGrid {
    cell: f64,
    cells: HashMap<(i64, i64), Vec<u32>>,
}

impl OverlapGrid {
    /// Cells about twice the length of the seed face's longest edge.
    fn new(mesh: &Mesh, seed: u32) -> Self {
        let [a, b, c] =
            mesh.faces[seed as usize].map(|i| mesh.positions[i as usize].map(f64::from));
        let len = |x: [f64; 3], y: [f64; 3]| dot3(sub3(x, y), sub3(x, y)).sqrt();
        let cell = 2.0 * len(a, b).max(len(b, c)).max(len(c, a)).max(1e-6);
        Self {
            cell,
            cells: HashMap::new(),
        }
    }

    fn keys(&self, c: &[[f64; 2]; 3]) -> impl Iterator<Item = (i64, i64)> {
        let k = |x: f64| (x / self.cell).floor() as i64;
        let lo = [0, 1].map(|a| k(c[0][a].min(c[1][a]).min(c[2][a])));
        let hi = [0, 1].map(|a| k(c[0][a].max(c[1][a]).max(c[2][a])));
        (lo[0]..=hi[0]).flat_map(move |x| (lo[1]..=hi[1]).map(move |y| (x, y)))
    }

    fn insert(&mut self, c: &[[f64; 2]; 3], slot: u32) {
        let keys: Vec<_> = self.keys(c).collect();
        for key in keys {
            self.cells.entry(key).or_default().push(slot);
        }
    }

    /// Whether `c` (face `f`) overlaps a chart face that shares no edge with `f`.
    fn overlaps(
        &self,
        c: &[[f64; 2]; 3],
        faces: &[[u32; 3]],
        f: u32,
        chart_faces: &[u32],
        chart_corners: &[[[f64; 2]; 3]],
    ) -> bool {
        let own = faces[f as usize];
        self.keys(c).any(|key| {
            self.cells.get(&key).is_some_and(|slots| {
                slots.iter().any(|&s| {
                    let other = faces[chart_faces[s as usize] as usize];
                    let shared = other.iter().filter(|v| own.contains(v)).count();
                    shared < 2 && triangles_overlap(c, &chart_corners[s as usize])
                })
            })
        })
    }
}

/// Whether two 2D triangles' interiors overlap (separating axis test, touching does not count).
fn triangles_overlap(a: &[[f64; 2]; 3], b: &[[f64; 2]; 3]) -> bool {
    let scale = a
        .iter()
        .chain(b)
        .flat_map(|p| p.iter().map(|x| x.abs()))
        .fold(1e-12, f64::max);
    let eps = 1e-9 * scale;
    for tri in [a, b] {
        for k in 0..3 {
            let (p, q) = (tri[k], tri[(k + 1) % 3]);
            let n = [q[1] - p[1], p[0] - q[0]];
            let span = |t: &[[f64; 2]; 3]| {
                t.iter()
                    .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
                        let d = n[0] * v[0] + n[1] * v[1];
                        (lo.min(d), hi.max(d))
                    })
            };
            let ((a0, a1), (b0, b1)) = (span(a), span(b));
            let len = (n[0] * n[0] + n[1] * n[1]).sqrt();
            if a1 <= b0 + eps * len || b1 <= a0 + eps * len {
                return false;
            }
        }
    }
    true
}

/// Where each chart's box goes (texels) at the texel density the packing chose.
struct Placement {
    texels_per_unit: f64,
    origin: Vec<[f64; 2]>,
}

/// Shelf-packs the charts' boxes (tallest first, each padded by [`PADDING`]) into `size`², at the largest
/// common density that fits (bisection).
fn pack(charts: &[Chart], size: u32) -> Placement {
    let mut order: Vec<usize> = (0..charts.len()).collect();
    order.sort_by(|&i, &j| {
        let h = |c: &Chart| c.hi[1] - c.lo[1];
        h(&charts[j]).total_cmp(&h(&charts[i]))
    });
    let side = f64::from(size);
    let pad = f64::from(PADDING);
    let try_pack = |tpu: f64| -> Option<Vec<[f64; 2]>> {
        let mut origin = vec![[0.0; 2]; charts.len()];
        let (mut x, mut y, mut row) = (0.0f64, 0.0f64, 0.0f64);
        for &i in &order {
            let c = &charts[i];
            let w = ((c.hi[0] - c.lo[0]) * tpu).ceil() + pad;
            let h = ((c.hi[1] - c.lo[1]) * tpu).ceil() + pad;
            if x + w > side {
                (x, y, row) = (0.0, y + row, 0.0);
            }
            if x + w > side || y + h > side {
                return None;
            }
            origin[i] = [x + pad / 2.0, y + pad / 2.0];
            (x, row) = (x + w, row.max(h));
        }
        Some(origin)
    };
    let biggest = charts
        .iter()
        .map(|c| (c.hi[0] - c.lo[0]).max(c.hi[1] - c.lo[1]))
        .fold(1e-9, f64::max);
    let (mut lo, mut hi) = (0.0, side / biggest);
    for _ in 0..40 {
        let mid = 0.5 * (lo + hi);
        if try_pack(mid).is_some() {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Placement {
        texels_per_unit: lo,
        origin: try_pack(lo).unwrap_or_else(|| vec![[0.0; 2]; charts.len()]),
    }
}

/// The mesh with one vertex per (vertex, chart) and the UVs of each.
fn split(mesh: &Mesh, charts: &[Chart], placed: &Placement, size: u32) -> (Mesh, Vec<[f32; 2]>) {
    let mut out = Mesh::default();
    let mut uvs = Vec::new();
    let mut faces = vec![[0u32; 3]; mesh.faces.len()];
    let mut index: HashMap<(u32, u32), u32> = HashMap::new();
    let side = f64::from(size);
    for (id, chart) in charts.iter().enumerate() {
        for (f, corners) in chart.faces.iter().zip(&chart.corners) {
            let t = mesh.faces[*f as usize];
            for k in 0..3 {
                let v = t[k];
                let slot = *index.entry((v, id as u32)).or_insert_with(|| {
                    let uv = [0, 1].map(|a| {
                        let texel = placed.origin[id][a]
                            + (corners[k][a] - chart.lo[a]) * placed.texels_per_unit;
                        (texel / side).clamp(0.0, 1.0) as f32
                    });
                    out.positions.push(mesh.positions[v as usize]);
                    out.normals.push(mesh.normals[v as usize]);
                    out.colours.push(mesh.colours[v as usize]);
                    uvs.push(uv);
                    (out.positions.len() - 1) as u32
                });
                faces[*f as usize][k] = slot;
            }
        }
    }
    out.faces = faces;
    (out, uvs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::bake::surface_points;
    use crate::mesh::grid::{Bounds, Grid};
    use crate::mesh::marching_cubes::{marching_cubes, McOptions};
    use crate::mesh::shapes;
    use crate::mesh::simplify::simplify;

    pub(crate) fn torus(faces: usize) -> Mesh {
        let g = Grid::from_fn(40, Bounds::SHAP_E, |p| shapes::torus(p, 0.55, 0.22)).unwrap();
        let full = marching_cubes(&g, &McOptions::default()).unwrap();
        simplify(&full, faces).unwrap().0
    }

    /// No two triangles overlap in UV space, every triangle keeps a positive UV area and the texels of its
    /// centroid, and the split mesh has the same faces at the same places.
    #[test]
    fn the_atlas_has_no_overlaps_and_every_triangle_has_texels() {
        let size = 256;
        for faces in [2000, 300] {
            let m = torus(faces);
            let (u, uvs) = unwrap(&m, size).unwrap();
            assert_eq!(u.faces.len(), m.faces.len());
            for (a, b) in u.faces.iter().zip(&m.faces) {
                assert_eq!(
                    a.map(|i| u.positions[i as usize]),
                    b.map(|i| m.positions[i as usize])
                );
            }
            let tris: Vec<[[f64; 2]; 3]> = u
                .faces
                .iter()
                .map(|t| t.map(|i| uvs[i as usize].map(|x| f64::from(x) * f64::from(size))))
                .collect();
            for (i, a) in tris.iter().enumerate() {
                let area = (a[1][0] - a[0][0]) * (a[2][1] - a[0][1])
                    - (a[1][1] - a[0][1]) * (a[2][0] - a[0][0]);
                assert!(area > 0.0, "{faces}: triangle {i} has UV area {area}");
                for b in &tris[i + 1..] {
                    assert!(!triangles_overlap(a, b), "{faces}: {a:?} overlaps {b:?}");
                }
            }
            let covered: std::collections::HashSet<u32> =
                surface_points(&u, &uvs, size).index.into_iter().collect();
            for a in &tris {
                let c = [0, 1].map(|k| ((a[0][k] + a[1][k] + a[2][k]) / 3.0).floor() as u32);
                assert!(covered.contains(&(c[1] * size + c[0])), "{faces}: {a:?}");
            }
        }
    }
}
