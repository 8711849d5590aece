//! Unmasked attention `o = softmax(q·kᵀ)·v` and its backward on plain f32 arrays of `(pairs, t, d)`
//! (pairs = batch × heads), the pairs in parallel and each pair's products on one thread.
//!
//! One pair's `t × t` products are small (at the published prior's 1026 tokens and 64 channels,
//! 135 MFLOP each): split over threads, each waits on the others several times per pair. Whole
//! pairs per thread need no synchronisation, and the transposed operands (`pᵀ·g`, `dsᵀ·q`, `g·vᵀ`)
//! are read through strides by the product kernel, never copied. Each worker keeps two `t × t`
//! buffers.

use rayon::prelude::*;

use super::matmul::{matmul_serial, Mat};
use super::rows::{new_by_chunks, zeros};
use super::softmax::softmax_rows_f32_serial;

/// The shape of every operand: `pairs` matrices of `(t, d)`, row-major, one after another.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pairs {
    /// (batch × head) pairs.
    pub(crate) pairs: usize,
    /// Tokens.
    pub(crate) t: usize,
    /// Channels per head.
    pub(crate) d: usize,
}

impl Pairs {
    fn len(&self) -> usize {
        self.t * self.d
    }
}

/// Pair `i`'s `(t, d)` matrix of `x`, `n = t·d` elements each.
fn pair(x: &[f32], i: usize, n: usize) -> &[f32] {
    &x[i * n..(i + 1) * n]
}

/// `softmax(q·kᵀ)` of one pair into `p (t, t)`.
fn probabilities(p: &mut [f32], q: &[f32], k: &[f32], s: Pairs) {
    let (t, d) = (s.t, s.d);
    matmul_serial(p, t, t, d, Mat::rows(q, d), Mat::transposed(k, d));
    softmax_rows_f32_serial(p, t);
}

/// `o = softmax(q·kᵀ)·v` for every pair (the scale folded into `q` by the caller).
pub(crate) fn attention_f32(q: &[f32], k: &[f32], v: &[f32], s: Pairs) -> Vec<f32> {
    let (t, d, n) = (s.t, s.d, s.len());
    new_by_chunks(
        s.pairs * n,
        n,
        || vec![0f32; t * t],
        |p, i, o| {
            probabilities(p, pair(q, i, n), pair(k, i, n), s);
            matmul_serial(o, t, d, t, Mat::rows(p, t), Mat::rows(pair(v, i, n), d));
        },
    )
}

/// The gradients `[dq, dk, dv]` of [`attention_f32`] given its output `o` and the output's
/// gradient `g`: per pair, `p` recomputed, `dv = pᵀ·g`, `ds = p ⊙ (g·vᵀ − rowsum(g ⊙ o))`,
/// `dq = ds·k`, `dk = dsᵀ·q`.
pub(crate) fn attention_grads_f32(
    [q, k, v]: [&[f32]; 3],
    o: &[f32],
    g: &[f32],
    s: Pairs,
) -> [Vec<f32>; 3] {
    let (t, d, n) = (s.t, s.d, s.len());
    let (mut dq, mut dk, mut dv) = (zeros(s.pairs * n), zeros(s.pairs * n), zeros(s.pairs * n));
    dq.par_chunks_mut(n)
        .zip(dk.par_chunks_mut(n))
        .zip(dv.par_chunks_mut(n))
        .enumerate()
        .for_each_init(
            || (vec![0f32; t * t], vec![0f32; t * t]),
            |(p, ds), (i, ((dq, dk), dv))| {
                let [q, k, v, o, g] = [q, k, v, o, g].map(|x| pair(x, i, n));
                probabilities(p, q, k, s);
                matmul_serial(dv, t, d, t, Mat::transposed(p, t), Mat::rows(g, d));
                matmul_serial(ds, t, t, d, Mat::rows(g, d), Mat::transposed(v, d));
                for (r, (ds_row, p_row)) in
                    ds.chunks_exact_mut(t).zip(p.chunks_exact(t)).enumerate()
                {
                    let row: f32 = (0..d).map(|c| g[r * d + c] * o[r * d + c]).sum();
                    for (x, &pv) in ds_row.iter_mut().zip(p_row) {
                        *x = pv * (*x - row);
                    }
                }
                matmul_serial(dq, t, d, t, Mat::rows(ds, t), Mat::rows(k, d));
                matmul_serial(dk, t, d, t, Mat::transposed(ds, t), Mat::rows(q, d));
            },
        );
    [dq, dk, dv]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `softmax(q·kᵀ)·v` and its gradients by direct sums in f64, for one pair.
    fn naive(q: &[f32], k: &[f32], v: &[f32], g: &[f32], t: usize, d: usize) -> [Vec<f64>; 4] {
        let at = |x: &[f32], r: usize, c: usize| x[r * d + c] as f64;
        let mut p = vec![0f64; t * t];
        for i in 0..t {
            let s: Vec<f64> = (0..t)
                .map(|j| (0..d).map(|c| at(q, i, c) * at(k, j, c)).sum())
                .collect();
            let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = s.iter().map(|x| (x - m).exp()).sum();
            for j in 0..t {
                p[i * t + j] = (s[j] - m).exp() / z;
            }
        }
        let mut o = vec![0f64; t * d];
        let (mut dq, mut dk, mut dv) = (vec![0f64; t * d], vec![0f64; t * d], vec![0f64; t * d]);
        for i in 0..t {
            for c in 0..d {
                o[i * d + c] = (0..t).map(|j| p[i * t + j] * at(v, j, c)).sum();
            }
        }
        for i in 0..t {
            let dp: Vec<f64> = (0..t)
                .map(|j| (0..d).map(|c| at(g, i, c) * at(v, j, c)).sum())
                .collect();
            let row: f64 = (0..t).map(|j| p[i * t + j] * dp[j]).sum();
            for j in 0..t {
                let ds = p[i * t + j] * (dp[j] - row);
                for c in 0..d {
                    dq[i * d + c] += ds * at(k, j, c);
                    dk[j * d + c] += ds * at(q, i, c);
                    dv[j * d + c] += p[i * t + j] * at(g, i, c);
                }
            }
        }
        [o, dq, dk, dv]
    }

    /// Forward and gradients agree with f64 sums pair by pair, for sizes off the kernel's blocks.
    #[test]
    fn matches_direct_sums() {
        let s = Pairs {
            pairs: 3,
            t: 37,
            d: 5,
        };
        let n = s.pairs * s.t * s.d;
        let data = |seed: usize| -> Vec<f32> {
            (0..n)
                .map(|i| (((i * 7919 + seed * 104729) % 1000) as f32 / 500.0 - 1.0) * 1.5)
                .collect()
        };
        let (q, k, v, g) = (data(1), data(2), data(3), data(4));
        let o = attention_f32(&q, &k, &v, s);
        let [dq, dk, dv] = attention_grads_f32([&q, &k, &v], &o, &g, s);
        let m = s.t * s.d;
        for i in 0..s.pairs {
            let r = i * m..(i + 1) * m;
            let want = naive(
                &q[r.clone()],
                &k[r.clone()],
                &v[r.clone()],
                &g[r.clone()],
                s.t,
                s.d,
            );
            for (got, want) in [&o, &dq, &dk, &dv].into_iter().zip(&want) {
                for (a, b) in got[r.clone()].iter().zip(want) {
                    assert!((*a as f64 - b).abs() < 1e-4 * (1.0 + b.abs()), "{a} vs {b}");
                }
            }
        }
    }
}
