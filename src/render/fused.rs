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
//!   layers (static weights and all biases are frozen: no gradient is computed for them).
//!
//! Used when the decoder is frozen, on the CPU, in f32 or f64, and the projected layers do not
//! take the direction features; otherwise the renderer composes candle ops.

use std::sync::{Arc, Mutex};

use candle_core::{DType, Device, Result, Tensor};

use super::kernels::{self, Mat, Real};
use crate::autodiff::vjp::attach;
use crate::shap_e::nerstf::{posenc, Level, NerstfMlp};

/// One MLP layer as plain row-major data.
struct Layer<T> {
    out: usize,
    inp: usize,
    /// Static weight `(out, inp)`; `None` when it comes from the latent.
    weight: Option<Vec<T>>,
    bias: Vec<T>,
}

/// The frozen part of the NeRSTF MLP as plain arrays, for one level (the last layer keeps only
/// the 4 output rows that level reads: density, then RGB).
pub struct FusedMlp<T> {
    layers: Vec<Layer<T>>,
    n_projected: usize,
}

/// Output channels read by each level: density, then the three colour channels.
fn head_rows(level: Level) -> [usize; 4] {
    match level {
        Level::Coarse => [1, 6, 7, 8],
        Level::Fine => [2, 9, 10, 11],
    }
}

fn plain<T: Real>(t: &Tensor) -> Result<Vec<T>> {
    t.detach().flatten_all()?.to_vec1::<T>()
}

impl<T: Real> FusedMlp<T> {
    /// The plain form of `mlp` for `level`, or `None` when the fused pass does not apply (a
    /// static tensor tracks a gradient, the dtype is not `T`, the device is not the CPU, or the
    /// direction features enter a projected layer).
    pub fn of(mlp: &NerstfMlp, level: Level, device: &Device) -> Result<Option<Self>> {
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
                let rows = head_rows(level);
                if out <= rows[3] {
                    return Ok(None);
                }
                let Some(w) = weight else {
                    return Ok(None);
                };
                weight = Some(
                    rows.iter()
                        .flat_map(|&r| w[r * inp..(r + 1) * inp].to_vec())
                        .collect(),
                );
                bias = rows.iter().map(|&r| bias[r]).collect();
                out = rows.len();
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
        }))
    }

    /// The projected weights as plain arrays, with their input widths filled in.
    fn projected(&self, weights: &[Tensor]) -> Result<Vec<Vec<T>>> {
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
                    candle_core::bail!("fused NeRF pass: projected weight {:?}", w.shape());
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

    /// The MLP on encoded points `h0 (n, in₀)`: the head `(n, 4)` and, when `keep`, the hidden
    /// pre-activations (one `(n, out_k)` per hidden layer).
    fn forward(&self, proj: &[Vec<T>], h0: &[T], n: usize, keep: bool) -> (Vec<T>, Vec<Vec<T>>) {
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

    /// Gradients of the projected weights (flat `(out, in)`, `None` where not needed) from the
    /// head gradient `g (n, 4)`.
    fn backward(
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
}

/// The geometry of a chunk: sample points, bin widths, hit mask, background.
pub struct Samples<T> {
    /// Sample points `(r·s, 3)`, ray-major.
    pub points: Vec<T>,
    /// Bin widths `(r, s)`.
    pub delta: Vec<T>,
    /// 1 for rays that meet the volume, 0 for misses `(r)`.
    pub hit: Vec<T>,
    /// Samples per ray.
    pub per_ray: usize,
}

impl<T: Real> Samples<T> {
    fn rays(&self) -> usize {
        self.hit.len()
    }

    /// The position encoding `(r·s, 93)`.
    fn encode(&self, device: &Device) -> Result<Vec<T>> {
        let n = self.points.len() / 3;
        let pts = Tensor::from_slice(&self.points, (n, 3), device)?;
        plain::<T>(&posenc(&pts)?)
    }
}

fn sigmoid<T: Real>(x: T) -> T {
    let half = T::from_f64(0.5);
    half * (T::one() + (half * x).tanh())
}

/// Per-ray compositing of head rows `(s, 4)` over widths `delta (s)`: `(colour, T)`, and the
/// weights into `w` when given.
fn composite_ray<T: Real>(head: &[T], delta: &[T], mut w: Option<&mut [T]>) -> ([T; 3], T) {
    let (mut mass, mut colour) = (T::zero(), [T::zero(); 3]);
    for (k, (raw, &dt)) in head.chunks_exact(4).zip(delta).enumerate() {
        let tau = raw[0].max_of(T::zero()) * dt;
        let before = mass;
        mass += tau;
        let wk = (T::one() - (-tau).exp()) * (-before).exp();
        for j in 0..3 {
            colour[j] += wk * sigmoid(raw[1 + j]);
        }
        if let Some(w) = w.as_deref_mut() {
            w[k] = wk;
        }
    }
    (colour, (-mass).exp())
}

/// Compositing weights `(r, s)` of `level` (graph-free), for importance sampling.
pub fn coarse_weights<T: Real>(
    mlp: &FusedMlp<T>,
    weights: &[Tensor],
    samples: &Samples<T>,
    device: &Device,
) -> Result<Vec<T>> {
    let proj = mlp.projected(weights)?;
    let h0 = samples.encode(device)?;
    let (head, _) = mlp.forward(&proj, &h0, samples.points.len() / 3, false);
    let s = samples.per_ray;
    let mut w = vec![T::zero(); samples.rays() * s];
    for ((w, head), delta) in w
        .chunks_exact_mut(s)
        .zip(head.chunks_exact(4 * s))
        .zip(samples.delta.chunks_exact(s))
    {
        composite_ray(head, delta, Some(w));
    }
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
pub fn render<T: Real>(
    mlp: &Arc<FusedMlp<T>>,
    weights: &[Tensor],
    samples: Samples<T>,
    background: [f32; 3],
    device: &Device,
) -> Result<Tensor> {
    let proj = mlp.projected(weights)?;
    let h0 = samples.encode(device)?;
    let (s, r) = (samples.per_ray, samples.rays());
    let keep = weights.iter().any(|w| w.track_op());
    let (head, pre) = mlp.forward(&proj, &h0, r * s, keep);
    let bg = background.map(|c| T::from_f64(c as f64));
    let mut out = vec![T::zero(); r * 4];
    for (((o, head), delta), &hit) in out
        .chunks_exact_mut(4)
        .zip(head.chunks_exact(4 * s))
        .zip(samples.delta.chunks_exact(s))
        .zip(&samples.hit)
    {
        let (c, tr) = composite_ray(head, delta, None);
        let t = tr * hit + (T::one() - hit);
        for j in 0..3 {
            o[j] = c[j] * hit + t * bg[j];
        }
        o[3] = T::one() - t;
    }
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
                    let h0 = samples.encode(v.grad.device())?;
                    let (head, pre) = mlp.forward(&proj, &h0, r * s, true);
                    Saved { h0, pre, head }
                }
            };
            let g = plain::<T>(&v.grad.to_dtype(T::DTYPE)?)?;
            let dhead = composite_backward(&saved.head, &samples, &g, bg);
            let needs: Vec<bool> = (0..proj.len()).map(|i| v.needs(i)).collect();
            let grads = mlp.backward(&proj, &saved.h0, &saved.pre, dhead, r * s, &needs);
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

/// The head gradient `(r·s, 4)` from the output gradient `g (r, 4)`.
fn composite_backward<T: Real>(head: &[T], samples: &Samples<T>, g: &[T], bg: [T; 3]) -> Vec<T> {
    let s = samples.per_ray;
    let mut dhead = vec![T::zero(); head.len()];
    let mut w = vec![T::zero(); s];
    let mut trans = vec![T::zero(); s];
    let mut dot = vec![T::zero(); s];
    for ((((dh, head), delta), &hit), g) in dhead
        .chunks_exact_mut(4 * s)
        .zip(head.chunks_exact(4 * s))
        .zip(samples.delta.chunks_exact(s))
        .zip(&samples.hit)
        .zip(g.chunks_exact(4))
    {
        // out_rgb = hit·C + t·bg, opacity = 1 − t, t = hit·T + 1 − hit.
        let gc = [g[0] * hit, g[1] * hit, g[2] * hit];
        let gt = hit * (g[0] * bg[0] + g[1] * bg[1] + g[2] * bg[2] - g[3]);
        let mut mass = T::zero();
        for (k, (raw, &dt)) in head.chunks_exact(4).zip(delta).enumerate() {
            let tau = raw[0].max_of(T::zero()) * dt;
            let before = mass;
            mass += tau;
            w[k] = (T::one() - (-tau).exp()) * (-before).exp();
            trans[k] = (-mass).exp();
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

/// The fused MLP of `mlp` for `level` in the decoder's dtype, when the fused pass applies.
pub enum Fused {
    /// f32 decoder.
    F32(Arc<FusedMlp<f32>>),
    /// f64 decoder.
    F64(Arc<FusedMlp<f64>>),
}

impl Fused {
    /// See [`FusedMlp::of`].
    pub fn of(mlp: &NerstfMlp, level: Level, device: &Device) -> Result<Option<Self>> {
        Ok(match mlp.dtype() {
            DType::F32 => FusedMlp::of(mlp, level, device)?.map(|m| Fused::F32(Arc::new(m))),
            DType::F64 => FusedMlp::of(mlp, level, device)?.map(|m| Fused::F64(Arc::new(m))),
            _ => None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::{render_chunk, Camera, FusedPasses, RayDraws, RenderSettings};
    use super::*;
    use crate::autodiff::rng::Rng;
    use crate::shap_e::{Decoder, RendererConfig};
    use candle_core::Var;

    /// The fused pass (coarse weights for importance sampling, then the image) gives the values
    /// and latent gradients of the composed candle ops, with a background and a missed ray.
    #[test]
    fn fused_pass_matches_the_composed_ops() -> Result<()> {
        let dev = Device::Cpu;
        let d = 8;
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
        let dec = Decoder::new(
            candle_nn::VarBuilder::from_tensors(tensors, DType::F32, &dev),
            &cfg,
        )?;
        let z = Var::from_tensor(&(Rng::new(1).normal_tensor(&[1, 4 * d, 16], &dev)? * 2.0)?)?;
        // A wide field of view so that the corner rays miss the volume.
        let cam = Camera::orbit(0.4, 0.3, 2.5, 1.2, 4, 3);
        let (o, dirs) = cam.ray_tensors(&dev)?;
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
            coarse: Fused::of(dec.mlp(), Level::Coarse, &dev)?,
            fine: Fused::of(dec.mlp(), Level::Fine, &dev)?,
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
