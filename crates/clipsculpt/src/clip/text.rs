//! The text tower (transformers' `CLIPTextEmbeddings`, `CLIPTextTransformer` and
//! `CLIPTextModelWithProjection` in `models/clip/modeling_clip.py`): token + position embeddings,
//! the causal encoder, `final_layer_norm`, pooling at the end-of-text token and `text_projection`.

use candle_core::{DType, Module, Result, Tensor};
use candle_nn::VarBuilder;

use super::config::ClipTextConfig;
use super::transformer::{causal_mask, Encoder};
use crate::autodiff::checkpoint::Policy;
use crate::autodiff::nn::{layer_norm, linear_no_bias, param, LayerNorm, Linear};

/// The legacy `eos_token_id` of checkpoints saved before transformers PR #24773; with it the
/// pooled token is the one with the highest id.
const LEGACY_EOS: u32 = 2;

/// `embeddings`: `token_embedding (vocab, hidden)` and `position_embedding (positions, hidden)`.
#[derive(Debug, Clone)]
pub(crate) struct TextEmbeddings {
    token_embedding: Tensor,
    position_embedding: Tensor,
}

impl TextEmbeddings {
    /// Loads both tables under `vb` (`text_model.embeddings`).
    pub(crate) fn new(vb: VarBuilder, cfg: &ClipTextConfig) -> Result<Self> {
        let d = cfg.hidden_size;
        Ok(Self {
            token_embedding: param(&vb.pp("token_embedding"), (cfg.vocab_size, d), "weight")?,
            position_embedding: param(
                &vb.pp("position_embedding"),
                (cfg.max_position_embeddings, d),
                "weight",
            )?,
        })
    }

    /// `ids (batch, tokens)` u32 → `(batch, tokens, hidden)`.
    pub(crate) fn forward(&self, ids: &Tensor) -> Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let (vocab, positions) = (
            self.token_embedding.dim(0)?,
            self.position_embedding.dim(0)?,
        );
        if t > positions {
            candle_core::bail!("{t} tokens exceed the {positions} text positions");
        }
        let flat = ids.flatten_all()?;
        let max = flat.max(0)?.to_scalar::<u32>()?;
        if max as usize >= vocab {
            candle_core::bail!("token id {max} is outside the vocabulary of {vocab}");
        }
        let tokens = self
            .token_embedding
            .index_select(&flat, 0)?
            .reshape((b, t, ()))?;
        tokens.broadcast_add(&self.position_embedding.narrow(0, 0, t)?)
    }
}

/// Output of the text tower.
#[derive(Debug, Clone)]
pub struct TextOutput {
    /// `(batch, tokens, hidden)` after `final_layer_norm`.
    #[cfg(test)]
    pub(crate) last_hidden_state: Tensor,
    /// `(batch, hidden)`: the end-of-text token's state.
    pub(crate) pooled: Tensor,
}

/// `text_model`: embeddings, causal encoder, `final_layer_norm`, end-of-text pooling.
#[derive(Debug, Clone)]
pub(crate) struct ClipTextTransformer {
    embeddings: TextEmbeddings,
    encoder: Encoder,
    final_layer_norm: LayerNorm,
    eos_token_id: Option<u32>,
}

impl ClipTextTransformer {
    /// Loads the tower under `vb` (`text_model`).
    pub(crate) fn new(vb: VarBuilder, cfg: &ClipTextConfig) -> Result<Self> {
        Ok(Self {
            embeddings: TextEmbeddings::new(vb.pp("embeddings"), cfg)?,
            encoder: Encoder::new(vb.pp("encoder"), &cfg.encoder())?,
            final_layer_norm: layer_norm(
                cfg.hidden_size,
                cfg.layer_norm_eps,
                vb.pp("final_layer_norm"),
            )?,
            eos_token_id: cfg.eos_token_id,
        })
    }

    /// `ids (batch, tokens)` (any integer dtype) → hidden states and the pooled state.
    ///
    /// Pooling follows transformers: with the legacy `eos_token_id` 2 (or none) the position of the
    /// highest id, otherwise the first position holding `eos_token_id` (position 0 if absent).
    pub(crate) fn forward(&self, ids: &Tensor) -> Result<TextOutput> {
        let ids = ids.to_dtype(DType::U32)?;
        let (b, t) = ids.dims2()?;
        let x = self.embeddings.forward(&ids)?;
        let mask = causal_mask(t, x.dtype(), x.device())?;
        let h = self.encoder.forward(&x, Some(&mask), &Policy::None)?;
        let last_hidden_state = self.final_layer_norm.forward(&h)?;
        let rows = ids.to_vec2::<u32>()?;
        let picks: Vec<u32> = rows
            .iter()
            .enumerate()
            .map(|(i, row)| (i * t + eos_position(row, self.eos_token_id)) as u32)
            .collect();
        let picks = Tensor::from_vec(picks, b, ids.device())?;
        let pooled = last_hidden_state
            .reshape((b * t, ()))?
            .index_select(&picks, 0)?;
        Ok(TextOutput {
            #[cfg(test)]
            last_hidden_state,
            pooled,
        })
    }
}

/// The pooled position of one row of ids (see [`ClipTextTransformer::forward`]).
fn eos_position(row: &[u32], eos: Option<u32>) -> usize {
    match eos {
        Some(eos) if eos != LEGACY_EOS => row.iter().position(|&id| id == eos).unwrap_or(0),
        // torch.argmax returns the first maximal index.
        _ => {
            row.iter()
                .enumerate()
                .fold(
                    (0, 0),
                    |(bi, bv), (i, &v)| if v > bv { (i, v) } else { (bi, bv) },
                )
                .0
        }
    }
}

/// The `CLIPTextModelWithProjection` layout: `text_model.*` and `text_projection.weight`. A full
/// `CLIPModel` holds the same keys.
#[derive(Debug, Clone)]
pub struct ClipTextModelWithProjection {
    text_model: ClipTextTransformer,
    text_projection: Linear,
}

impl ClipTextModelWithProjection {
    /// Loads from the checkpoint root `vb`; `projection_dim` is the top-level one for a full CLIP
    /// and the text config's for a text-only checkpoint.
    pub fn new(vb: VarBuilder, cfg: &ClipTextConfig, projection_dim: usize) -> Result<Self> {
        Ok(Self {
            text_model: ClipTextTransformer::new(vb.pp("text_model"), cfg)?,
            text_projection: linear_no_bias(
                cfg.hidden_size,
                projection_dim,
                vb.pp("text_projection"),
            )?,
        })
    }

    /// `ids (batch, tokens)` → tower outputs and `text_embeds (batch, projection_dim)` (not normalised).
    pub fn forward(&self, ids: &Tensor) -> Result<(TextOutput, Tensor)> {
        let out = self.text_model.forward(ids)?;
        let embeds = self.text_projection.forward(&out.pooled)?;
        Ok((out, embeds))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// New-style id: first occurrence (padding may repeat it); legacy: highest id.
    #[test]
    fn eos_pooling_positions() {
        let row = [49406, 320, 1125, 49407, 49407, 49407];
        assert_eq!(eos_position(&row, Some(49407)), 3);
        assert_eq!(eos_position(&row, Some(LEGACY_EOS)), 3);
        assert_eq!(eos_position(&[5, 9, 7, 0], Some(LEGACY_EOS)), 1);
        assert_eq!(
            eos_position(&[5, 9, 7, 0], Some(11)),
            0,
            "absent → 0 as argmax"
        );
    }
}
