//! Marching-cubes case tables, generated at first use from the cube's geometry instead of typed in.
//!
//! Numbering follows Shap-E's `MeshDecoder` (`docs/shap-e.md`, "Mesh extraction"): corner `c = dx + 2·dy + 4·dz`;
//! local edges 0–3 run along x at (dy, dz) = (0,0), (1,0), (0,1), (1,1); 4–7 along y at (dx, dz); 8–11 along z
//! at (dx, dy). A case index has bit `c` set when corner `c` is inside (value above the level).
//!
//! Construction: on each cube face, the crossed edges are joined by segments that cut off the inside corners; a
//! face with two diagonal inside corners (the ambiguous case) always separates them. Because that choice depends only
//! on the face's own corners, two cubes sharing a face make the same choice and the surface has no cracks. The
//! segments form closed loops (every crossed edge lies on exactly two faces); each loop is oriented so that its
//! normal points from the inside corners to the outside ones and is fan-triangulated. This is the rule Shap-E's
//! table follows as well (same triangle count per case, checked by `tests/mesh.rs` against the committed fixture).

use std::sync::OnceLock;

/// Most triangles any case produces.
pub(crate) const MAX_TRIS: usize = 5;

/// Corner pairs of the 12 local edges (lower corner index first).
pub(crate) const EDGE_CORNERS: [[u8; 2]; 12] = [
    [0, 1],
    [2, 3],
    [4, 5],
    [6, 7],
    [0, 2],
    [1, 3],
    [4, 6],
    [5, 7],
    [0, 4],
    [1, 5],
    [2, 6],
    [3, 7],
];

/// The triangles of one case: `tris[..count]`, each three local edge ids in outward (CCW) order.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Case {
    /// Number of triangles.
    pub(crate) count: u8,
    /// Local edge ids per triangle.
    pub(crate) tris: [[u8; 3]; MAX_TRIS],
}

/// The 256 cases, built once.
pub(crate) fn cases() -> &'static [Case; 256] {
    static TABLE: OnceLock<[Case; 256]> = OnceLock::new();
    TABLE.get_or_init(build)
}

/// Offset (dx, dy, dz) of a corner.
fn corner_offset(c: u8) -> [i32; 3] {
    [(c & 1) as i32, ((c >> 1) & 1) as i32, ((c >> 2) & 1) as i32]
}

/// Local edge id joining two corners, if they share an edge.
fn edge_between(a: u8, b: u8) -> Option<usize> {
    let (lo, hi) = if a < b { (a, b) } else { (b, a) };
    EDGE_CORNERS.iter().position(|e| e[0] == lo && e[1] == hi)
}

/// The six faces as corner cycles (each consecutive pair, wrapping, shares an edge).
const FACES: [[u8; 4]; 6] = [
    [0, 2, 6, 4], // x = 0
    [1, 3, 7, 5], // x = 1
    [0, 1, 5, 4], // y = 0
    [2, 3, 7, 6], // y = 1
    [0, 1, 3, 2], // z = 0
    [4, 5, 7, 6], // z = 1
];

fn build() -> [Case; 256] {
    let mut table = [Case::default(); 256];
    for (index, case) in table.iter_mut().enumerate() {
        *case = build_case(index as u8);
    }
    table
}

fn build_case(index: u8) -> Case {
    let inside = |c: u8| index & (1 << c) != 0;
    // Undirected segments between crossed edges, per face.
    let mut neighbours: [Vec<usize>; 12] = Default::default();
    for face in FACES {
        // ok: consecutive corners of a cube face always share an edge (internal invariant).
        let edge = |k: usize| {
            let e = edge_between(face[k], face[(k + 1) % 4]);
            e.expect("face cycle corners share edges (bug)") // ok: table invariant
        };
        let crossed: Vec<usize> = (0..4)
            .filter(|&k| inside(face[k]) != inside(face[(k + 1) % 4]))
            .collect();
        let mut link = |a: usize, b: usize| {
            neighbours[a].push(b);
            neighbours[b].push(a);
        };
        match crossed.len() {
            0 => {}
            2 => link(edge(crossed[0]), edge(crossed[1])),
            4 => {
                // Ambiguous face: cut off each inside corner (corner k touches face edges k-1 and k).
                for k in (0..4).filter(|&k| inside(face[k])) {
                    link(edge((k + 3) % 4), edge(k));
                }
            }
            n => unreachable!("a face has an even number of crossed edges, got {n} (bug)"),
        }
    }
    let mut case = Case::default();
    let mut visited = [false; 12];
    for start in 0..12 {
        if visited[start] || neighbours[start].is_empty() {
            continue;
        }
        let mut ring = vec![start];
        visited[start] = true;
        let (mut prev, mut cur) = (start, neighbours[start][0]);
        while cur != start {
            ring.push(cur);
            visited[cur] = true;
            let next = if neighbours[cur][0] == prev {
                neighbours[cur][1]
            } else {
                neighbours[cur][0]
            };
            (prev, cur) = (cur, next);
        }
        if !faces_outward(&ring, inside) {
            ring.reverse();
        }
        for k in 1..ring.len() - 1 {
            let slot = case.count as usize;
            case.tris[slot] = [ring[0] as u8, ring[k] as u8, ring[k + 1] as u8];
            case.count += 1;
        }
    }
    case
}

/// Whether a loop of edge midpoints winds CCW around the direction from its inside corners to its outside ones.
fn faces_outward(ring: &[usize], inside: impl Fn(u8) -> bool) -> bool {
    let mid = |e: usize| {
        let [a, b] = EDGE_CORNERS[e].map(corner_offset);
        [0, 1, 2].map(|i| (a[i] + b[i]) as f32 * 0.5)
    };
    let mut normal = [0.0f32; 3];
    let mut outward = [0.0f32; 3];
    for (k, &e) in ring.iter().enumerate() {
        let (p, q) = (mid(e), mid(ring[(k + 1) % ring.len()]));
        // Newell's method for the polygon normal.
        normal[0] += (p[1] - q[1]) * (p[2] + q[2]);
        normal[1] += (p[2] - q[2]) * (p[0] + q[0]);
        normal[2] += (p[0] - q[0]) * (p[1] + q[1]);
        let [a, b] = EDGE_CORNERS[e];
        let (inner, outer) = if inside(a) { (a, b) } else { (b, a) };
        let (i, o) = (corner_offset(inner), corner_offset(outer));
        for d in 0..3 {
            outward[d] += (o[d] - i[d]) as f32;
        }
    }
    normal.iter().zip(outward).map(|(n, o)| n * o).sum::<f32>() > 0.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_and_full_cases_have_no_triangles() {
        assert_eq!(cases()[0].count, 0);
        assert_eq!(cases()[255].count, 0);
    }

    #[test]
    fn single_corner_is_one_outward_triangle() {
        // Corner 0 inside: the triangle joins the x, y and z edges at the origin, wound x → y → z so that its
        // normal (1,1,1) points away from the inside corner.
        let c = cases()[1];
        assert_eq!(c.count, 1);
        let t = c.tris[0];
        assert!([[0, 4, 8], [4, 8, 0], [8, 0, 4]].contains(&t), "{t:?}");
    }

    #[test]
    fn ambiguous_face_separates_inside_corners() {
        // Corners 0 and 3 (diagonal on z = 0): two separate triangles; the complement joins them in one band.
        assert_eq!(cases()[0b0000_1001].count, 2);
        assert_eq!(cases()[0b1111_0110].count, 4);
    }

    #[test]
    fn every_crossed_edge_is_used_and_no_other() {
        for (index, case) in cases().iter().enumerate() {
            let mut used = [false; 12];
            for t in &case.tris[..case.count as usize] {
                for &e in t {
                    used[e as usize] = true;
                }
            }
            for (e, [a, b]) in EDGE_CORNERS.iter().enumerate() {
                let crossed = ((index >> a) & 1) != ((index >> b) & 1);
                assert_eq!(used[e], crossed, "case {index} edge {e}");
            }
        }
    }
}
