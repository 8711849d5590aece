//! The vision tower (transformers' `CLIPVisionEmbeddings`, `CLIPVisionTransformer` in
//! `models/clip/modeling_clip.py`): patch embedding, class token, positions, `pre_layrnorm`, the
//! encoder, `post_layernorm` on the class token, and `visual_projection`.
//!
//! The patch embedding is a convolution with stride = kernel, i.e. a linear map of each patch. It is
//! computed as a patchify (reshape/permute) plus our frozen linear, so backward returns only the
//! pixel gradient (candle's conv backward would also build a dead weight gradient).

use candle_core::{Module, Result, Tensor};
use candle_nn::VarBuilder;

use super::config::ClipVisionConfig;
use super::transformer::Encoder;
use crate::autodiff::checkpoint::Policy;
use crate::autodiff::nn::{self, layer_norm, linear_no_bias, LayerNorm, Linear};

/// `embeddings`: `class_embedding (hidden)`, `patch_embedding (hidden, channels, p, p)` and
/// `position_embedding (patches + 1, hidden)`.
#[derive(Debug, Clone)]
pub(crate) struct VisionEmbeddings {
    class_embedding: Tensor,
    patch_embedding: Linear,
    position_embedding: Tensor,
    channels: usize,
    image_size: usize,
    patch_size: usize,
}

impl VisionEmbeddings {
    /// Loads the embeddings under `vb` (`vision_model.embeddings`).
    pub(crate) fn new(vb: VarBuilder, cfg: &ClipVisionConfig) -> Result<Self> {
        let (d, c, p) = (cfg.hidden_size, cfg.num_channels, cfg.patch_size);
        if p == 0 || !cfg.image_size.is_multiple_of(p) {
            candle_core::bail!(
                "image_size {} is not a multiple of patch_size {p}",
                cfg.image_size
            );
        }
        // The patch conv is a matrix product over flattened patches: a matrix weight.
        let conv = nn::matrix(&vb.pp("patch_embedding"), (d, c, p, p), "weight")?;
        Ok(Self {
            class_embedding: nn::param(&vb, d, "class_embedding")?,
            patch_embedding: nn::Linear::new(conv.reshape((d, c * p * p))?, None),
            position_embedding: nn::param(
                &vb.pp("position_embedding"),
                (cfg.num_positions(), d),
                "weight",
            )?,
            channels: c,
            image_size: cfg.image_size,
            patch_size: p,
        })
    }

    /// `pixels (batch, channels, image_size, image_size)` (normalised) → `(batch, patches + 1, hidden)`.
    pub(crate) fn forward(&self, pixels: &Tensor) -> Result<Tensor> {
        let (b, c, h, w) = pixels.dims4()?;
        let s = self.image_size;
        if (c, h, w) != (self.channels, s, s) {
            candle_core::bail!(
                "the vision tower expects images of shape (batch, {}, {s}, {s}), got {:?}; run clip::preprocess first",
                self.channels,
                pixels.shape()
            );
        }
        let (p, g) = (self.patch_size, s / self.patch_size);
        // (b, c, g·p, g·p) → (b, g, g, c, p, p): one row of c·p·p values per patch, in the
        // (channel, row, column) order of the conv weight.
        let patches = pixels
            .reshape((b, c, g, p, g, p))?
            .permute([0, 2, 4, 1, 3, 5])?
            .reshape((b, g * g, c * p * p))?;
        let patches = self.patch_embedding.forward(&patches)?;
        let d = self.class_embedding.dim(0)?;
        let class = self.class_embedding.reshape((1, 1, d))?.repeat((b, 1, 1))?;
        Tensor::cat(&[class, patches], 1)?.broadcast_add(&self.position_embedding)
    }
}

/// Output of the vision tower.
#[derive(Debug, Clone)]
pub struct VisionOutput {
    /// `(batch, patches + 1, hidden)`, the encoder output (no final norm, as in transformers).
    #[cfg(test)]
    pub(crate) last_hidden_state: Tensor,
    /// `(batch, hidden)`: `post_layernorm` of the class token.
    pub(crate) pooled: Tensor,
}

/// `vision_model`: embeddings, `pre_layrnorm` (sic, the checkpoint's key), encoder, `post_layernorm`.
#[derive(Debug, Clone)]
pub(crate) struct ClipVisionTransformer {
    embeddings: VisionEmbeddings,
    pre_layrnorm: LayerNorm,
    encoder: Encoder,
    post_layernorm: LayerNorm,
}

impl ClipVisionTransformer {
    /// Loads the tower under `vb` (`vision_model`).
    pub(crate) fn new(vb: VarBuilder, cfg: &ClipVisionConfig) -> Result<Self> {
        let (d, eps) = (cfg.hidden_size, cfg.layer_norm_eps);
        Ok(Self {
            embeddings: VisionEmbeddings::new(vb.pp("embeddings"), cfg)?,
            pre_layrnorm: layer_norm(d, eps, vb.pp("pre_layrnorm"))?,
            encoder: Encoder::new(vb.pp("encoder"), &cfg.encoder())?,
            post_layernorm: layer_norm(d, eps, vb.pp("post_layernorm"))?,
        })
    }

    /// `pixels (batch, channels, image_size, image_size)` → outputs; the encoder runs under `policy`.
    /// Differentiable with respect to `pixels`.
    pub(crate) fn forward(&self, pixels: &Tensor, policy: &Policy) -> Result<VisionOutput> {
        let x = self
            .pre_layrnorm
            .forward(&self.embeddings.forward(pixels)?)?;
        let last_hidden_state = self.encoder.forward(&x, None, policy)?;
        let class = last_hidden_state.narrow(1, 0, 1)?.squeeze(1)?;
        let pooled = self.post_layernorm.forward(&class)?;
        Ok(VisionOutput {
            #[cfg(test)]
            last_hidden_state,
            pooled,
        })
    }

    /// Only [`VisionOutput::pooled`] `(batch, hidden)`, computing just the class token's row
    /// in the last layer (equal to `forward(…).pooled`, with ~1/tokens of that layer's queries,
    /// output projection and MLP). Differentiable with respect to `pixels`.
    pub(crate) fn pooled(&self, pixels: &Tensor, policy: &Policy) -> Result<Tensor> {
        let x = self
            .pre_layrnorm
            .forward(&self.embeddings.forward(pixels)?)?;
        let class = self
            .encoder
            .forward_first(&x, 1, None, policy)?
            .squeeze(1)?;
        self.post_layernorm.forward(&class)
    }
}

/// The `CLIPVisionModelWithProjection` keys within a `CLIPModel`: `vision_model.*` and
/// `visual_projection.weight`.
#[derive(Debug, Clone)]
pub struct ClipVisionModelWithProjection {
    vision_model: ClipVisionTransformer,
    visual_projection: Linear,
}

impl ClipVisionModelWithProjection {
    /// Loads from the checkpoint root `vb`.
    pub fn new(vb: VarBuilder, cfg: &ClipVisionConfig, projection_dim: usize) -> Result<Self> {
        Ok(Self {
            vision_model: ClipVisionTransformer::new(vb.pp("vision_model"), cfg)?,
            visual_projection: linear_no_bias(
                cfg.hidden_size,
                projection_dim,
                vb.pp("visual_projection"),
            )?,
        })
    }

    /// `pixels` → tower outputs and `image_embeds (batch, projection_dim)` (not normalised).
    pub fn forward(&self, pixels: &Tensor, policy: &Policy) -> Result<(VisionOutput, Tensor)> {
        let out = self.vision_model.forward(pixels, policy)?;
        let embeds = self.visual_projection.forward(&out.pooled)?;
        Ok((out, embeds))
    }

    /// `pixels` → `image_embeds (batch, projection_dim)` alone (not normalised), through
    /// [`ClipVisionTransformer::pooled`].
    pub fn image_embeds(&self, pixels: &Tensor, policy: &Policy) -> Result<Tensor> {
        self.visual_projection
            .forward(&self.vision_model.pooled(pixels, policy)?)
    }
}
