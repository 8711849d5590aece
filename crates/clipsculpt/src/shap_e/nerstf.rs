//! The NeRSTF MLP (diffusers `MLPNeRSTFModel` in `pipelines/shap_e/renderer.py`; original
//! `shap_e/models/nerstf/mlp.py`; `docs/shap-e.md`, "Decoder"): NeRF position encoding → `n_hidden_layers` SiLU
//! layers → `n_output` = 12 raw channels. The first layers' weights come from the latent
//! ([`super::params_proj`]), per latent, through a batched matmul (no in-place weight copy);
//! biases and the remaining layers are static. The direction features inserted before layer
//! `insert_direction_at` are always zero (Shap-E never passes a direction), so those weight
//! columns are dropped at load time.
//!
//! Channel map: 0 sdf (tanh), 1/2 density coarse/fine (ReLU), 3..6 STF RGB, 6..9 NeRF coarse
//! RGB, 9..12 NeRF fine RGB (sigmoid).

use candle_core::{DType, Result, Tensor, D};
use candle_nn::VarBuilder;

use super::config::{RendererConfig, DIRENC_DIM, POSENC_DIM};
use crate::autodiff::nn;
use crate::autodiff::ops;
use crate::kernels::Real;

/// Octaves of the position encoding.
const POS_OCTAVES: usize = 15;

/// NeRF position encoding of `x (…, 3)` → `(…, 93)`: `[x, sin(xb), sin(xb + π/2)]` with
/// `xb[k·3 + j] = 2^k·x_j` (scale-major), computed as diffusers does.
///
/// It runs on every MLP query and its ~90 `sin`s per point dominate CPU profiles, so a
/// f32 CPU input without a gradient graph takes [`posenc_f32`]: one pass, parallel
/// over points, no intermediate tensors, vectorised `sin`; it equals the tensor-op formulation
/// ([`posenc_ops`], the path for other dtypes, devices and tracked inputs) to within one ulp.
pub(crate) fn posenc(x: &Tensor) -> Result<Tensor> {
    let c = x.dim(D::Minus1)?;
    if c != 3 {
        candle_core::bail!("posenc takes points (…, 3), got {:?}", x.shape());
    }
    if x.dtype() != DType::F32 || !x.device().is_cpu() || x.track_op() {
        return posenc_ops(x);
    }
    let xs = x.flatten_all()?.to_vec1::<f32>()?;
    let mut shape = x.dims().to_vec();
    if let Some(last) = shape.last_mut() {
        *last = POSENC_DIM;
    }
    Tensor::from_vec(posenc_f32(&xs), shape, x.device())
}

/// Points per rayon task of [`posenc_f32`] (~380 KB of output each).
const POSENC_CHUNK: usize = 1024;
const _: () = assert!(POSENC_DIM == 3 + 2 * 3 * POS_OCTAVES);

/// [`posenc`] of flat `(n·3)` f32 points → flat `(n·93)`, in parallel over blocks of points
/// (see [`posenc_into`]).
pub(crate) fn posenc_f32(xs: &[f32]) -> Vec<f32> {
    use rayon::prelude::*;
    let mut out = vec![0f32; xs.len() / 3 * POSENC_DIM];
    out.par_chunks_mut(POSENC_CHUNK * POSENC_DIM)
        .zip(xs.par_chunks(POSENC_CHUNK * 3))
        .for_each(|(out, xs)| posenc_into(xs, out));
    out
}

/// [`posenc`] of flat `(n·3)` points into `out (n·93)` on the calling thread, with the
/// arguments of [`posenc_ops`] in `T`: `xb = x_j·2^k` (exact) and, for the cosine channel, the
/// sum `xb + (π/2 rounded to T)` (candle's scalar add is `affine(1, π/2)`, which converts the f64
/// scalar with `as` and computes `v·1 + add`, `·1` being exact). The sines are
/// [`Real::sin_in_place`] (in f32 vectorised, within one ulp of libm's `sinf`, which candle
/// uses; in f64 libm's `sin`, as candle).
pub(crate) fn posenc_into<T: Real>(xs: &[T], out: &mut [T]) {
    const HALF: usize = 3 * POS_OCTAVES;
    let half_pi = T::from_f64(std::f64::consts::FRAC_PI_2);
    let n = xs.len() / 3;
    let out = &mut out[..n * POSENC_DIM];
    for (o, p) in out.chunks_exact_mut(POSENC_DIM).zip(xs.chunks_exact(3)) {
        let (_, emb) = o.split_at_mut(3);
        let (sin, cos) = emb.split_at_mut(HALF);
        for k in 0..POS_OCTAVES {
            let scale = T::from_f64((1u32 << k) as f64);
            for j in 0..3 {
                let xb = p[j] * scale;
                sin[k * 3 + j] = xb;
                cos[k * 3 + j] = xb + half_pi;
            }
        }
    }
    // One vectorised pass over the whole block (per point, 90 values would leave a scalar
    // remainder); the 3 coordinate slots are written afterwards.
    T::sin_in_place(out);
    for (o, p) in out.chunks_exact_mut(POSENC_DIM).zip(xs.chunks_exact(3)) {
        o[..3].copy_from_slice(p);
    }
}

/// [`posenc`] with candle tensor ops (any dtype/device, differentiable).
fn posenc_ops(x: &Tensor) -> Result<Tensor> {
    let dims = x.dims().to_vec();
    let lead = &dims[..dims.len() - 1];
    let scales: Vec<f32> = (0..POS_OCTAVES).map(|k| (1u32 << k) as f32).collect();
    let scales = Tensor::from_vec(scales, (POS_OCTAVES, 1), x.device())?.to_dtype(x.dtype())?;
    let xb = x.unsqueeze(D::Minus2)?.broadcast_mul(&scales)?;
    let mut shape = lead.to_vec();
    shape.push(3 * POS_OCTAVES);
    let xb = xb.reshape(shape)?;
    let emb = Tensor::cat(&[&xb, &(&xb + std::f64::consts::FRAC_PI_2)?], D::Minus1)?.sin()?;
    Tensor::cat(&[x, &emb], D::Minus1)
}

/// Which NeRF pass reads the output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    /// Coarse pass: channels 1 and 6..9.
    Coarse,
    /// Fine pass: channels 2 and 9..12.
    Fine,
}

/// Differentiable, overflow-free sigmoid: `½(1 + tanh(x/2))`.
pub(crate) fn sigmoid(x: &Tensor) -> Result<Tensor> {
    ((x * 0.5)?.tanh()? + 1.0)? * 0.5
}

/// Density `relu(raw[…, 1 or 2])` → `(…)`.
pub fn density(raw: &Tensor, level: Level) -> Result<Tensor> {
    let c = match level {
        Level::Coarse => 1,
        Level::Fine => 2,
    };
    raw.narrow(D::Minus1, c, 1)?.squeeze(D::Minus1)?.relu()
}

/// NeRF colour `sigmoid(raw[…, 6..9 or 9..12])` → `(…, 3)`.
pub fn nerf_rgb(raw: &Tensor, level: Level) -> Result<Tensor> {
    let c = match level {
        Level::Coarse => 6,
        Level::Fine => 9,
    };
    sigmoid(&raw.narrow(D::Minus1, c, 3)?)
}

/// Signed distance `tanh(raw[…, 0])` → `(…)`; positive inside.
pub fn sdf(raw: &Tensor) -> Result<Tensor> {
    raw.narrow(D::Minus1, 0, 1)?.squeeze(D::Minus1)?.tanh()
}

/// STF (mesh) colour `sigmoid(raw[…, 3..6])` → `(…, 3)`.
pub fn stf_rgb(raw: &Tensor) -> Result<Tensor> {
    sigmoid(&raw.narrow(D::Minus1, 3, 3)?)
}

/// One layer: a static weight (or `None` when it comes from the latent) and its static bias.
#[derive(Debug, Clone)]
struct MlpLayer {
    weight: Option<Tensor>,
    bias: Tensor,
}

/// `mlp`: the NeRSTF MLP with static layers loaded and projected layers supplied per call.
#[derive(Debug, Clone)]
pub(crate) struct NerstfMlp {
    /// `mlp.{k}` (the checkpoint key is `mlp.mlp.{k}`).
    mlp: Vec<MlpLayer>,
    n_projected: usize,
    insert_direction_at: Option<usize>,
}

impl NerstfMlp {
    /// Loads `mlp.{k}.bias` for every layer and `mlp.{k}.weight` for the static ones (the
    /// projected layers' weights in the file are placeholders overwritten from the latent, so they
    /// are deliberately not read).
    pub(crate) fn new(vb: VarBuilder, cfg: &RendererConfig) -> Result<Self> {
        let vb = vb.pp("mlp");
        let n_projected = cfg.param_names.len();
        let mlp = (0..=cfg.n_hidden_layers)
            .map(|k| {
                let (out, inp) = cfg.layer_shape(k);
                let l = vb.pp(k.to_string());
                let weight = if k < n_projected {
                    None
                } else {
                    // Kept whole: a slice copied here would go stale when the weight is a
                    // trained `Var` (toy training updates the variable, not the copy).
                    Some(nn::matrix(&l, (out, inp), "weight")?)
                };
                Ok(MlpLayer {
                    weight,
                    bias: nn::param(&l, out, "bias")?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            mlp,
            n_projected,
            insert_direction_at: cfg.insert_direction_at,
        })
    }

    /// Number of leading layers whose weights come from the latent.
    pub(crate) fn n_projected(&self) -> usize {
        self.n_projected
    }

    /// The layer whose input would take the (always zero) direction features.
    pub(crate) fn insert_direction_at(&self) -> Option<usize> {
        self.insert_direction_at
    }

    /// Every layer's static weight `(out, in)` (the direction columns dropped; `None` for the
    /// projected layers) and bias, as stored (they track gradients when they are trained).
    pub(crate) fn layers(&self) -> Result<Vec<(Option<Tensor>, Tensor)>> {
        self.mlp
            .iter()
            .enumerate()
            .map(|(k, l)| {
                let weight = match &l.weight {
                    Some(w) if self.insert_direction_at == Some(k) => {
                        let inp = w.dim(1)?;
                        Some(w.narrow(1, 0, inp - DIRENC_DIM)?)
                    }
                    other => other.clone(),
                };
                Ok((weight, l.bias.clone()))
            })
            .collect()
    }

    /// The dtype of the activations (and of the biases): f32 for a half-precision decoder.
    pub(crate) fn dtype(&self) -> DType {
        self.mlp[self.mlp.len() - 1].bias.dtype()
    }

    /// The dtype the static weights are stored and multiplied in (bf16/f16 under `--dtype`,
    /// else the same as [`Self::dtype`]).
    pub(crate) fn weight_dtype(&self) -> DType {
        self.mlp
            .iter()
            .find_map(|l| l.weight.as_ref().map(Tensor::dtype))
            .unwrap_or_else(|| self.dtype())
    }

    /// Raw outputs `(B, n, 12)` at `points (B, n, 3)` with `weights` = one `(B, out, in)` tensor
    /// per projected layer (from [`super::params_proj::ParamsProj::forward`]).
    pub(crate) fn forward(&self, weights: &[Tensor], points: &Tensor) -> Result<Tensor> {
        if weights.len() != self.n_projected {
            candle_core::bail!(
                "the MLP needs {} projected weights, got {}",
                self.n_projected,
                weights.len()
            );
        }
        let b = points.dim(0)?;
        let mut h = posenc(points)?;
        debug_assert_eq!(h.dim(D::Minus1)?, POSENC_DIM);
        let last = self.mlp.len() - 1;
        for (k, layer) in self.mlp.iter().enumerate() {
            h = match &layer.weight {
                Some(w) if self.insert_direction_at == Some(k) => {
                    let inp = w.dim(1)?;
                    let w = w.narrow(1, 0, inp - DIRENC_DIM)?.contiguous()?;
                    ops::linear(&h, &w, Some(&layer.bias))?
                }
                Some(w) => ops::linear(&h, w, Some(&layer.bias))?,
                None => {
                    let mut w = weights[k].clone();
                    if self.insert_direction_at == Some(k) {
                        let inp = w.dim(2)?;
                        w = w.narrow(2, 0, inp - DIRENC_DIM)?;
                    }
                    let bias = layer
                        .bias
                        .unsqueeze(0)?
                        .broadcast_as((b, layer.bias.dim(0)?))?;
                    ops::batched_linear(&h, &w, Some(&bias))?
                }
            };
            if k < last {
                h = crate::autodiff::ops::Activation::Silu.forward(&h)?;
            }
        }
        Ok(h)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autodiff::rng::Rng;
    use candle_core::Device;

    /// Largest difference in ulps between two f32 tensors of one shape.
    fn max_ulps(a: &Tensor, b: &Tensor) -> u32 {
        let v = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        v(a).iter()
            .zip(v(b))
            .map(|(x, y)| {
                let ulp = f32::from_bits(x.abs().max(y.abs()).to_bits() + 1) - x.abs().max(y.abs());
                ((x - y).abs() / ulp).ceil() as u32
            })
            .max()
            .unwrap_or(0)
    }

    #[test]
    fn posenc_fast_path_matches_tensor_ops_within_an_ulp() {
        let dev = Device::Cpu;
        let mut rng = Rng::new(7);
        let n = 2 * 2500;
        let mut v: Vec<f32> = (0..n * 3).map(|_| rng.range(-1.0, 1.0)).collect();
        // Edge values: the extremes of the box, signed zeros, tiny and just-below-one values.
        let edges = [
            1.0,
            -1.0,
            0.0,
            -0.0,
            1e-30,
            -1e-7,
            0.999_999_9,
            -0.999_999_9,
            0.5,
        ];
        v[..edges.len()].copy_from_slice(&edges);
        let x = Tensor::from_vec(v, (2, 2500, 3), &dev).unwrap();
        let fast = posenc(&x).unwrap();
        assert_eq!(fast.dims(), &[2, 2500, POSENC_DIM]);
        assert!(max_ulps(&fast, &posenc_ops(&x).unwrap()) <= 1);
        // A non-contiguous input (transposed leading dims) gives the same values.
        let xt = x.transpose(0, 1).unwrap();
        assert!(max_ulps(&posenc(&xt).unwrap(), &posenc_ops(&xt).unwrap()) <= 1);
        // Larger coordinates (well outside the [-1, 1] box) too.
        let big = (&x * 37.5).unwrap();
        assert!(max_ulps(&posenc(&big).unwrap(), &posenc_ops(&big).unwrap()) <= 1);
    }

    #[test]
    fn posenc_rejects_non_points() {
        let x = Tensor::zeros((4, 2), DType::F32, &Device::Cpu).unwrap();
        assert!(posenc(&x).is_err());
    }

    /// `cargo test --release --lib posenc_timing -- --ignored --nocapture`
    #[test]
    #[ignore]
    fn posenc_timing() {
        let dev = Device::Cpu;
        let mut rng = Rng::new(1);
        let x = rng.uniform_tensor(&[1, 131_072, 3], &dev).unwrap();
        let time = |f: &dyn Fn() -> Tensor| {
            f();
            let reps = 10;
            let t = std::time::Instant::now();
            for _ in 0..reps {
                std::hint::black_box(f());
            }
            t.elapsed().as_secs_f64() * 1e3 / reps as f64
        };
        let old = time(&|| posenc_ops(&x).unwrap());
        let new = time(&|| posenc(&x).unwrap());
        println!(
            "posenc (1, 131072, 3) f32: tensor ops {old:.1} ms, fast path {new:.1} ms ({} rayon threads)",
            rayon::current_num_threads()
        );
    }
}
