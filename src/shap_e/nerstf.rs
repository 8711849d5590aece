//! The NeRSTF MLP (diffusers `MLPNeRSTFModel` in `pipelines/shap_e/renderer.py`; original
//! `shap_e/models/nerstf/mlp.py`; spec §5.2): NeRF position encoding → `n_hidden_layers` SiLU
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
use crate::autodiff::ops;

/// Octaves of the position encoding.
const POS_OCTAVES: usize = 15;

/// NeRF position encoding of `x (…, 3)` → `(…, 93)`: `[x, sin(xb), sin(xb + π/2)]` with
/// `xb[k·3 + j] = 2^k·x_j` (scale-major), computed as diffusers does.
pub fn posenc(x: &Tensor) -> Result<Tensor> {
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
pub fn sigmoid(x: &Tensor) -> Result<Tensor> {
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
pub struct NerstfMlp {
    /// `mlp.{k}` (the checkpoint key is `mlp.mlp.{k}`).
    mlp: Vec<MlpLayer>,
    n_projected: usize,
    insert_direction_at: Option<usize>,
}

impl NerstfMlp {
    /// Loads `mlp.{k}.bias` for every layer and `mlp.{k}.weight` for the static ones (the
    /// projected layers' weights in the file are placeholders overwritten from the latent, so they
    /// are deliberately not read).
    pub fn new(vb: VarBuilder, cfg: &RendererConfig) -> Result<Self> {
        let vb = vb.pp("mlp");
        let n_projected = cfg.param_names.len();
        let mlp = (0..=cfg.n_hidden_layers)
            .map(|k| {
                let (out, inp) = cfg.layer_shape(k);
                let l = vb.pp(k.to_string());
                let weight = if k < n_projected {
                    None
                } else {
                    let w = l.get((out, inp), "weight")?;
                    Some(if cfg.insert_direction_at == Some(k) {
                        w.narrow(1, 0, inp - DIRENC_DIM)?.contiguous()?
                    } else {
                        w
                    })
                };
                Ok(MlpLayer {
                    weight,
                    bias: l.get(out, "bias")?,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            mlp,
            n_projected,
            insert_direction_at: cfg.insert_direction_at,
        })
    }

    /// The dtype of the static weights.
    pub fn dtype(&self) -> DType {
        self.mlp[self.mlp.len() - 1].bias.dtype()
    }

    /// Raw outputs `(B, n, 12)` at `points (B, n, 3)` with `weights` = one `(B, out, in)` tensor
    /// per projected layer (from [`super::params_proj::ParamsProj::forward`]).
    pub fn forward(&self, weights: &[Tensor], points: &Tensor) -> Result<Tensor> {
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
