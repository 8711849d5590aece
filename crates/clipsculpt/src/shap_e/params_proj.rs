//! Params projection (diffusers `ShapEParamsProjModel`/`ChannelsProj` in
//! `pipelines/shap_e/renderer.py`; `docs/shap-e.md`, "Decoder"): latent rows → the first MLP weight matrices.
//!
//! For projection j with `V` vectors (= output rows of the MLP weight) and `C` channels (= its
//! input width), latent rows `z_j (B, V, D)` give `h[b,v,c] = Σ_d z_j[b,v,d]·W[v,c,d]`, then a
//! LayerNorm over `c`, **then** the projection bias. Differentiable in the latent; the frozen
//! projection weights get no gradient (one batched matmul per projection, batched over `v`).

use candle_core::{Module, Result, Tensor};
use candle_nn::VarBuilder;

use super::config::RendererConfig;
use crate::autodiff::nn::{layer_norm, param, LayerNorm};
use crate::autodiff::ops;

/// `projections.nerstf__mlp__{j}__weight`: one latent-to-weight projection.
#[derive(Debug, Clone)]
pub(crate) struct ChannelsProj {
    /// `proj.weight` viewed `(V, C, D)`.
    proj_weight: Tensor,
    /// `proj.bias` viewed `(V, C)`.
    proj_bias: Tensor,
    norm: LayerNorm,
    vectors: usize,
}

impl ChannelsProj {
    fn new(vb: VarBuilder, vectors: usize, channels: usize, d_latent: usize) -> Result<Self> {
        let p = vb.pp("proj");
        Ok(Self {
            // Kept in full precision under `--dtype bf16|f16`: this is the latent's first
            // product, and the LayerNorm over its output amplifies half-precision rounding (on the
            // tests' model the latent gradient's cosine to f32 fell to 0.93 in bf16, f16 gave
            // NaNs); it is one small matmul per render.
            proj_weight: param(&p, (vectors * channels, d_latent), "weight")?
                .reshape((vectors, channels, d_latent))?,
            proj_bias: param(&p, vectors * channels, "bias")?.reshape((vectors, channels))?,
            norm: layer_norm(channels, 1e-5, vb.pp("norm"))?,
            vectors,
        })
    }

    /// `z (B, V, D)` → `(B, V, C)`.
    pub(crate) fn forward(&self, z: &Tensor) -> Result<Tensor> {
        let zt = z.transpose(0, 1)?.contiguous()?; // (V, B, D)
        let h = ops::batched_linear(&zt, &self.proj_weight, None)?; // (V, B, C)
        let h = h.transpose(0, 1)?.contiguous()?; // (B, V, C)
        self.norm.forward(&h)?.broadcast_add(&self.proj_bias)
    }
}

/// `params_proj`: all projections, consuming consecutive latent rows in config order.
#[derive(Debug, Clone)]
pub(crate) struct ParamsProj {
    projections: Vec<ChannelsProj>,
    d_latent: usize,
}

impl ParamsProj {
    /// Loads `projections.nerstf__mlp__{j}__weight.{proj,norm}.{weight,bias}` under `vb`.
    pub(crate) fn new(vb: VarBuilder, cfg: &RendererConfig) -> Result<Self> {
        let vb = vb.pp("projections");
        let projections = cfg
            .param_names
            .iter()
            .zip(&cfg.param_shapes)
            .map(|(name, &(v, c))| {
                ChannelsProj::new(vb.pp(name.replace('.', "__")), v, c, cfg.d_latent)
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            projections,
            d_latent: cfg.d_latent,
        })
    }

    /// `latent (B, rows, d_latent)` → one `(B, out, in)` MLP weight per projection.
    pub(crate) fn forward(&self, latent: &Tensor) -> Result<Vec<Tensor>> {
        let (_, rows, d) = latent.dims3()?;
        let need: usize = self.projections.iter().map(|p| p.vectors).sum();
        if rows != need || d != self.d_latent {
            candle_core::bail!(
                "latent {:?} does not match the decoder ({need} rows × {})",
                latent.shape(),
                self.d_latent
            );
        }
        let mut start = 0;
        self.projections
            .iter()
            .map(|p| {
                let z = latent.narrow(1, start, p.vectors)?;
                start += p.vectors;
                p.forward(&z)
            })
            .collect()
    }
}
