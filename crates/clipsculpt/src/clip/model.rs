//! The full CLIP (transformers' `CLIPModel`): both towers with their projections and the learned
//! `logit_scale`. Keys: `text_model.*`, `text_projection.weight`, `vision_model.*`,
//! `visual_projection.weight`, `logit_scale`.

use candle_core::{Result, Tensor};
use candle_nn::VarBuilder;

use super::config::ClipConfig;
use super::text::ClipTextModelWithProjection;
use super::vision::ClipVisionModelWithProjection;
use crate::autodiff::checkpoint::Policy;

/// Both CLIP towers.
#[derive(Debug, Clone)]
pub struct ClipModel {
    text: ClipTextModelWithProjection,
    vision: ClipVisionModelWithProjection,
    logit_scale: Tensor,
    config: ClipConfig,
}

impl ClipModel {
    /// Loads from the checkpoint root `vb`.
    pub fn new(vb: VarBuilder, cfg: &ClipConfig) -> Result<Self> {
        Ok(Self {
            text: ClipTextModelWithProjection::new(
                vb.clone(),
                &cfg.text_config,
                cfg.projection_dim,
            )?,
            vision: ClipVisionModelWithProjection::new(
                vb.clone(),
                &cfg.vision_config,
                cfg.projection_dim,
            )?,
            logit_scale: crate::autodiff::nn::param(&vb, (), "logit_scale")?,
            config: cfg.clone(),
        })
    }

    /// The config the model was built from.
    pub(crate) fn config(&self) -> &ClipConfig {
        &self.config
    }

    /// The text tower with its projection.
    #[cfg(test)]
    pub(crate) fn text(&self) -> &ClipTextModelWithProjection {
        &self.text
    }

    /// The vision tower with its projection.
    #[cfg(test)]
    pub(crate) fn vision(&self) -> &ClipVisionModelWithProjection {
        &self.vision
    }

    /// `ids (batch, 77)` → `text_embeds (batch, projection_dim)`, not normalised.
    pub fn text_features(&self, ids: &Tensor) -> Result<Tensor> {
        Ok(self.text.forward(ids)?.1)
    }

    /// Normalised `pixels (batch, 3, image_size, image_size)` → `image_embeds (batch,
    /// projection_dim)`, not normalised; differentiable, encoder checkpointed under `policy`.
    pub fn image_features(&self, pixels: &Tensor, policy: &Policy) -> Result<Tensor> {
        self.vision.image_embeds(pixels, policy)
    }

    /// The device the weights live on.
    pub fn device(&self) -> &candle_core::Device {
        self.logit_scale.device()
    }

    /// `exp(logit_scale)`, the temperature that turns cosines into logits (100 for OpenAI's CLIP).
    pub(crate) fn logit_scale(&self) -> Result<f32> {
        self.logit_scale
            .exp()?
            .to_dtype(candle_core::DType::F32)?
            .to_scalar()
    }
}
