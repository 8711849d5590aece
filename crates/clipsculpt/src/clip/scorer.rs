//! The CLIP scorer used for guidance: texts are embedded once (no graph), images differentiably
//! with the vision encoder checkpointed under the caller's [`Policy`], and scores are cosines
//! (`docs/clip-guidance.md`: both embeddings L2-normalised).

use std::path::Path;

use candle_core::{DType, Device, Result, Tensor, D};

use super::error::{LoadError, TokenizeError};
use super::load::load_clip;
use super::model::ClipModel;
use super::preprocess::preprocess;
use super::tokenizer::ClipTokenizer;
use crate::autodiff::checkpoint::Policy;

/// A CLIP model with its tokenizer.
#[derive(Debug, Clone)]
pub struct ClipScorer {
    model: ClipModel,
    tokenizer: ClipTokenizer,
}

impl ClipScorer {
    /// Pairs a model with its tokenizer.
    pub(crate) fn new(model: ClipModel, tokenizer: ClipTokenizer) -> Self {
        Self { model, tokenizer }
    }

    /// Loads model and tokenizer from a CLIP directory, the model's matrix weights in `dtype`
    /// (see [`load_clip`]).
    pub fn load(dir: &Path, dtype: DType, device: &Device) -> std::result::Result<Self, LoadError> {
        let model = load_clip(dir, dtype, device)?;
        let context = model.config().text_config.max_position_embeddings;
        Ok(Self::new(model, ClipTokenizer::from_dir(dir, context)?))
    }

    /// Input side of the vision tower in pixels.
    pub fn image_size(&self) -> usize {
        self.model.config().vision_config.image_size
    }

    /// `prompts` → unit-norm `(n, projection_dim)` text embeddings (no graph). Prompts longer than
    /// the context are cut with a warning.
    pub fn embed_texts(&self, prompts: &[&str]) -> std::result::Result<Tensor, TokenizeError> {
        let device = self.model.device();
        let (ids, _) = self.tokenizer.encode_batch(prompts, device)?;
        let embeds = self.model.text_features(&ids)?;
        Ok(normalize(&embeds)?.detach())
    }

    /// `images (n, 3, height, width)` in [0, 1] → unit-norm `(n, projection_dim)` image embeddings,
    /// differentiable with respect to `images`; the vision encoder runs under `policy`.
    pub fn embed_images(&self, images: &Tensor, policy: &Policy) -> Result<Tensor> {
        let pixels = preprocess(images, self.image_size())?;
        normalize(&self.model.image_features(&pixels, policy)?)
    }

    /// Cosine similarities `(n_images, n_texts)` of two sets of embeddings (normalised here).
    #[cfg(test)]
    pub(crate) fn cosine(image_embeds: &Tensor, text_embeds: &Tensor) -> Result<Tensor> {
        normalize(image_embeds)?.matmul(&normalize(text_embeds)?.t()?)
    }

    /// `exp(logit_scale)`: multiply cosines by it to get CLIP's logits.
    pub(crate) fn logit_scale(&self) -> Result<f32> {
        self.model.logit_scale()
    }
}

/// `x / ‖x‖` along the last dimension (differentiable).
pub fn normalize(x: &Tensor) -> Result<Tensor> {
    x.broadcast_div(&x.sqr()?.sum_keepdim(D::Minus1)?.sqrt()?)
}
