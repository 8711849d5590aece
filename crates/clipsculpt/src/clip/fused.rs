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
use crate::autodiff::vjp::attach;
use crate::kernels::{
    add_row, fill_rows, ln_backward, ln_forward, matmul_with, quick_gelu, quick_gelu_grad, rows,
    softmax_rows, Mat, Real, Write,
};

/// A frozen encoder layer's tensors and settings.
#[derive(Debug, Clone)]
pub(crate) struct FusedLayer {
    parts: Parts<Tensor>,
    eps: f64,
    heads: usize,
    act: Activation,
}

/// A weight and its bias (a LayerNorm's or a linear layer's).
#[derive(Debug, Clone)]
struct Affine<W> {
    w: W,
    b: W,
}

/// The weights of one encoder layer, by name: as tensors, or borrowed from their storages.
#[derive(Debug, Clone)]
struct Parts<W> {
    ln1: Affine<W>,
    q: Affine<W>,
    k: Affine<W>,
    v: Affine<W>,
    out: Affine<W>,
    ln2: Affine<W>,
    fc1: Affine<W>,
    fc2: Affine<W>,
}

impl<W> Parts<W> {
    /// The parts by name, in the order of [`FusedLayer::new`].
    fn named(&self) -> [(&'static str, &Affine<W>); 8] {
        [
            ("layer_norm1", &self.ln1),
            ("q_proj", &self.q),
            ("k_proj", &self.k),
            ("v_proj", &self.v),
            ("out_proj", &self.out),
            ("layer_norm2", &self.ln2),
            ("fc1", &self.fc1),
            ("fc2", &self.fc2),
        ]
    }

    /// Every tensor (weights and biases).
    fn all(&self) -> impl Iterator<Item = &W> {
        self.named().into_iter().flat_map(|(_, a)| [&a.w, &a.b])
    }

    /// Each tensor through `f`, names kept.
    fn try_map<'a, U>(&'a self, mut f: impl FnMut(&'a W) -> Result<U>) -> Result<Parts<U>> {
        let mut pair = |a: &'a Affine<W>| -> Result<Affine<U>> {
            Ok(Affine {
                w: f(&a.w)?,
                b: f(&a.b)?,
            })
        };
        Ok(Parts {
            ln1: pair(&self.ln1)?,
            q: pair(&self.q)?,
            k: pair(&self.k)?,
            v: pair(&self.v)?,
            out: pair(&self.out)?,
            ln2: pair(&self.ln2)?,
            fc1: pair(&self.fc1)?,
            fc2: pair(&self.fc2)?,
        })
    }
}

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
    w: Parts<&'a [T]>,
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
    pub(crate) fn new(
        parts: [(&Tensor, Option<&Tensor>); 8],
        eps: f64,
        heads: usize,
        act: Activation,
    ) -> Option<Self> {
        let [ln1, q, k, v, out, ln2, fc1, fc2] = parts.map(|(w, b)| {
            Some(Affine {
                w: w.clone(),
                b: b?.clone(),
            })
        });
        Some(Self {
            parts: Parts {
                ln1: ln1?,
                q: q?,
                k: k?,
                v: v?,
                out: out?,
                ln2: ln2?,
                fc1: fc1?,
                fc2: fc2?,
            },
            eps,
            heads,
            act,
        })
    }

    /// The layer's output for the first `rows` tokens of `x (batch, tokens, hidden)`, with the
    /// optional additive `mask (tokens, tokens)`, or `None` when the fused layer does not apply
    /// (see the module doc). Differentiable with respect to `x`.
    pub(crate) fn forward(
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
            && self.parts.all().all(|t| {
                t.dtype() == T::DTYPE && t.device().is_cpu() && !t.track_op() && t.is_contiguous()
            })
    }

    fn geometry(&self, x: &Tensor, rows: usize) -> Result<Geometry> {
        let (b, t, d) = x.dims3()?;
        let p = &self.parts;
        let f = p.fc1.b.dim(0)?;
        if self.heads == 0 || !d.is_multiple_of(self.heads) || rows == 0 || rows > t {
            candle_core::bail!(
                "encoder layer: {rows} query rows of {t} tokens, hidden {d}, {} heads",
                self.heads
            );
        }
        for (name, t, want) in [
            ("q_proj.weight", &p.q.w, d * d),
            ("k_proj.weight", &p.k.w, d * d),
            ("v_proj.weight", &p.v.w, d * d),
            ("out_proj.weight", &p.out.w, d * d),
            ("fc1.weight", &p.fc1.w, f * d),
            ("fc2.weight", &p.fc2.w, d * f),
            ("layer_norm1.weight", &p.ln1.w, d),
            ("layer_norm2.weight", &p.ln2.w, d),
            ("fc2.bias", &p.fc2.b, d),
        ] {
            if t.elem_count() != want {
                candle_core::bail!(
                    "encoder layer: {name} has shape {:?} for hidden size {d}",
                    t.shape()
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
        let guards = self
            .parts
            .try_map(|t| Ok((t.storage_and_layout(), t.elem_count())))?;
        let w = guards.try_map(|((storage, layout), n)| {
            let Storage::Cpu(cpu) = &**storage else {
                candle_core::bail!("fused encoder layer: a weight left the cpu (bug)");
            };
            let start = layout.start_offset();
            Ok(&T::cpu_storage_as_slice(cpu)?[start..start + n])
        })?;
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
    ln_forward(x, ww.ln1.w, ww.ln1.b, eps, &mut n1, &mut mu1, &mut r1);
    // Queries (scaled by 1/√head_dim, bias included, as the composed layer does) for the query
    // rows, keys and values for every token.
    let nq = first_rows(&n1, g);
    let mut q = vec![T::zero(); nr * d];
    linear_into(&mut q, &nq, ww.q.w, ww.q.b, d);
    drop(nq);
    let scale = g.scale::<T>();
    rows::scale(&mut q, scale, d);
    let mut k = vec![T::zero(); n * d];
    linear_into(&mut k, &n1, ww.k.w, ww.k.b, d);
    let mut v = vec![T::zero(); n * d];
    linear_into(&mut v, &n1, ww.v.w, ww.v.b, d);
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
    add_row(&mut x1, ww.out.b);
    let write = Write::rows(d).adding();
    matmul_with(
        &mut x1,
        write,
        nr,
        d,
        d,
        Mat::rows(&o, d),
        Mat::transposed(ww.out.w, d),
    );
    drop(o);
    // LayerNorm 2 and the MLP.
    let (mut n2, mut mu2, mut r2) = (
        vec![T::zero(); nr * d],
        vec![T::zero(); nr],
        vec![T::zero(); nr],
    );
    ln_forward(&x1, ww.ln2.w, ww.ln2.b, eps, &mut n2, &mut mu2, &mut r2);
    let mut hpre = vec![T::zero(); nr * g.f];
    linear_into(&mut hpre, &n2, ww.fc1.w, ww.fc1.b, d);
    drop(n2);
    let mut h = vec![T::zero(); nr * g.f];
    quick_gelu(&hpre, &mut h, g.f);
    let mut out = x1.clone();
    add_row(&mut out, ww.fc2.b);
    matmul_with(
        &mut out,
        write,
        nr,
        d,
        g.f,
        Mat::rows(&h, g.f),
        Mat::transposed(ww.fc2.w, g.f),
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
        Mat::rows(ww.fc2.w, f),
    );
    quick_gelu_grad(&s.hpre, &mut dh, f);
    let mut dn2 = vec![T::zero(); nr * d];
    matmul_with(
        &mut dn2,
        Write::rows(d),
        nr,
        d,
        f,
        Mat::rows(&dh, f),
        Mat::rows(ww.fc1.w, d),
    );
    drop(dh);
    let mut dx1 = gy.to_vec();
    ln_backward(&dn2, &s.x1, &s.mu2, &s.r2, ww.ln2.w, &mut dx1, true);
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
        Mat::rows(ww.out.w, d),
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
        Mat::rows(ww.k.w, d),
    );
    let add = Write::rows(d).adding();
    matmul_with(
        &mut dn1,
        add,
        n,
        d,
        d,
        Mat::rows(&dv, d),
        Mat::rows(ww.v.w, d),
    );
    if g.r == g.t {
        matmul_with(
            &mut dn1,
            add,
            n,
            d,
            d,
            Mat::rows(&dq, d),
            Mat::rows(ww.q.w, d),
        );
    } else {
        // The query rows of each image are its first r rows: one strided product per image.
        for (bi, dn1) in dn1.chunks_exact_mut(g.t * d).enumerate() {
            let dqi = Mat::rows(&dq[bi * g.r * d..(bi + 1) * g.r * d], d);
            matmul_with(dn1, add, g.r, d, d, dqi, Mat::rows(ww.q.w, d));
        }
    }
    drop((dq, dk, dv));
    let mut dx = vec![T::zero(); n * d];
    ln_backward(&dn1, x, &s.mu1, &s.r1, ww.ln1.w, &mut dx, false);
    // The residual: the query rows' gradient passes to x as well.
    for (dx, dx1) in dx.chunks_exact_mut(g.t * d).zip(dx1.chunks_exact(g.r * d)) {
        for (a, &b) in dx[..g.r * d].iter_mut().zip(dx1) {
            *a += b;
        }
    }
    dx
}
