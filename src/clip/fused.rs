//! One CLIP encoder layer as a single graph node on the CPU: LayerNorm, attention, residuals and
//! the QuickGELU MLP on plain arrays, with a hand-written backward to the layer's input.
//!
//! Composed from candle ops a layer makes dozens of tensors (each a fresh allocation and a pass
//! of candle's elementwise thread pool, the heads transposed and copied twice); here every matrix
//! product goes straight from the weights' storage into a preallocated buffer (`gemm`, the bias
//! written first and the product added), the per-head products read the heads in place through
//! strides, and each elementwise stage is one vectorised pass. The forward keeps what the backward
//! needs only when the input tracks a gradient (a checkpointed segment's first pass keeps
//! nothing): the LayerNorms' means and reciprocal deviations, the attention's queries, keys,
//! values and probabilities, the residual stream after attention and the MLP's pre-activations.
//!
//! Applies to frozen layers (no weight tracks a gradient) on the CPU in f32 or f64 with the
//! QuickGELU activation; anything else runs the composed layer
//! ([`super::transformer::EncoderLayer`]). Only the input gets a gradient.

use std::borrow::Cow;
use std::sync::Arc;

use candle_core::{DType, Device, Result, Storage, Tensor};
use rayon::prelude::*;

use super::config::Activation;
use crate::autodiff::fastmath::simd_dispatch;
use crate::autodiff::kernels::{matmul_with, Mat, Real, Write};
use crate::autodiff::vjp::attach;

/// Rows per rayon task of the row-wise passes (LayerNorm, bias fills, activations).
const ROWS_PER_TASK: usize = 32;

/// QuickGELU's slope: `x·σ(1.702·x)`.
const QUICK_GELU: f64 = 1.702;

/// A frozen encoder layer's tensors (in the order of the indices below) and settings.
#[derive(Debug, Clone)]
pub struct FusedLayer {
    tensors: Vec<Tensor>,
    eps: f64,
    heads: usize,
    act: Activation,
}

const LN1_W: usize = 0;
const LN1_B: usize = 1;
const Q_W: usize = 2;
const Q_B: usize = 3;
const K_W: usize = 4;
const K_B: usize = 5;
const V_W: usize = 6;
const V_B: usize = 7;
const O_W: usize = 8;
const O_B: usize = 9;
const LN2_W: usize = 10;
const LN2_B: usize = 11;
const FC1_W: usize = 12;
const FC1_B: usize = 13;
const FC2_W: usize = 14;
const FC2_B: usize = 15;
/// How many tensors a layer has ([`FusedLayer::new`]).
pub const N_TENSORS: usize = 16;

/// Sizes of one call: `b` images of `t` tokens, queries for the first `r` tokens of each.
#[derive(Clone, Copy, Debug)]
struct Geometry {
    b: usize,
    t: usize,
    r: usize,
    d: usize,
    heads: usize,
    hd: usize,
    f: usize,
}

impl Geometry {
    fn n(&self) -> usize {
        self.b * self.t
    }
    fn nr(&self) -> usize {
        self.b * self.r
    }
    fn scale<T: Real>(&self) -> T {
        T::from_f64((self.hd as f64).powf(-0.5))
    }
}

/// The layer's weights borrowed from their storages.
struct Weights<'a, T> {
    w: [&'a [T]; N_TENSORS],
    eps: T,
}

/// What the backward needs (see the module doc).
struct Saved<T> {
    mu1: Vec<T>,
    r1: Vec<T>,
    q: Vec<T>,
    k: Vec<T>,
    v: Vec<T>,
    p: Vec<T>,
    x1: Vec<T>,
    mu2: Vec<T>,
    r2: Vec<T>,
    hpre: Vec<T>,
}

impl FusedLayer {
    /// The layer from its (weight, bias) pairs in the order `layer_norm1`, `q_proj`, `k_proj`,
    /// `v_proj`, `out_proj`, `layer_norm2`, `fc1`, `fc2`; `None` when a bias is missing (then the
    /// composed layer runs).
    pub fn new(
        parts: [(&Tensor, Option<&Tensor>); N_TENSORS / 2],
        eps: f64,
        heads: usize,
        act: Activation,
    ) -> Option<Self> {
        let tensors = parts
            .into_iter()
            .flat_map(|(w, b)| [Some(w.clone()), b.cloned()])
            .collect::<Option<Vec<_>>>()?;
        Some(Self {
            tensors,
            eps,
            heads,
            act,
        })
    }

    /// The layer's output for the first `rows` tokens of `x (batch, tokens, hidden)`, with the
    /// optional additive `mask (tokens, tokens)`, or `None` when the fused layer does not apply
    /// (see the module doc). Differentiable with respect to `x`.
    pub fn forward(
        &self,
        x: &Tensor,
        rows: usize,
        mask: Option<&Tensor>,
    ) -> Result<Option<Tensor>> {
        match x.dtype() {
            DType::F32 => self.run::<f32>(x, rows, mask),
            DType::F64 => self.run::<f64>(x, rows, mask),
            _ => Ok(None),
        }
    }

    fn applies<T: Real>(&self, x: &Tensor) -> bool {
        self.act == Activation::QuickGelu
            && x.device().is_cpu()
            && self.tensors.iter().all(|t| {
                t.dtype() == T::DTYPE && t.device().is_cpu() && !t.track_op() && t.is_contiguous()
            })
    }

    fn geometry(&self, x: &Tensor, rows: usize) -> Result<Geometry> {
        let (b, t, d) = x.dims3()?;
        let f = self.tensors[FC1_B].dim(0)?;
        if self.heads == 0 || !d.is_multiple_of(self.heads) || rows == 0 || rows > t {
            candle_core::bail!(
                "encoder layer: {rows} query rows of {t} tokens, hidden {d}, {} heads",
                self.heads
            );
        }
        for (i, want) in [
            (Q_W, d * d),
            (K_W, d * d),
            (V_W, d * d),
            (O_W, d * d),
            (FC1_W, f * d),
            (FC2_W, d * f),
            (LN1_W, d),
            (LN2_W, d),
            (FC2_B, d),
        ] {
            if self.tensors[i].elem_count() != want {
                candle_core::bail!(
                    "encoder layer: weight {i} has shape {:?} for hidden size {d}",
                    self.tensors[i].shape()
                );
            }
        }
        Ok(Geometry {
            b,
            t,
            r: rows,
            d,
            heads: self.heads,
            hd: d / self.heads,
            f,
        })
    }

    fn run<T: Real>(
        &self,
        x: &Tensor,
        rows: usize,
        mask: Option<&Tensor>,
    ) -> Result<Option<Tensor>> {
        if !self.applies::<T>(x) {
            return Ok(None);
        }
        let g = self.geometry(x, rows)?;
        let mask = match mask {
            Some(m) => {
                if m.dims() != [g.t, g.t] {
                    candle_core::bail!("attention mask {:?} for {} tokens", m.shape(), g.t);
                }
                Some(m.to_dtype(T::DTYPE)?.flatten_all()?.to_vec1::<T>()?)
            }
            None => None,
        };
        let xs = x.detach().flatten_all()?.to_vec1::<T>()?;
        let keep = x.track_op();
        let (out, saved) =
            self.with_weights::<T, _>(|w| forward(&g, w, &xs, mask.as_deref(), keep))?;
        let y = Tensor::from_vec(out, (g.b, g.r, g.d), &Device::Cpu)?;
        let Some(saved) = saved else {
            return Ok(Some(y));
        };
        let layer = self.clone();
        let y = attach(
            "clip_layer",
            y,
            &[x],
            Arc::new(move |v| {
                let gy = v.grad.flatten_all()?.to_vec1::<T>()?;
                let dx = layer.with_weights::<T, _>(|w| backward(&g, w, &xs, &saved, &gy))?;
                Ok(vec![Some(Tensor::from_vec(
                    dx,
                    (g.b, g.t, g.d),
                    &Device::Cpu,
                )?)])
            }),
        )?;
        Ok(Some(y))
    }

    /// Runs `f` on the weights borrowed from their (CPU, contiguous) storages.
    fn with_weights<T: Real, R>(&self, f: impl FnOnce(&Weights<T>) -> R) -> Result<R> {
        let guards: Vec<_> = self
            .tensors
            .iter()
            .map(|t| t.storage_and_layout())
            .collect();
        let mut w: [&[T]; N_TENSORS] = [&[]; N_TENSORS];
        for (slot, ((storage, layout), t)) in w.iter_mut().zip(guards.iter().zip(&self.tensors)) {
            let Storage::Cpu(cpu) = &**storage else {
                candle_core::bail!("fused encoder layer: a weight left the cpu (bug)");
            };
            let start = layout.start_offset();
            *slot = &T::cpu_storage_as_slice(cpu)?[start..start + t.elem_count()];
        }
        Ok(f(&Weights {
            w,
            eps: T::from_f64(self.eps),
        }))
    }
}

/// The rows `i < r` of every image of `src (b·t, d)` → `(b·r, d)` (`src` itself when `r == t`).
fn first_rows<'a, T: Real>(src: &'a [T], g: &Geometry) -> Cow<'a, [T]> {
    if g.r == g.t {
        return Cow::Borrowed(src);
    }
    Cow::Owned(
        src.chunks_exact(g.t * g.d)
            .flat_map(|image| image[..g.r * g.d].iter().copied())
            .collect(),
    )
}

/// `dst (rows, out) = bias + src (rows, in) · wᵀ` for `w (out, in)`.
fn linear_into<T: Real>(dst: &mut [T], src: &[T], w: &[T], bias: &[T], inp: usize) {
    let out = bias.len();
    fill_rows(dst, bias);
    let rows = src.len() / inp;
    let write = Write::rows(out).adding();
    matmul_with(
        dst,
        write,
        rows,
        out,
        inp,
        Mat::rows(src, inp),
        Mat::transposed(w, inp),
    );
}

/// Every row of `dst` set to `row`.
fn fill_rows<T: Real>(dst: &mut [T], row: &[T]) {
    dst.par_chunks_mut(ROWS_PER_TASK * row.len())
        .for_each(|block| {
            for r in block.chunks_exact_mut(row.len()) {
                r.copy_from_slice(row);
            }
        });
}

simd_dispatch!(ln_forward_rows<T: Real>(x: &[T], w: &[T], b: &[T], eps: T, y: &mut [T], mu: &mut [T], rstd: &mut [T]) {
    let d = w.len();
    let inv = T::one() / T::from_f64(d as f64);
    for (((x, y), mu), rstd) in x.chunks_exact(d).zip(y.chunks_exact_mut(d)).zip(mu.iter_mut()).zip(rstd.iter_mut()) {
        let mut s = T::zero();
        for &v in x {
            s += v;
        }
        let m = s * inv;
        let mut s2 = T::zero();
        for &v in x {
            s2 += (v - m) * (v - m);
        }
        let r = T::one() / T::from_f64((s2 * inv + eps).to_f64().sqrt());
        for (((y, &v), &w), &b) in y.iter_mut().zip(x).zip(w).zip(b) {
            *y = (v - m) * r * w + b;
        }
        *mu = m;
        *rstd = r;
    }
});

/// `y = LayerNorm(x)` over rows of `w.len()`, recording each row's mean and `1/√(var + eps)`.
fn ln_forward<T: Real>(
    x: &[T],
    w: &[T],
    b: &[T],
    eps: T,
    y: &mut [T],
    mu: &mut [T],
    rstd: &mut [T],
) {
    let block = ROWS_PER_TASK * w.len();
    x.par_chunks(block)
        .zip(y.par_chunks_mut(block))
        .zip(mu.par_chunks_mut(ROWS_PER_TASK))
        .zip(rstd.par_chunks_mut(ROWS_PER_TASK))
        .for_each(|(((x, y), mu), rstd)| ln_forward_rows(x, w, b, eps, y, mu, rstd));
}

simd_dispatch!(ln_backward_rows<T: Real>(gy: &[T], x: &[T], mu: &[T], rstd: &[T], w: &[T], dx: &mut [T], accumulate: bool) {
    let d = w.len();
    let inv = T::one() / T::from_f64(d as f64);
    for ((((gy, x), &m), &r), dx) in gy.chunks_exact(d).zip(x.chunks_exact(d)).zip(mu).zip(rstd).zip(dx.chunks_exact_mut(d)) {
        let (mut m1, mut m2) = (T::zero(), T::zero());
        for ((&g, &v), &w) in gy.iter().zip(x).zip(w) {
            let gh = g * w;
            m1 += gh;
            m2 += gh * (v - m) * r;
        }
        let (m1, m2) = (m1 * inv, m2 * inv);
        for (((dx, &g), &v), &w) in dx.iter_mut().zip(gy).zip(x).zip(w) {
            let v = r * (g * w - m1 - (v - m) * r * m2);
            *dx = if accumulate { *dx + v } else { v };
        }
    }
});

/// `dx (+)= ∂LayerNorm/∂x · gy` (weight `w`; the forward's `mu`, `rstd`):
/// `r·(ĝ − mean ĝ − x̂·mean(ĝ·x̂))` with `ĝ = gy·w`, `x̂ = (x − μ)·r`.
fn ln_backward<T: Real>(
    gy: &[T],
    x: &[T],
    mu: &[T],
    rstd: &[T],
    w: &[T],
    dx: &mut [T],
    accumulate: bool,
) {
    let block = ROWS_PER_TASK * w.len();
    gy.par_chunks(block)
        .zip(x.par_chunks(block))
        .zip(mu.par_chunks(ROWS_PER_TASK))
        .zip(rstd.par_chunks(ROWS_PER_TASK))
        .zip(dx.par_chunks_mut(block))
        .for_each(|((((gy, x), mu), rstd), dx)| {
            ln_backward_rows(gy, x, mu, rstd, w, dx, accumulate)
        });
}

simd_dispatch!(quick_gelu_rows<T: Real>(pre: &[T], h: &mut [T]) {
    let a = T::from_f64(QUICK_GELU);
    for (&x, h) in pre.iter().zip(h.iter_mut()) {
        *h = x / (T::one() + (-(a * x)).fast_exp());
    }
});

simd_dispatch!(quick_gelu_grad_rows<T: Real>(pre: &[T], g: &mut [T]) {
    let a = T::from_f64(QUICK_GELU);
    for (&x, g) in pre.iter().zip(g.iter_mut()) {
        let s = T::one() / (T::one() + (-(a * x)).fast_exp());
        *g *= s + a * x * s * (T::one() - s);
    }
});

/// Softmax of each row of `s (rows, t)` in place after adding the mask's rows (0 or −∞).
fn softmax_rows<T: Real>(s: &mut [T], t: usize, mask: Option<&[T]>) {
    for (i, row) in s.chunks_exact_mut(t).enumerate() {
        if let Some(mask) = mask {
            for (v, &m) in row.iter_mut().zip(&mask[i * t..(i + 1) * t]) {
                *v += m;
            }
        }
        let max = row
            .iter()
            .fold(T::from_f64(f64::NEG_INFINITY), |a, &b| a.max_of(b));
        let mut sum = T::zero();
        for v in row.iter_mut() {
            // A masked score (−∞) weighs exactly 0, as the composed softmax gives.
            *v = if *v == T::from_f64(f64::NEG_INFINITY) {
                T::zero()
            } else {
                (*v - max).exp()
            };
            sum += *v;
        }
        let inv = T::one() / sum;
        for v in row.iter_mut() {
            *v *= inv;
        }
    }
}

/// The layer forward on plain arrays → (output `(b·r, d)`, what the backward needs when `keep`).
fn forward<T: Real>(
    g: &Geometry,
    w: &Weights<T>,
    x: &[T],
    mask: Option<&[T]>,
    keep: bool,
) -> (Vec<T>, Option<Saved<T>>) {
    let (n, nr, d) = (g.n(), g.nr(), g.d);
    let (ww, eps) = (&w.w, w.eps);
    // LayerNorm 1 over every token (keys and values need them all).
    let (mut n1, mut mu1, mut r1) = (
        vec![T::zero(); n * d],
        vec![T::zero(); n],
        vec![T::zero(); n],
    );
    ln_forward(x, ww[LN1_W], ww[LN1_B], eps, &mut n1, &mut mu1, &mut r1);
    // Queries (scaled by 1/√head_dim, bias included, as the composed layer does) for the query
    // rows, keys and values for every token.
    let nq = first_rows(&n1, g);
    let mut q = vec![T::zero(); nr * d];
    linear_into(&mut q, &nq, ww[Q_W], ww[Q_B], d);
    drop(nq);
    let scale = g.scale::<T>();
    q.par_chunks_mut(ROWS_PER_TASK * d)
        .for_each(|b| b.iter_mut().for_each(|v| *v *= scale));
    let mut k = vec![T::zero(); n * d];
    linear_into(&mut k, &n1, ww[K_W], ww[K_B], d);
    let mut v = vec![T::zero(); n * d];
    linear_into(&mut v, &n1, ww[V_W], ww[V_B], d);
    drop(n1);
    // softmax(q·kᵀ + mask)·v per image and head, the heads read in place (stride d).
    let mut o = vec![T::zero(); nr * d];
    let mut p = vec![T::zero(); g.b * g.heads * g.r * g.t];
    o.par_chunks_mut(g.r * d)
        .zip(p.par_chunks_mut(g.heads * g.r * g.t))
        .enumerate()
        .for_each(|(bi, (o, p))| attend_image(g, bi, &q, &k, &v, mask, o, p));
    // The residual stream after attention: x (query rows) + out_proj(o).
    let mut x1 = first_rows(x, g).into_owned();
    x1.par_chunks_mut(ROWS_PER_TASK * d).for_each(|b| {
        for row in b.chunks_exact_mut(d) {
            for (v, &bias) in row.iter_mut().zip(ww[O_B]) {
                *v += bias;
            }
        }
    });
    let write = Write::rows(d).adding();
    matmul_with(
        &mut x1,
        write,
        nr,
        d,
        d,
        Mat::rows(&o, d),
        Mat::transposed(ww[O_W], d),
    );
    drop(o);
    // LayerNorm 2 and the MLP.
    let (mut n2, mut mu2, mut r2) = (
        vec![T::zero(); nr * d],
        vec![T::zero(); nr],
        vec![T::zero(); nr],
    );
    ln_forward(&x1, ww[LN2_W], ww[LN2_B], eps, &mut n2, &mut mu2, &mut r2);
    let mut hpre = vec![T::zero(); nr * g.f];
    linear_into(&mut hpre, &n2, ww[FC1_W], ww[FC1_B], d);
    drop(n2);
    let mut h = vec![T::zero(); nr * g.f];
    let block = ROWS_PER_TASK * g.f;
    hpre.par_chunks(block)
        .zip(h.par_chunks_mut(block))
        .for_each(|(a, h)| quick_gelu_rows(a, h));
    let mut out = x1.clone();
    out.par_chunks_mut(ROWS_PER_TASK * d).for_each(|b| {
        for row in b.chunks_exact_mut(d) {
            for (v, &bias) in row.iter_mut().zip(ww[FC2_B]) {
                *v += bias;
            }
        }
    });
    matmul_with(
        &mut out,
        write,
        nr,
        d,
        g.f,
        Mat::rows(&h, g.f),
        Mat::transposed(ww[FC2_W], g.f),
    );
    let saved = keep.then_some(Saved {
        mu1,
        r1,
        q,
        k,
        v,
        p,
        x1,
        mu2,
        r2,
        hpre,
    });
    (out, saved)
}

/// Head `h` of image `bi` in a buffer of `rows` rows per image and `d` columns: a `(rows, hd)`
/// matrix read in place.
fn head<'a, T>(g: &Geometry, buf: &'a [T], bi: usize, rows: usize, h: usize) -> Mat<'a, T> {
    Mat {
        data: &buf[bi * rows * g.d + h * g.hd..],
        rs: g.d,
        cs: 1,
    }
}

/// Attention of image `bi`: `o (r, d)` and the probabilities `p (heads, r, t)`.
#[allow(clippy::too_many_arguments)]
fn attend_image<T: Real>(
    g: &Geometry,
    bi: usize,
    q: &[T],
    k: &[T],
    v: &[T],
    mask: Option<&[T]>,
    o: &mut [T],
    p: &mut [T],
) {
    let (d, t, r, hd) = (g.d, g.t, g.r, g.hd);
    let serial = |rs| Write::rows(rs).serial();
    for h in 0..g.heads {
        let s = &mut p[h * r * t..(h + 1) * r * t];
        let qh = head(g, q, bi, r, h);
        let kt = head(g, k, bi, t, h).t();
        matmul_with(s, serial(t), r, t, hd, qh, kt);
        softmax_rows(s, t, mask);
        let vh = head(g, v, bi, t, h);
        matmul_with(&mut o[h * hd..], serial(d), r, hd, t, Mat::rows(s, t), vh);
    }
}

/// The attention backward of image `bi` from `d_o (b·r, d)`: `dq (r, d)` (for the scaled
/// queries' projection, i.e. times the scale), `dk (t, d)`, `dv (t, d)`.
#[allow(clippy::too_many_arguments)]
fn attend_image_backward<T: Real>(
    g: &Geometry,
    bi: usize,
    s: &Saved<T>,
    d_o: &[T],
    dq: &mut [T],
    dk: &mut [T],
    dv: &mut [T],
) {
    let (d, t, r, hd) = (g.d, g.t, g.r, g.hd);
    let serial = |rs| Write::rows(rs).serial();
    let mut ds = vec![T::zero(); r * t];
    for h in 0..g.heads {
        let p = &s.p[(bi * g.heads + h) * r * t..(bi * g.heads + h + 1) * r * t];
        let doh = head(g, d_o, bi, r, h);
        let vt = head(g, &s.v, bi, t, h).t();
        // dP = dO·Vᵀ, then dS = P ⊙ (dP − Σⱼ dP·P) per row.
        matmul_with(&mut ds, serial(t), r, t, hd, doh, vt);
        for (ds, p) in ds.chunks_exact_mut(t).zip(p.chunks_exact(t)) {
            let dot = ds.iter().zip(p).fold(T::zero(), |a, (&x, &y)| a + x * y);
            for (x, &y) in ds.iter_mut().zip(p) {
                *x = y * (*x - dot);
            }
        }
        let kh = head(g, &s.k, bi, t, h);
        matmul_with(
            &mut dq[h * hd..],
            serial(d),
            r,
            hd,
            t,
            Mat::rows(&ds, t),
            kh,
        );
        let qh = head(g, &s.q, bi, r, h);
        matmul_with(
            &mut dk[h * hd..],
            serial(d),
            t,
            hd,
            r,
            Mat::transposed(&ds, t),
            qh,
        );
        matmul_with(
            &mut dv[h * hd..],
            serial(d),
            t,
            hd,
            r,
            Mat::transposed(p, t),
            doh,
        );
    }
    let scale = g.scale::<T>();
    dq.iter_mut().for_each(|v| *v *= scale);
}

/// The gradient of the layer's input `x (b·t, d)` from the output gradient `gy (b·r, d)`.
fn backward<T: Real>(g: &Geometry, w: &Weights<T>, x: &[T], s: &Saved<T>, gy: &[T]) -> Vec<T> {
    let (n, nr, d, f) = (g.n(), g.nr(), g.d, g.f);
    let ww = &w.w;
    // MLP: dh = gy·W2 ⊙ gelu'(pre), dn2 = dh·W1; the residual passes gy on.
    let mut dh = vec![T::zero(); nr * f];
    matmul_with(
        &mut dh,
        Write::rows(f),
        nr,
        f,
        d,
        Mat::rows(gy, d),
        Mat::rows(ww[FC2_W], f),
    );
    let block = ROWS_PER_TASK * f;
    s.hpre
        .par_chunks(block)
        .zip(dh.par_chunks_mut(block))
        .for_each(|(a, g)| quick_gelu_grad_rows(a, g));
    let mut dn2 = vec![T::zero(); nr * d];
    matmul_with(
        &mut dn2,
        Write::rows(d),
        nr,
        d,
        f,
        Mat::rows(&dh, f),
        Mat::rows(ww[FC1_W], d),
    );
    drop(dh);
    let mut dx1 = gy.to_vec();
    ln_backward(&dn2, &s.x1, &s.mu2, &s.r2, ww[LN2_W], &mut dx1, true);
    drop(dn2);
    // Attention.
    let mut d_o = vec![T::zero(); nr * d];
    matmul_with(
        &mut d_o,
        Write::rows(d),
        nr,
        d,
        d,
        Mat::rows(&dx1, d),
        Mat::rows(ww[O_W], d),
    );
    let (mut dq, mut dk, mut dv) = (
        vec![T::zero(); nr * d],
        vec![T::zero(); n * d],
        vec![T::zero(); n * d],
    );
    dq.par_chunks_mut(g.r * d)
        .zip(dk.par_chunks_mut(g.t * d))
        .zip(dv.par_chunks_mut(g.t * d))
        .enumerate()
        .for_each(|(bi, ((dq, dk), dv))| attend_image_backward(g, bi, s, &d_o, dq, dk, dv));
    drop(d_o);
    // dn1 = dk·Wk + dv·Wv (+ dq·Wq on the query rows).
    let mut dn1 = vec![T::zero(); n * d];
    matmul_with(
        &mut dn1,
        Write::rows(d),
        n,
        d,
        d,
        Mat::rows(&dk, d),
        Mat::rows(ww[K_W], d),
    );
    let add = Write::rows(d).adding();
    matmul_with(
        &mut dn1,
        add,
        n,
        d,
        d,
        Mat::rows(&dv, d),
        Mat::rows(ww[V_W], d),
    );
    if g.r == g.t {
        matmul_with(
            &mut dn1,
            add,
            n,
            d,
            d,
            Mat::rows(&dq, d),
            Mat::rows(ww[Q_W], d),
        );
    } else {
        // The query rows of each image are its first r rows: one strided product per image.
        for (bi, dn1) in dn1.chunks_exact_mut(g.t * d).enumerate() {
            let dqi = Mat::rows(&dq[bi * g.r * d..(bi + 1) * g.r * d], d);
            matmul_with(dn1, add, g.r, d, d, dqi, Mat::rows(ww[Q_W], d));
        }
    }
    drop((dq, dk, dv));
    let mut dx = vec![T::zero(); n * d];
    ln_backward(&dn1, x, &s.mu1, &s.r1, ww[LN1_W], &mut dx, false);
    // The residual: the query rows' gradient passes to x as well.
    for (dx, dx1) in dx.chunks_exact_mut(g.t * d).zip(dx1.chunks_exact(g.r * d)) {
        for (a, &b) in dx[..g.r * d].iter_mut().zip(dx1) {
            *a += b;
        }
    }
    dx
}
