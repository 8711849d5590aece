//! Joining slab outputs into one mesh, and Shap-E's vertex order for parity mode.

use super::sweep::{SlabOut, FOREIGN};
use crate::mesh::mesh::Mesh;

/// Joins slab outputs into one mesh, fixing up slab-local and foreign vertex numbers.
pub(super) fn assemble(parts: Vec<SlabOut>, parity: bool) -> Mesh {
    let mut offsets = Vec::with_capacity(parts.len() + 1);
    let mut total = 0u32;
    for p in &parts {
        offsets.push(total);
        total += p.positions.len() as u32;
    }
    offsets.push(total);
    let mut mesh = Mesh::default();
    let mut keys = Vec::new();
    for (s, part) in parts.into_iter().enumerate() {
        let (own, next) = (offsets[s], offsets[s + 1]);
        let fix = |v: u32| {
            if v & FOREIGN != 0 {
                (v & !FOREIGN) + next
            } else {
                v + own
            }
        };
        if mesh.positions.is_empty()
            && own == 0
            && part.faces.iter().flatten().all(|v| v & FOREIGN == 0)
        {
            (mesh.positions, mesh.normals, mesh.faces, keys) =
                (part.positions, part.normals, part.faces, part.keys);
            continue;
        }
        mesh.positions.extend(part.positions);
        mesh.normals.extend(part.normals);
        keys.extend(part.keys);
        mesh.faces
            .extend(part.faces.into_iter().map(|t| t.map(fix)));
    }
    if parity {
        renumber_by_key(&mut mesh, &keys);
    }
    mesh
}

/// Orders vertices by ascending key (Shap-E keeps `unique(edge ids)`, which is sorted).
fn renumber_by_key(mesh: &mut Mesh, keys: &[u64]) {
    let mut order: Vec<u32> = (0..keys.len() as u32).collect();
    order.sort_unstable_by_key(|&v| keys[v as usize]);
    let mut rank = vec![0u32; order.len()];
    for (new, &old) in order.iter().enumerate() {
        rank[old as usize] = new as u32;
    }
    mesh.positions = order.iter().map(|&v| mesh.positions[v as usize]).collect();
    mesh.normals = order.iter().map(|&v| mesh.normals[v as usize]).collect();
    for t in &mut mesh.faces {
        *t = t.map(|v| rank[v as usize]);
    }
}
