//! [`Mesh`]: an indexed triangle mesh with per-vertex normals and linear colours, and [`MeshStats`], the quality
//! gates of `docs/mesh.md` (watertight, edge-manifold, consistent winding, positive volume, Euler χ).

use super::error::ExportError;

/// Colour given to vertices before any colour is sampled (linear mid grey).
pub(crate) const DEFAULT_COLOUR: [f32; 3] = [0.5, 0.5, 0.5];

/// An indexed triangle mesh in the field's frame (Shap-E: right-handed, +Z up; see [`super::axes`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Mesh {
    /// Vertex positions.
    pub positions: Vec<[f32; 3]>,
    /// Unit vertex normals pointing out of the solid.
    pub normals: Vec<[f32; 3]>,
    /// Linear RGB per vertex in [0, 1].
    pub colours: Vec<[f32; 3]>,
    /// Triangles, counter-clockwise seen from outside.
    pub faces: Vec<[u32; 3]>,
}

/// Topology and orientation measures of a mesh.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct MeshStats {
    /// Vertex count.
    pub vertices: usize,
    /// Triangle count.
    pub faces: usize,
    /// Distinct undirected edges.
    pub edges: usize,
    /// Edges used by exactly one face (holes).
    pub(crate) boundary_edges: usize,
    /// Edges used by more than two faces.
    pub(crate) non_manifold_edges: usize,
    /// Two-face edges not traversed once in each direction (flipped neighbours).
    pub(crate) inconsistent_edges: usize,
    /// Faces with a repeated index or zero area.
    pub(crate) degenerate_faces: usize,
    /// Vertices no face uses.
    pub(crate) unreferenced_vertices: usize,
    /// Non-finite coordinates, normals or colours.
    pub(crate) non_finite_values: usize,
    /// Connected components (over faces).
    pub components: usize,
    /// Σ v0·(v1×v2)/6; positive for outward winding.
    pub signed_volume: f64,
    /// Total surface area.
    pub(crate) area: f64,
    /// Euler characteristic V − E + F (2 per sphere-like component, 0 per torus).
    pub euler: i64,
}

impl MeshStats {
    /// Closed and edge-manifold: every edge is shared by exactly two faces.
    pub fn is_watertight(&self) -> bool {
        self.boundary_edges == 0 && self.non_manifold_edges == 0
    }

    /// Watertight, consistently wound, outward (positive volume), no degenerate or non-finite data.
    pub fn is_clean_solid(&self) -> bool {
        self.is_watertight()
            && self.inconsistent_edges == 0
            && self.degenerate_faces == 0
            && self.non_finite_values == 0
            && self.unreferenced_vertices == 0
            && self.signed_volume > 0.0
    }
}

impl Mesh {
    /// Axis-aligned bounds (min, max) of the positions; zeros when empty.
    pub fn bounds(&self) -> ([f32; 3], [f32; 3]) {
        if self.positions.is_empty() {
            return ([0.0; 3], [0.0; 3]);
        }
        self.positions.iter().fold(
            ([f32::INFINITY; 3], [f32::NEG_INFINITY; 3]),
            |(lo, hi), p| {
                (
                    [0, 1, 2].map(|a| lo[a].min(p[a])),
                    [0, 1, 2].map(|a| hi[a].max(p[a])),
                )
            },
        )
    }

    /// Checks array lengths and index bounds (what every writer needs).
    pub fn validate(&self) -> Result<(), ExportError> {
        let n = self.positions.len();
        let invalid = |reason: String| {
            Err(ExportError::Invalid {
                what: "mesh",
                reason,
            })
        };
        if self.normals.len() != n || self.colours.len() != n {
            return invalid(format!(
                "{n} positions but {} normals and {} colours",
                self.normals.len(),
                self.colours.len()
            ));
        }
        if n > u32::MAX as usize {
            return invalid(format!("{n} vertices exceed the u32 index range"));
        }
        if let Some((f, face)) = self
            .faces
            .iter()
            .enumerate()
            .find(|(_, t)| t.iter().any(|&i| i as usize >= n))
        {
            return invalid(format!("face {f} {face:?} indexes past {n} vertices"));
        }
        Ok(())
    }

    /// Computes [`MeshStats`] (sorts the directed edges; O(F log F)).
    pub fn stats(&self) -> MeshStats {
        let n = self.positions.len();
        let mut s = MeshStats {
            vertices: n,
            faces: self.faces.len(),
            ..MeshStats::default()
        };
        let finite = |v: &[f32; 3]| v.iter().all(|x| x.is_finite());
        s.non_finite_values = [&self.positions, &self.normals, &self.colours]
            .iter()
            .map(|a| a.iter().filter(|v| !finite(v)).count())
            .sum();
        let mut used = vec![false; n];
        let mut parent: Vec<u32> = (0..n as u32).collect();
        // (undirected key, 1 if stored reversed)
        let mut edges: Vec<(u64, u8)> = Vec::with_capacity(self.faces.len() * 3);
        for t in &self.faces {
            if t.iter().any(|&i| i as usize >= n) {
                s.degenerate_faces += 1;
                continue;
            }
            let [a, b, c] = t.map(|i| self.positions[i as usize].map(f64::from));
            let cross = cross3(sub3(b, a), sub3(c, a));
            let double_area = dot3(cross, cross).sqrt();
            s.area += double_area / 2.0;
            s.signed_volume += dot3(a, cross3(b, c)) / 6.0;
            if t[0] == t[1] || t[1] == t[2] || t[0] == t[2] || double_area == 0.0 {
                s.degenerate_faces += 1;
            }
            for k in 0..3 {
                let (u, v) = (t[k], t[(k + 1) % 3]);
                used[u as usize] = true;
                union(&mut parent, u, v);
                let (lo, hi, rev) = if u < v { (u, v, 0) } else { (v, u, 1) };
                edges.push(((lo as u64) << 32 | hi as u64, rev));
            }
        }
        edges.sort_unstable();
        for group in edges.chunk_by(|x, y| x.0 == y.0) {
            s.edges += 1;
            match group.len() {
                1 => s.boundary_edges += 1,
                2 if group[0].1 == group[1].1 => s.inconsistent_edges += 1,
                2 => {}
                _ => s.non_manifold_edges += 1,
            }
        }
        s.unreferenced_vertices = used.iter().filter(|u| !**u).count();
        s.components = (0..n as u32)
            .filter(|&v| used[v as usize] && find(&mut parent, v) == v)
            .count();
        s.euler = (n - s.unreferenced_vertices) as i64 - s.edges as i64 + s.faces as i64;
        s
    }
}

fn find(parent: &mut [u32], mut v: u32) -> u32 {
    while parent[v as usize] != v {
        parent[v as usize] = parent[parent[v as usize] as usize];
        v = parent[v as usize];
    }
    v
}

fn union(parent: &mut [u32], a: u32, b: u32) {
    let (ra, rb) = (find(parent, a), find(parent, b));
    if ra != rb {
        parent[ra.max(rb) as usize] = ra.min(rb);
    }
}

pub(crate) fn sub3(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [a[0] - b[0], a[1] - b[1], a[2] - b[2]]
}

pub(crate) fn cross3(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}

pub(crate) fn dot3(a: [f64; 3], b: [f64; 3]) -> f64 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Unit tetrahedron (0,0,0), (1,0,0), (0,1,0), (0,0,1), wound outward: volume 1/6, χ = 4 − 6 + 4 = 2.
    pub(crate) fn tetra() -> Mesh {
        let positions = vec![
            [0.0, 0.0, 0.0],
            [1.0, 0.0, 0.0],
            [0.0, 1.0, 0.0],
            [0.0, 0.0, 1.0],
        ];
        Mesh {
            normals: vec![[0.0, 0.0, 1.0]; 4],
            colours: vec![DEFAULT_COLOUR; 4],
            positions,
            faces: vec![[0, 2, 1], [0, 1, 3], [0, 3, 2], [1, 2, 3]],
        }
    }

    #[test]
    fn tetrahedron_is_a_clean_solid() {
        let s = tetra().stats();
        assert!(s.is_clean_solid(), "{s:?}");
        assert!((s.signed_volume - 1.0 / 6.0).abs() < 1e-12);
        assert_eq!((s.edges, s.euler, s.components), (6, 2, 1));
    }

    #[test]
    fn flipped_face_and_hole_are_detected() {
        let mut m = tetra();
        m.faces[3] = [1, 3, 2];
        let s = m.stats();
        assert_eq!(s.inconsistent_edges, 3);
        m.faces.pop();
        let s = m.stats();
        assert_eq!(s.boundary_edges, 3);
        assert!(!s.is_watertight());
    }

    #[test]
    fn validate_catches_bad_indices_and_lengths() {
        let mut m = tetra();
        assert!(m.validate().is_ok());
        m.faces.push([0, 1, 9]);
        assert!(m.validate().unwrap_err().to_string().contains("face 4"));
        let mut m = tetra();
        m.normals.pop();
        assert!(m.validate().is_err());
    }
}
