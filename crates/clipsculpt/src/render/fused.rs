//! The NeRF pass of a chunk of rays as one graph node on the CPU: position encoding → NeRSTF
//! MLP (matrix products on `gemm`, bias + SiLU in one pass) → density and colour of one level →
//! compositing → background, with a hand-written backward to the latent-derived MLP weights.
//!
//! Composed from candle ops the same pass makes ~40 tensors per chunk (each a fresh allocation
//! and a single-threaded pass over memory) and keeps most of them for backward. Here the forward
//! keeps only the hidden pre-activations (when a weight tracks a gradient), and backward is
//! the analytic chain:
//!
//! - compositing (see [`super::composite`]): with `T_k = e^{−M_k}` (`T_{−1} = 1`) the weights are
//!   `w_k = T_{k−1} − T_k`, so for `C = Σ w_k c_k` and `T = T_last`:
//!   `∂C·g/∂τ_k = T_k (c_k·g) − Σ_{i>k} w_i (c_i·g)` and `∂T/∂τ_k = −T`; then `τ = relu(raw)·Δ`
//!   and `c = sigmoid(raw)`;
//! - the MLP: `g_{k−1} = (g_k W_k) ⊙ silu'(a_{k−1})`, `∂W_k = g_kᵀ h_{k−1}` for the projected
//!   layers (static weights and all biases are frozen: no gradient is computed for them). The MLP
//!   forward and backward are [`crate::shap_e::fused_mlp`], shared with the mesh export's field
//!   query.
//!
//! Used when the decoder is frozen, on the CPU, in f32 or f64, and the projected layers do not
//! take the direction features; otherwise the renderer composes candle ops.

use std::sync::{Arc, Mutex};

use candle_core::{Device, Result, Tensor};
use rayon::prelude::*;

use crate::autodiff::vjp::attach;
use crate::kernels::fastmath::simd_dispatch;
use crate::kernels::{sigmoid, Real};
use crate::shap_e::fused_mlp::{encode, plain};
pub(crate) use crate::shap_e::fused_mlp::{Fused, FusedMlp};

/// The geometry of a chunk: sample points and bin widths of the rays that meet the volume, and
/// which rays do. A ray that misses takes no samples: its output is the background with opacity
/// 0 whatever the field (the composed path multiplies its compositing by a zero hit mask), and
/// its gradient is zero.
pub(crate) struct Samples<T> {
    /// Sample points `(h·s, 3)` of the `h` rays that meet the volume, ray-major.
    pub(crate) points: Vec<T>,
    /// Their bin widths `(h, s)`.
    pub(crate) delta: Vec<T>,
    /// Per ray `(r)`: whether it meets the volume.
    pub(crate) hit: Vec<bool>,
    /// Samples per ray.
    pub(crate) per_ray: usize,
}

impl<T: Real> Samples<T> {
    fn rays(&self) -> usize {
        self.hit.len()
    }

    /// Per ray, its index among the rays that meet the volume.
    fn slots(&self) -> Vec<Option<usize>> {
        let mut next = 0;
        self.hit
            .iter()
            .map(|&h| {
                h.then(|| {
                    next += 1;
                    next - 1
                })
            })
            .collect()
    }

    /// The samples of the ray in `slot`: head rows `(s, 4)` and widths `(s)`.
    fn ray<'a>(&'a self, head: &'a [T], slot: usize) -> (&'a [T], &'a [T]) {
        let s = self.per_ray;
        (
            &head[slot * 4 * s..(slot + 1) * 4 * s],
            &self.delta[slot * s..(slot + 1) * s],
        )
    }

    /// The position encoding `(h·s, 93)`.
    fn encode(&self) -> Vec<T> {
        encode(&self.points)
    }
}

simd_dispatch!(
    /// Head rows `(n, 4)` → density kept raw, colour channels through [`sigmoid`] (the composed
    /// path's `½(1 + tanh(x/2))` agrees within a few ulps), in one vectorised pass (every
    /// value's sigmoid is computed; the density column keeps its input).
    colours_rows<T: Real>(head: &mut [T]) {
        for (i, v) in head.iter_mut().enumerate() {
            let s = sigmoid(*v);
            if i % 4 != 0 {
                *v = s;
            }
        }
    }
);

/// [`colours_rows`] in parallel.
fn colours<T: Real>(head: &mut [T]) {
    head.par_chunks_mut(RAYS_PER_TASK * 64 * 4)
        .for_each(|h| colours_rows(h));
}

/// Per-ray compositing of rows `(s, 4)` = raw density and colour (after [`colours`]) over widths
/// `delta (s)`: `(colour, T)`.
/// `T_k = e^{−M_k}` and `w_k = (1 − e^{−τ_k})·T_{k−1}` as [`super::composite`] computes them,
/// with the vectorisable `exp`.
fn composite_ray<T: Real>(head: &[T], delta: &[T]) -> ([T; 3], T) {
    let (mut mass, mut colour) = (T::zero(), [T::zero(); 3]);
    for (raw, &dt) in head.chunks_exact(4).zip(delta) {
        let tau = raw[0].max_of(T::zero()) * dt;
        let before = mass;
        mass += tau;
        let wk = (T::one() - (-tau).fast_exp()) * (-before).fast_exp();
        for j in 0..3 {
            colour[j] += wk * raw[1 + j];
        }
    }
    (colour, (-mass).fast_exp())
}

/// The compositing weights alone of head rows `(s, 4)` over widths `delta (s)`, into `w (s)`.
fn composite_weights<T: Real>(head: &[T], delta: &[T], w: &mut [T]) {
    let mut mass = T::zero();
    for ((raw, &dt), w) in head.chunks_exact(4).zip(delta).zip(w) {
        let tau = raw[0].max_of(T::zero()) * dt;
        let before = mass;
        mass += tau;
        *w = (T::one() - (-tau).fast_exp()) * (-before).fast_exp();
    }
}

/// Rays per rayon task of the compositing loops.
const RAYS_PER_TASK: usize = 64;

/// Compositing weights `(r, s)` of `level` (graph-free), for importance sampling.
pub(crate) fn coarse_weights<T: Real>(
    mlp: &FusedMlp<T>,
    weights: &[Tensor],
    samples: &Samples<T>,
) -> Result<Vec<T>> {
    let proj = mlp.projected(weights)?;
    let head = mlp.infer(&proj, &samples.points);
    let s = samples.per_ray;
    let slots = samples.slots();
    let mut w = vec![T::zero(); samples.rays() * s];
    w.par_chunks_mut(RAYS_PER_TASK * s)
        .zip(slots.par_chunks(RAYS_PER_TASK))
        .for_each(|(w, slots)| {
            for (w, slot) in w.chunks_exact_mut(s).zip(slots) {
                if let Some(j) = *slot {
                    let (head, delta) = samples.ray(&head, j);
                    composite_weights(head, delta, w);
                }
            }
        });
    Ok(w)
}

/// What backward needs from the forward.
struct Saved<T> {
    h0: Vec<T>,
    pre: Vec<Vec<T>>,
    head: Vec<T>,
}

/// Renders the chunk `samples` through the MLP with latent-derived `weights` (one `(1, out, in)`
/// per projected layer): `(r, 4)` = RGB over `background` and opacity, as one graph node whose
/// backward reaches the tracked `weights`.
pub(crate) fn render<T: Real>(
    mlp: &Arc<FusedMlp<T>>,
    weights: &[Tensor],
    samples: Samples<T>,
    background: [f32; 3],
    device: &Device,
) -> Result<Tensor> {
    let proj = mlp.projected(weights)?;
    let r = samples.rays();
    let n = samples.points.len() / 3;
    let keep = weights.iter().any(|w| w.track_op());
    // Without a gradient to keep, the blocked forward (no saved activations); else the layer-wise
    // one, which keeps the encoding and the pre-activations for backward.
    let (h0, mut head, pre) = if keep {
        let h0 = samples.encode();
        let (head, pre) = mlp.forward(&proj, &h0, n, true);
        (h0, head, pre)
    } else {
        (Vec::new(), mlp.infer(&proj, &samples.points), Vec::new())
    };
    let bg = background.map(|c| T::from_f64(c as f64));
    let slots = samples.slots();
    // Colours through the sigmoid in one vectorised pass (a copy when backward needs the raw
    // head).
    let mut rows = if keep { head.clone() } else { Vec::new() };
    let rows: &[T] = if keep {
        colours(&mut rows);
        &rows
    } else {
        colours(&mut head);
        &head
    };
    let mut out = vec![T::zero(); r * 4];
    out.par_chunks_mut(RAYS_PER_TASK * 4)
        .zip(slots.par_chunks(RAYS_PER_TASK))
        .for_each(|(out, slots)| {
            for (o, slot) in out.chunks_exact_mut(4).zip(slots) {
                match *slot {
                    Some(j) => {
                        let (rows, delta) = samples.ray(rows, j);
                        let (c, t) = composite_ray(rows, delta);
                        for k in 0..3 {
                            o[k] = c[k] + t * bg[k];
                        }
                        o[3] = T::one() - t;
                    }
                    None => {
                        o[..3].copy_from_slice(&bg);
                        o[3] = T::zero();
                    }
                }
            }
        });
    let out = Tensor::from_vec(out, (r, 4), device)?;
    if !keep {
        return Ok(out);
    }
    let saved = Mutex::new(Some(Saved { h0, pre, head }));
    let mlp = mlp.clone();
    let inputs: Vec<&Tensor> = weights.iter().collect();
    attach(
        "fused_nerf",
        out,
        &inputs,
        Arc::new(move |v| {
            let saved = saved
                .lock()
                .map_err(|_| candle_core::Error::Msg("fused pass lock poisoned (bug)".into()))?
                .take();
            let saved = match saved {
                Some(s) => s,
                None => {
                    // A second backward through the same node: recompute.
                    let h0 = samples.encode();
                    let (head, pre) = mlp.forward(&proj, &h0, n, true);
                    Saved { h0, pre, head }
                }
            };
            let g = plain::<T>(&v.grad.to_dtype(T::DTYPE)?)?;
            let dhead = composite_backward(&saved.head, &samples, &g, bg);
            let needs: Vec<bool> = (0..proj.len()).map(|i| v.needs(i)).collect();
            let grads = mlp.backward(&proj, &saved.h0, &saved.pre, dhead, n, &needs);
            grads
                .into_iter()
                .zip(v.inputs)
                .map(|(g, w)| {
                    g.map(|g| Tensor::from_vec(g, w.shape(), w.device())?.to_dtype(w.dtype()))
                        .transpose()
                })
                .collect()
        }),
    )
}

/// The head gradient `(h·s, 4)` (rays that meet the volume) from the output gradient `g (r, 4)`.
fn composite_backward<T: Real>(head: &[T], samples: &Samples<T>, g: &[T], bg: [T; 3]) -> Vec<T> {
    let s = samples.per_ray;
    let mut dhead = vec![T::zero(); head.len()];
    let mut w = vec![T::zero(); s];
    let mut trans = vec![T::zero(); s];
    let mut dot = vec![T::zero(); s];
    let hit_rows = g.chunks_exact(4).zip(&samples.hit).filter(|(_, &h)| h);
    for (((dh, head), delta), (g, _)) in dhead
        .chunks_exact_mut(4 * s)
        .zip(head.chunks_exact(4 * s))
        .zip(samples.delta.chunks_exact(s))
        .zip(hit_rows)
    {
        // out_rgb = C + T·bg, opacity = 1 − T.
        let gc = [g[0], g[1], g[2]];
        let gt = g[0] * bg[0] + g[1] * bg[1] + g[2] * bg[2] - g[3];
        let mut mass = T::zero();
        for (k, (raw, &dt)) in head.chunks_exact(4).zip(delta).enumerate() {
            let tau = raw[0].max_of(T::zero()) * dt;
            let before = mass;
            mass += tau;
            w[k] = (T::one() - (-tau).fast_exp()) * (-before).fast_exp();
            trans[k] = (-mass).fast_exp();
            let c = [sigmoid(raw[1]), sigmoid(raw[2]), sigmoid(raw[3])];
            dot[k] = c[0] * gc[0] + c[1] * gc[1] + c[2] * gc[2];
            for j in 0..3 {
                dh[4 * k + 1 + j] = w[k] * gc[j] * c[j] * (T::one() - c[j]);
            }
        }
        let t_last = trans[s - 1];
        let mut suffix = T::zero();
        for k in (0..s).rev() {
            let dtau = trans[k] * dot[k] - suffix - gt * t_last;
            suffix += w[k] * dot[k];
            let raw = head[4 * k];
            // candle's relu passes the gradient at 0.
            dh[4 * k] = if raw >= T::zero() {
                dtau * delta[k]
            } else {
                T::zero()
            };
        }
    }
    dhead
}

#[cfg(test)]
mod tests {
    use super::super::{render_chunk, Camera, FusedPasses, RayDraws, RenderSettings};
    use super::*;
    use crate::autodiff::rng::Rng;
    use crate::shap_e::fused_mlp::level_heads;
    use crate::shap_e::nerstf::Level;
    use crate::shap_e::{Decoder, RendererConfig};
    use candle_core::{DType, Var};

    /// A decoder of hidden width `d` with random frozen weights for every tensor it asks for (names
    /// and shapes recorded from a variable-backed build); positive biases, so that some densities
    /// pass the ReLU.
    fn random_decoder(d: usize, dev: &Device) -> Result<Decoder> {
        let dev = dev.clone();
        let cfg: RendererConfig = serde_json::from_value(serde_json::json!({
            "d_hidden": d, "d_latent": 16,
            "param_shapes": [[d, 93], [d, d], [d, d], [d, d]]
        }))
        .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        // Random frozen weights for every tensor the decoder asks for (names and shapes recorded
        // from a variable-backed build).
        let varmap = candle_nn::VarMap::new();
        Decoder::new(
            candle_nn::VarBuilder::from_varmap(&varmap, DType::F32, &dev),
            &cfg,
        )?;
        let mut rng = Rng::new(5);
        let mut shapes: Vec<(String, Vec<usize>)> = varmap
            .data()
            .lock()
            .map_err(|_| candle_core::Error::Msg("lock".into()))?
            .iter()
            .map(|(name, var)| (name.clone(), var.dims().to_vec()))
            .collect();
        shapes.sort(); // a fixed order, so the draws are reproducible
        let mut tensors = std::collections::HashMap::new();
        for (name, dims) in shapes {
            // Positive biases, so that some densities pass the ReLU.
            let (scale, offset) = if name.ends_with("bias") {
                (0.1, 0.3)
            } else {
                (2.0 / (*dims.last().unwrap_or(&1) as f64).sqrt(), 0.0)
            };
            let t = rng.normal_tensor(&dims, &dev)?.affine(scale, offset)?;
            tensors.insert(name, t);
        }
        Decoder::new(
            candle_nn::VarBuilder::from_tensors(tensors, DType::F32, &dev),
            &cfg,
        )
    }

    /// The fused pass (coarse weights for importance sampling, then the image) gives the values
    /// and latent gradients of the composed candle ops, with a background and a missed ray.
    #[test]
    fn fused_pass_matches_the_composed_ops() -> Result<()> {
        let dev = Device::Cpu;
        let d = 8;
        let dec = random_decoder(d, &dev)?;
        let z = Var::from_tensor(&(Rng::new(1).normal_tensor(&[1, 4 * d, 16], &dev)? * 2.0)?)?;
        // A wide field of view so that the corner rays miss the volume.
        let cam = Camera::orbit(0.4, 0.3, 2.5, 1.2, 4, 3);
        let (o, dirs) = {
            let (o, d) = cam.rays();
            let n = cam.width * cam.height;
            (
                Tensor::from_vec(o, (n, 3), &dev)?,
                Tensor::from_vec(d, (n, 3), &dev)?,
            )
        };
        let settings = RenderSettings {
            n_coarse: 8,
            n_fine: 8,
            chunk_rays: None,
            background: None,
        };
        let draws = RayDraws::draw(&mut Rng::new(3), 12, &settings, &dev)?;
        let batched = [o, dirs, draws.coarse, draws.fine_index, draws.fine_offset];
        let c = Rng::new(9).normal_tensor(&[12, 4], &dev)?;
        let bg = [0.2, 0.5, 0.9];
        let run = |fast: &FusedPasses| -> Result<(Vec<f32>, Vec<f32>)> {
            let weights = dec.mlp_weights(z.as_tensor())?;
            let out = render_chunk(dec.mlp(), fast, &batched, &weights, bg)?;
            let grads = (&out * &c)?.sum_all()?.backward()?;
            let g = grads
                .get(&z)
                .ok_or_else(|| candle_core::Error::Msg("no gradient".into()))?;
            Ok((out.flatten_all()?.to_vec1()?, g.flatten_all()?.to_vec1()?))
        };
        let fused = FusedPasses {
            coarse: Fused::of(dec.mlp(), &level_heads(Level::Coarse), &dev)?,
            fine: Fused::of(dec.mlp(), &level_heads(Level::Fine), &dev)?,
        };
        assert!(fused.coarse.is_some() && fused.fine.is_some());
        let (a, ga) = run(&fused)?;
        let (b, gb) = run(&FusedPasses {
            coarse: None,
            fine: None,
        })?;
        let max_diff = |x: &[f32], y: &[f32]| {
            x.iter()
                .zip(y)
                .map(|(p, q)| (p - q).abs())
                .fold(0f32, f32::max)
        };
        let opacity: Vec<f32> = b.chunks(4).map(|r| r[3]).collect();
        assert!(opacity.contains(&0.0), "a ray misses: {opacity:?}");
        assert!(
            opacity.iter().any(|&v| v > 1e-5),
            "a ray sees density: {opacity:?}"
        );
        assert!(
            max_diff(&a, &b) < 1e-5,
            "values differ by {}",
            max_diff(&a, &b)
        );
        let scale = gb.iter().fold(0f32, |m, v| m.max(v.abs()));
        assert!(scale > 1e-4, "the gradient is not trivial");
        let err = max_diff(&ga, &gb) / scale;
        assert!(
            err < 1e-4,
            "gradients differ by {err} (relative to the largest)"
        );
        Ok(())
    }
}
