//! The slab sweep: inside flags, row spans, edge→vertex caches and triangle emission (see the parent module).

use super::{McMode, McOptions, T_EPS};
use crate::mesh::grid::Grid;
use crate::mesh::tables::{cases, Case};

/// Marks an index into the next slab's first layer (fixed up in `assemble`).
pub(super) const FOREIGN: u32 = 1 << 31;

/// One slab's output with slab-local vertex numbers.
#[derive(Default)]
pub(super) struct SlabOut {
    pub(super) positions: Vec<[f32; 3]>,
    pub(super) normals: Vec<[f32; 3]>,
    /// Shap-E global edge id per vertex (parity mode only).
    pub(super) keys: Vec<u64>,
    pub(super) faces: Vec<[u32; 3]>,
}

/// Read-only state shared by all slabs.
pub(super) struct Sweep<'a> {
    values: &'a [f32],
    /// Grid samples per axis.
    n: [usize; 3],
    /// Padded samples per axis (n + 2).
    pub(super) np: [usize; 3],
    level: f32,
    pad: f32,
    parity: bool,
    spacing: [f32; 3],
    grid: &'a Grid,
    table: &'static [Case; 256],
}

/// Inside flags of one padded layer plus the inside span (first, last sample) of each row.
struct Layer {
    flags: Vec<u8>,
    spans: Vec<(u32, u32)>,
}

const NO_SPAN: (u32, u32) = (u32::MAX, 0);

fn union(a: (u32, u32), b: (u32, u32)) -> (u32, u32) {
    (a.0.min(b.0), a.1.max(b.1))
}

impl<'a> Sweep<'a> {
    pub(super) fn new(grid: &'a Grid, opts: &McOptions) -> Self {
        let n = grid.dims();
        let parity = opts.mode == McMode::ShapEParity;
        Self {
            values: grid.values(),
            n,
            np: n.map(|d| d + 2),
            level: opts.level,
            pad: if parity { -1.0 } else { opts.level - 1.0 },
            parity,
            spacing: grid.spacing(),
            grid,
            table: cases(),
        }
    }

    /// Value at a padded index.
    fn val(&self, p: [usize; 3]) -> f32 {
        if (0..3).any(|a| p[a] == 0 || p[a] == self.np[a] - 1) {
            self.pad
        } else {
            self.values[((p[2] - 1) * self.n[1] + p[1] - 1) * self.n[0] + p[0] - 1]
        }
    }

    /// ∇f at a padded index (central differences, one-sided at the padded border).
    fn gradient(&self, p: [usize; 3]) -> [f32; 3] {
        [0, 1, 2].map(|a| {
            let (mut lo, mut hi) = (p, p);
            lo[a] = p[a].saturating_sub(1);
            hi[a] = (p[a] + 1).min(self.np[a] - 1);
            (self.val(hi) - self.val(lo)) / ((hi[a] - lo[a]) as f32 * self.spacing[a])
        })
    }

    /// Position of a padded index (see the module doc for the two modes).
    fn point(&self, p: [usize; 3]) -> [f32; 3] {
        if self.parity {
            let b = self.grid.bounds();
            [0, 1, 2]
                .map(|a| (p[a] as f32 / (self.np[a] - 1) as f32) * (b.max[a] - b.min[a]) + b.min[a])
        } else {
            self.grid.position(p.map(|i| i as f32 - 1.0))
        }
    }

    /// Shap-E's global id of the edge from padded index `p` along `axis`.
    fn edge_key(&self, p: [usize; 3], axis: usize) -> u64 {
        let [x, y, z] = self.np.map(|d| d as u64);
        let [i, j, k] = p.map(|d| d as u64);
        match axis {
            0 => i * y * z + j * z + k,
            1 => (x - 1) * y * z + i * (y - 1) * z + j * z + k,
            _ => (x - 1) * y * z + x * (y - 1) * z + i * y * (z - 1) + j * (z - 1) + k,
        }
    }

    fn push_vertex(&self, out: &mut SlabOut, a: [usize; 3], axis: usize) -> u32 {
        let mut b = a;
        b[axis] += 1;
        let (va, vb) = (self.val(a), self.val(b));
        let mut t = (va - self.level) / (va - vb);
        if !self.parity {
            t = t.clamp(T_EPS, 1.0 - T_EPS);
        }
        let (pa, pb) = (self.point(a), self.point(b));
        out.positions
            .push([0, 1, 2].map(|d| t * pb[d] + (1.0 - t) * pa[d]));
        let (ga, gb) = (self.gradient(a), self.gradient(b));
        let g = [0, 1, 2].map(|d| -(ga[d] * (1.0 - t) + gb[d] * t));
        let len = (g[0] * g[0] + g[1] * g[1] + g[2] * g[2]).sqrt();
        let normal = if len > 1e-20 && len.is_finite() {
            g.map(|c| c / len)
        } else {
            // Flat field: point along the edge from its inside end to its outside end.
            let mut e = [0.0; 3];
            e[axis] = if va > self.level { 1.0 } else { -1.0 };
            e
        };
        out.normals.push(normal);
        if self.parity {
            out.keys.push(self.edge_key(a, axis));
        }
        (out.positions.len() - 1) as u32
    }

    fn fill_layer(&self, layer: &mut Layer, k: usize) {
        let [nxp, nyp, _] = self.np;
        layer.spans.fill(NO_SPAN);
        if k == 0 || k == self.np[2] - 1 {
            layer.flags.fill(0);
            return;
        }
        let nx = self.n[0];
        for j in 1..nyp - 1 {
            let src = &self.values[((k - 1) * self.n[1] + j - 1) * nx..][..nx];
            let dst = &mut layer.flags[j * nxp + 1..][..nx];
            for (f, &v) in dst.iter_mut().zip(src) {
                *f = (v > self.level) as u8;
            }
            if let (Some(first), Some(last)) = (
                dst.iter().position(|&f| f != 0),
                dst.iter().rposition(|&f| f != 0),
            ) {
                layer.spans[j] = (first as u32 + 1, last as u32 + 1);
            }
        }
    }

    /// Creates (or, for `foreign`, only numbers) the vertices of the x and y edges of padded layer `k`.
    fn layer_edges(
        &self,
        out: &mut SlabOut,
        layer: &Layer,
        k: usize,
        xv: &mut [u32],
        yv: &mut [u32],
        foreign: bool,
    ) {
        let nxp = self.np[0];
        let mut count = 0u32;
        let mut new = |out: &mut SlabOut, p: [usize; 3], axis| {
            if foreign {
                count += 1;
                FOREIGN | (count - 1)
            } else {
                self.push_vertex(out, p, axis)
            }
        };
        for j in 0..self.np[1] - 1 {
            let row = &layer.flags[j * nxp..][..nxp];
            let (lo, hi) = layer.spans[j];
            if lo <= hi {
                for i in lo as usize - 1..=hi as usize {
                    if row[i] != row[i + 1] {
                        xv[j * nxp + i] = new(out, [i, j, k], 0);
                    }
                }
            }
            let next = &layer.flags[(j + 1) * nxp..][..nxp];
            let (lo, hi) = union(layer.spans[j], layer.spans[j + 1]);
            if lo <= hi {
                for i in lo as usize..=hi as usize {
                    if row[i] != next[i] {
                        yv[j * nxp + i] = new(out, [i, j, k], 1);
                    }
                }
            }
        }
    }

    /// Sweeps cell layers `k0..k1` (padded), owning sample layers `k0..k1` and the z-edges leaving them.
    pub(super) fn slab(&self, k0: usize, k1: usize) -> SlabOut {
        let [nxp, nyp, _] = self.np;
        let plane = nxp * nyp;
        let mut out = SlabOut::default();
        let new_layer = || Layer {
            flags: vec![0; plane],
            spans: vec![NO_SPAN; nyp],
        };
        let (mut bot, mut top) = (new_layer(), new_layer());
        let (mut xb, mut yb, mut xt, mut yt, mut zv) = (
            vec![0u32; plane],
            vec![0u32; plane],
            vec![0u32; plane],
            vec![0u32; plane],
            vec![0u32; plane],
        );
        self.fill_layer(&mut bot, k0);
        self.layer_edges(&mut out, &bot, k0, &mut xb, &mut yb, false);
        for k in k0..k1 {
            self.fill_layer(&mut top, k + 1);
            // z-edges between layers k and k + 1.
            for j in 0..nyp {
                let (lo, hi) = union(bot.spans[j], top.spans[j]);
                for i in lo as usize..=hi as usize {
                    if i < nxp && bot.flags[j * nxp + i] != top.flags[j * nxp + i] {
                        zv[j * nxp + i] = self.push_vertex(&mut out, [i, j, k], 2);
                    }
                }
            }
            self.layer_edges(&mut out, &top, k + 1, &mut xt, &mut yt, k + 1 == k1);
            self.cells(&mut out, [&bot, &top], [&xb, &yb, &xt, &yt, &zv]);
            std::mem::swap(&mut bot, &mut top);
            std::mem::swap(&mut xb, &mut xt);
            std::mem::swap(&mut yb, &mut yt);
        }
        out
    }

    /// Emits the triangles of one cell layer.
    fn cells(&self, out: &mut SlabOut, [bot, top]: [&Layer; 2], [xb, yb, xt, yt, zv]: [&[u32]; 5]) {
        let nxp = self.np[0];
        for j in 0..self.np[1] - 1 {
            let span = union(
                union(bot.spans[j], bot.spans[j + 1]),
                union(top.spans[j], top.spans[j + 1]),
            );
            if span.0 > span.1 {
                continue;
            }
            let (r0, r1) = (j * nxp, (j + 1) * nxp);
            let column = |i: usize| {
                bot.flags[r0 + i]
                    | bot.flags[r1 + i] << 2
                    | top.flags[r0 + i] << 4
                    | top.flags[r1 + i] << 6
            };
            let mut left = column(span.0 as usize - 1);
            for i in span.0 as usize - 1..=span.1 as usize {
                let right = column(i + 1);
                let case = &self.table[(left | right << 1) as usize];
                left = right;
                if case.count == 0 {
                    continue;
                }
                let edges = [
                    xb[r0 + i],
                    xb[r1 + i],
                    xt[r0 + i],
                    xt[r1 + i],
                    yb[r0 + i],
                    yb[r0 + i + 1],
                    yt[r0 + i],
                    yt[r0 + i + 1],
                    zv[r0 + i],
                    zv[r0 + i + 1],
                    zv[r1 + i],
                    zv[r1 + i + 1],
                ];
                for tri in &case.tris[..case.count as usize] {
                    out.faces.push(tri.map(|e| edges[e as usize]));
                }
            }
        }
    }
}
