//! The NeRSTF MLP ([`super::nerstf`]) on plain arrays for the CPU: position encoding → matrix
//! products on `gemm` → bias + SiLU in one pass, reading only the output channels a caller needs.
//!
//! One implementation serves two callers: the renderer's fused NeRF pass (`render::fused`, which
//! adds compositing and the hand-written backward through [`FusedMlp::backward`]) and the
//! graph-free field query of the mesh export ([`super::Decoder::query_field`], forward only).
//! Composed from candle ops the same MLP makes one tensor per op and step (each a fresh
//! allocation and a pass of candle's elementwise thread pool); here a layer is one matrix
//! product into a preallocated buffer and one fused pass.
//!
//! Applies when the decoder is frozen (no static tensor tracks a gradient), on the CPU, in f32 or
//! f64, and the projected layers do not take the direction features.

use candle_core::{DType, Device, Result, Tensor};
use rayon::prelude::*;

use super::config::POSENC_DIM;
use super::nerstf::{posenc_into, Level, NerstfMlp};
use crate::kernels::{self, Mat, Real};

/// Output channels: signed distance, density (coarse, fine), STF RGB, NeRF RGB (coarse, fine).
const SDF: usize = 0;
const STF_RGB: usize = 3;

/// One MLP layer as plain row-major data.
struct Layer<T> {
    out: usize,
    inp: usize,
    /// Static weight `(out, inp)`; `None` when it comes from the latent.
    weight: Option<Vec<T>>,
    bias: Vec<T>,
}

/// The frozen part of the NeRSTF MLP as plain arrays; the last layer keeps only the output rows
/// its caller reads ([`FusedMlp::heads`]).
pub(crate) struct FusedMlp<T> {
    layers: Vec<Layer<T>>,
    n_projected: usize,
    heads: Vec<usize>,
}

/// Output channels read by the NeRF pass of `level`: density, then the three colour channels.
pub(crate) fn level_heads(level: Level) -> [usize; 4] {
    match level {
        Level::Coarse => [1, 6, 7, 8],
        Level::Fine => [2, 9, 10, 11],
    }
}

/// Output channels of the mesh field: signed distance, then the three STF colour channels.
pub(crate) const FIELD_HEADS: [usize; 4] = [SDF, STF_RGB, STF_RGB + 1, STF_RGB + 2];

/// A tensor's elements as a flat vector of `T` (detached).
pub(crate) fn plain<T: Real>(t: &Tensor) -> Result<Vec<T>> {
    t.detach().flatten_all()?.to_vec1::<T>()
}

/// Points per block of the position encoding and of [`FusedMlp::infer`]: one block's
/// activations (93 encoded values and one hidden layer per point) stay in a core's cache.
const BLOCK: usize = 512;

/// The position encoding of flat points `(n·3)` → flat `(n·93)` ([`posenc_into`]), in parallel
/// over blocks of points.
pub(crate) fn encode<T: Real>(points: &[T]) -> Vec<T> {
    let mut out = vec![T::zero(); points.len() / 3 * POSENC_DIM];
    out.par_chunks_mut(BLOCK * POSENC_DIM)
        .zip(points.par_chunks(BLOCK * 3))
        .for_each(|(out, p)| posenc_into(p, out));
    out
}

impl<T: Real> FusedMlp<T> {
    /// The plain form of `mlp` reading the output rows `heads`, or `None` when the fused MLP does
    /// not apply (a static tensor tracks a gradient, the dtype is not `T`, the device is not the
    /// CPU, the direction features enter a projected layer, or a head is out of range).
    pub(crate) fn of(mlp: &NerstfMlp, heads: &[usize], device: &Device) -> Result<Option<Self>> {
        if !device.is_cpu() || mlp.dtype() != T::DTYPE || mlp.weight_dtype() != T::DTYPE {
            return Ok(None);
        }
        let n_projected = mlp.n_projected();
        if mlp.insert_direction_at().is_some_and(|k| k < n_projected) {
            return Ok(None);
        }
        let parts = mlp.layers()?;
        let last = parts.len() - 1;
        let mut layers = Vec::with_capacity(parts.len());
        for (k, (weight, bias)) in parts.into_iter().enumerate() {
            if weight.as_ref().is_some_and(|w| w.track_op()) || bias.track_op() {
                return Ok(None);
            }
            let (mut out, mut bias) = (bias.dim(0)?, plain::<T>(&bias)?);
            let (mut weight, inp) = match weight {
                Some(w) => {
                    let (_, inp) = w.dims2()?;
                    (Some(plain::<T>(&w)?), inp)
                }
                None => (None, 0),
            };
            if k == last {
                if heads.iter().any(|&r| r >= out) {
                    return Ok(None);
                }
                let Some(w) = weight else {
                    return Ok(None);
                };
                weight = Some(
                    heads
                        .iter()
                        .flat_map(|&r| w[r * inp..(r + 1) * inp].to_vec())
                        .collect(),
                );
                bias = heads.iter().map(|&r| bias[r]).collect();
                out = heads.len();
            }
            layers.push(Layer {
                out,
                inp,
                weight,
                bias,
            });
        }
        Ok(Some(Self {
            layers,
            n_projected,
            heads: heads.to_vec(),
        }))
    }

    /// The projected weights (one `(1, out, in)` per projected layer) as plain arrays.
    pub(crate) fn projected(&self, weights: &[Tensor]) -> Result<Vec<Vec<T>>> {
        if weights.len() != self.n_projected {
            candle_core::bail!(
                "the MLP needs {} projected weights, got {}",
                self.n_projected,
                weights.len()
            );
        }
        weights
            .iter()
            .zip(&self.layers)
            .map(|(w, l)| {
                let (b, out, _) = w.dims3()?;
                if b != 1 || out != l.out {
                    candle_core::bail!("fused NeRSTF MLP: projected weight {:?}", w.shape());
                }
                plain::<T>(w)
            })
            .collect()
    }

    fn input_width(&self, k: usize, proj: &[Vec<T>]) -> usize {
        let l = &self.layers[k];
        match &l.weight {
            Some(_) => l.inp,
            None => proj[k].len() / l.out,
        }
    }

    /// The MLP on encoded points `h0 (n, 93)`: the head `(n, heads)` (raw, before any output
    /// activation) and, when `keep`, the hidden pre-activations (one `(n, out_k)` per hidden
    /// layer, for [`FusedMlp::backward`]).
    pub(crate) fn forward(
        &self,
        proj: &[Vec<T>],
        h0: &[T],
        n: usize,
        keep: bool,
    ) -> (Vec<T>, Vec<Vec<T>>) {
        let last = self.layers.len() - 1;
        let mut pre = Vec::new();
        let mut h: Vec<T> = Vec::new();
        for (k, l) in self.layers.iter().enumerate() {
            let inp = self.input_width(k, proj);
            let w: &[T] = match &l.weight {
                Some(w) => w,
                None => &proj[k],
            };
            let x: &[T] = if k == 0 { h0 } else { &h };
            let mut a = vec![T::zero(); n * l.out];
            kernels::matmul(
                &mut a,
                n,
                l.out,
                inp,
                Mat::rows(x, inp),
                Mat::transposed(w, inp),
            );
            if k == last {
                for row in a.chunks_exact_mut(l.out) {
                    for (v, &b) in row.iter_mut().zip(&l.bias) {
                        *v += b;
                    }
                }
                return (a, pre);
            }
            if keep {
                let mut next = vec![T::zero(); n * l.out];
                kernels::bias_silu(&mut a, &mut next, &l.bias);
                pre.push(a);
                h = next;
            } else {
                kernels::bias_silu_inplace(&mut a, &l.bias);
                h = a;
            }
        }
        (h, pre)
    }

    /// Gradients of the projected weights (flat `(out, in)`, `None` where `needs` is false) from
    /// the head gradient `g (n, heads)`; `h0` and `pre` as the forward saw and kept them. Static
    /// weights and all biases are frozen: no gradient is computed for them.
    pub(crate) fn backward(
        &self,
        proj: &[Vec<T>],
        h0: &[T],
        pre: &[Vec<T>],
        mut g: Vec<T>,
        n: usize,
        needs: &[bool],
    ) -> Vec<Option<Vec<T>>> {
        let mut grads: Vec<Option<Vec<T>>> = vec![None; self.n_projected];
        // Layers below the lowest projected layer that needs a gradient need no backward.
        let Some(lowest) = (0..self.n_projected).find(|&k| needs.get(k).copied().unwrap_or(false))
        else {
            return grads;
        };
        for k in (lowest..self.layers.len()).rev() {
            let l = &self.layers[k];
            let inp = self.input_width(k, proj);
            let w: &[T] = match &l.weight {
                Some(w) => w,
                None => &proj[k],
            };
            let wants_dw = k < self.n_projected && needs.get(k).copied().unwrap_or(false);
            // h_{k−1} (needed for ∂W_k) and g_{k−1} = (g_k W_k) ⊙ silu'(a_{k−1}).
            let mut h_prev = None;
            let mut g_prev = None;
            if k > lowest {
                let mut dh = vec![T::zero(); n * inp];
                kernels::matmul(
                    &mut dh,
                    n,
                    inp,
                    l.out,
                    Mat::rows(&g, l.out),
                    Mat::rows(w, inp),
                );
                let mut hv = wants_dw.then(|| vec![T::zero(); n * inp]);
                kernels::silu_grad(&pre[k - 1], &mut dh, hv.as_deref_mut(), inp);
                h_prev = hv;
                g_prev = Some(dh);
            } else if wants_dw && k > 0 {
                let mut hv = vec![T::zero(); n * inp];
                kernels::silu(&pre[k - 1], &mut hv, inp);
                h_prev = Some(hv);
            }
            if wants_dw {
                let x: &[T] = if k == 0 {
                    h0
                } else {
                    h_prev.as_deref().unwrap_or(&[])
                };
                let mut dw = vec![T::zero(); l.out * inp];
                kernels::matmul(
                    &mut dw,
                    l.out,
                    inp,
                    n,
                    Mat::transposed(&g, l.out),
                    Mat::rows(x, inp),
                );
                grads[k] = Some(dw);
            }
            match g_prev {
                Some(gp) => g = gp,
                None => break,
            }
        }
        grads
    }

    /// The head `(n, heads)` (raw) at flat points `(n·3)`, forward only: blocks of
    /// points run in parallel, each encoded and passed through every layer on one thread with
    /// its buffers reused, so the activations stay in cache and no step waits for the others.
    pub(crate) fn infer(&self, proj: &[Vec<T>], points: &[T]) -> Vec<T> {
        let n = points.len() / 3;
        let width = self.heads.len();
        let last = self.layers.len() - 1;
        let mut head = vec![T::zero(); n * width];
        head.par_chunks_mut(BLOCK * width)
            .zip(points.par_chunks(BLOCK * 3))
            .for_each_init(
                || (Vec::new(), Vec::new()),
                |(h, next), (out, pts)| {
                    let m = pts.len() / 3;
                    h.clear();
                    h.resize(m * POSENC_DIM, T::zero());
                    posenc_into(pts, h);
                    for (k, l) in self.layers.iter().enumerate() {
                        let inp = self.input_width(k, proj);
                        let w: &[T] = match &l.weight {
                            Some(w) => w,
                            None => &proj[k],
                        };
                        let dst: &mut [T] = if k == last {
                            &mut *out
                        } else {
                            next.clear();
                            next.resize(m * l.out, T::zero());
                            next
                        };
                        kernels::matmul_serial(
                            dst,
                            m,
                            l.out,
                            inp,
                            Mat::rows(h, inp),
                            Mat::transposed(w, inp),
                        );
                        if k == last {
                            for row in dst.chunks_exact_mut(l.out) {
                                for (v, &b) in row.iter_mut().zip(&l.bias) {
                                    *v += b;
                                }
                            }
                        } else {
                            kernels::bias_silu_inplace_rows(dst, &l.bias);
                            std::mem::swap(h, next);
                        }
                    }
                },
            );
        head
    }

    /// The mesh field at flat points `(n·3)`: signed distance `tanh(raw₀)` `(n)` and, when
    /// `colours`, STF colour `sigmoid(raw₃..₆)` `(n, 3)` (else empty), as
    /// [`super::nerstf::sdf`] and [`super::nerstf::stf_rgb`] compute them; forward only. Needs
    /// an MLP built with [`FIELD_HEADS`].
    pub(crate) fn field(
        &self,
        proj: &[Vec<T>],
        points: &[T],
        colours: bool,
    ) -> Result<(Vec<T>, Vec<T>)> {
        if self.heads != FIELD_HEADS {
            candle_core::bail!(
                "the field query needs heads {FIELD_HEADS:?}, this MLP reads {:?} (bug)",
                self.heads
            );
        }
        let head = self.infer(proj, points);
        let half = T::from_f64(0.5);
        let sigmoid = |x: T| ((x * half).tanh() + T::one()) * half;
        let n = points.len() / 3;
        let mut sdf = vec![T::zero(); n];
        let mut rgb = vec![T::zero(); if colours { 3 * n } else { 0 }];
        sdf.par_chunks_mut(BLOCK)
            .zip(head.par_chunks(4 * BLOCK))
            .for_each(|(sdf, head)| {
                for (s, row) in sdf.iter_mut().zip(head.chunks_exact(4)) {
                    *s = row[0].tanh();
                }
            });
        rgb.par_chunks_mut(3 * BLOCK)
            .zip(head.par_chunks(4 * BLOCK))
            .for_each(|(rgb, head)| {
                for (c, row) in rgb.chunks_exact_mut(3).zip(head.chunks_exact(4)) {
                    for (c, &x) in c.iter_mut().zip(&row[1..]) {
                        *c = sigmoid(x);
                    }
                }
            });
        Ok((sdf, rgb))
    }
}

/// A fused MLP in the decoder's dtype.
pub(crate) enum Fused {
    /// f32 decoder.
    F32(std::sync::Arc<FusedMlp<f32>>),
    /// f64 decoder.
    F64(std::sync::Arc<FusedMlp<f64>>),
}

impl Fused {
    /// See [`FusedMlp::of`].
    pub(crate) fn of(mlp: &NerstfMlp, heads: &[usize], device: &Device) -> Result<Option<Self>> {
        use std::sync::Arc;
        Ok(match mlp.dtype() {
            DType::F32 => FusedMlp::of(mlp, heads, device)?.map(|m| Fused::F32(Arc::new(m))),
            DType::F64 => FusedMlp::of(mlp, heads, device)?.map(|m| Fused::F64(Arc::new(m))),
            _ => None,
        })
    }
}
