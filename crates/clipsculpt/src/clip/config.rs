//! CLIP configs, deserialised from the checkpoint's own `config.json` with transformers' field names
//! and defaults (`transformers/models/clip/configuration_clip.py`: `CLIPTextConfig`,
//! `CLIPVisionConfig`, `CLIPConfig`). Missing keys take transformers' defaults, which are those of
//! openai/clip-vit-base-patch32 (<https://huggingface.co/openai/clip-vit-base-patch32/blob/main/config.json>).

use serde::Deserialize;
use serde_json::Value;

pub(crate) use crate::autodiff::ops::Activation;

/// The text tower (`CLIPTextConfig`); also the whole `config.json` of a text-only checkpoint such as
/// openai/shap-e's `text_encoder/`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default)]
pub struct ClipTextConfig {
    /// Token vocabulary size.
    pub(crate) vocab_size: usize,
    /// Width of the residual stream.
    pub(crate) hidden_size: usize,
    /// Width of the MLP.
    pub(crate) intermediate_size: usize,
    /// Output size of `text_projection` in `CLIPTextModelWithProjection` (a full `CLIPConfig` uses
    /// its top-level `projection_dim` instead, as transformers does).
    pub(crate) projection_dim: usize,
    /// Encoder layers.
    pub(crate) num_hidden_layers: usize,
    /// Attention heads per layer.
    pub(crate) num_attention_heads: usize,
    /// Context length (77 for CLIP).
    pub(crate) max_position_embeddings: usize,
    /// MLP activation.
    pub(crate) hidden_act: Activation,
    /// LayerNorm epsilon.
    pub(crate) layer_norm_eps: f64,
    /// Padding id.
    pub(crate) pad_token_id: Option<u32>,
    /// Start-of-text id.
    pub(crate) bos_token_id: Option<u32>,
    /// End-of-text id; the legacy value 2 selects argmax-of-ids pooling (see [`crate::clip::text`]).
    pub(crate) eos_token_id: Option<u32>,
}

impl Default for ClipTextConfig {
    fn default() -> Self {
        Self {
            vocab_size: 49408,
            hidden_size: 512,
            intermediate_size: 2048,
            projection_dim: 512,
            num_hidden_layers: 12,
            num_attention_heads: 8,
            max_position_embeddings: 77,
            hidden_act: Activation::QuickGelu,
            layer_norm_eps: 1e-5,
            pad_token_id: Some(1),
            bos_token_id: Some(49406),
            eos_token_id: Some(49407),
        }
    }
}

/// The vision tower (`CLIPVisionConfig`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default)]
pub struct ClipVisionConfig {
    /// Width of the residual stream.
    pub(crate) hidden_size: usize,
    /// Width of the MLP.
    pub(crate) intermediate_size: usize,
    /// Output size of a standalone `CLIPVisionModelWithProjection` (unused by `CLIPModel`).
    pub projection_dim: usize,
    /// Encoder layers.
    pub(crate) num_hidden_layers: usize,
    /// Attention heads per layer.
    pub(crate) num_attention_heads: usize,
    /// Input channels (3).
    pub(crate) num_channels: usize,
    /// Square input side in pixels.
    pub image_size: usize,
    /// Square patch side in pixels.
    pub(crate) patch_size: usize,
    /// MLP activation.
    pub(crate) hidden_act: Activation,
    /// LayerNorm epsilon.
    pub(crate) layer_norm_eps: f64,
}

impl Default for ClipVisionConfig {
    fn default() -> Self {
        Self {
            hidden_size: 768,
            intermediate_size: 3072,
            projection_dim: 512,
            num_hidden_layers: 12,
            num_attention_heads: 12,
            num_channels: 3,
            image_size: 224,
            patch_size: 32,
            hidden_act: Activation::QuickGelu,
            layer_norm_eps: 1e-5,
        }
    }
}

impl ClipVisionConfig {
    /// Patches per side, `image_size / patch_size`.
    pub(crate) fn grid(&self) -> usize {
        self.image_size / self.patch_size
    }

    /// Tokens per image: one per patch plus the class token.
    pub(crate) fn num_positions(&self) -> usize {
        self.grid() * self.grid() + 1
    }
}

/// A full CLIP (`CLIPConfig`): both towers and the shared projection size.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(default)]
pub struct ClipConfig {
    /// The text tower.
    pub text_config: ClipTextConfig,
    /// The vision tower.
    pub vision_config: ClipVisionConfig,
    /// Size of the joint embedding space (both projections).
    pub projection_dim: usize,
    /// Initial value of `logit_scale` (the weights hold the trained one).
    pub(crate) logit_scale_init_value: f64,
}

impl Default for ClipConfig {
    fn default() -> Self {
        Self {
            text_config: ClipTextConfig::default(),
            vision_config: ClipVisionConfig::default(),
            projection_dim: 512,
            logit_scale_init_value: 2.6592,
        }
    }
}

/// The sizes the shared encoder stack needs (one view over either tower's config).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct EncoderConfig {
    /// Width of the residual stream.
    pub(crate) hidden_size: usize,
    /// Width of the MLP.
    pub(crate) intermediate_size: usize,
    /// Encoder layers.
    pub(crate) num_hidden_layers: usize,
    /// Attention heads per layer.
    pub(crate) num_attention_heads: usize,
    /// MLP activation.
    pub(crate) hidden_act: Activation,
    /// LayerNorm epsilon.
    pub(crate) layer_norm_eps: f64,
}

impl ClipTextConfig {
    /// The encoder's sizes.
    pub(crate) fn encoder(&self) -> EncoderConfig {
        EncoderConfig {
            hidden_size: self.hidden_size,
            intermediate_size: self.intermediate_size,
            num_hidden_layers: self.num_hidden_layers,
            num_attention_heads: self.num_attention_heads,
            hidden_act: self.hidden_act,
            layer_norm_eps: self.layer_norm_eps,
        }
    }
}

impl ClipVisionConfig {
    /// The encoder's sizes.
    pub(crate) fn encoder(&self) -> EncoderConfig {
        EncoderConfig {
            hidden_size: self.hidden_size,
            intermediate_size: self.intermediate_size,
            num_hidden_layers: self.num_hidden_layers,
            num_attention_heads: self.num_attention_heads,
            hidden_act: self.hidden_act,
            layer_norm_eps: self.layer_norm_eps,
        }
    }
}

/// What a `config.json` holds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ConfigFile {
    /// A `CLIPModel` (text + vision).
    Full(ClipConfig),
    /// A text-only checkpoint (`CLIPTextModel` / `CLIPTextModelWithProjection`).
    Text(ClipTextConfig),
}

impl ConfigFile {
    /// Parses a `config.json`: the full form when it has `text_config`/`vision_config` (or
    /// `model_type: "clip"`), else the text-only form. As transformers does, the legacy
    /// `text_config_dict`/`vision_config_dict` keys, when not null, override `text_config`/`vision_config`.
    pub(crate) fn from_json(s: &str) -> Result<Self, serde_json::Error> {
        let mut v: Value = serde_json::from_str(s)?;
        let model_type = v.get("model_type").and_then(Value::as_str).unwrap_or("");
        let full = model_type == "clip"
            || v.get("text_config").is_some()
            || v.get("vision_config").is_some();
        if !full {
            return serde_json::from_value(v).map(ConfigFile::Text);
        }
        if let Some(obj) = v.as_object_mut() {
            for tower in ["text_config", "vision_config"] {
                let legacy = obj.remove(&format!("{tower}_dict"));
                if let Some(Value::Object(over)) = legacy {
                    let base = obj
                        .entry(tower)
                        .or_insert_with(|| Value::Object(Default::default()));
                    if base.is_null() {
                        *base = Value::Object(Default::default());
                    }
                    if let Some(base) = base.as_object_mut() {
                        base.extend(over);
                    }
                }
                if obj.get(tower).is_some_and(Value::is_null) {
                    obj.remove(tower);
                }
            }
        }
        serde_json::from_value(v).map(ConfigFile::Full)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_vit_base_patch32() {
        let ConfigFile::Full(c) = ConfigFile::from_json(r#"{"model_type": "clip"}"#).unwrap()
        else {
            panic!("a clip model_type is the full form")
        };
        assert_eq!(c, ClipConfig::default());
        assert_eq!(c.vision_config.num_positions(), 50);
    }

    #[test]
    fn legacy_dicts_override_and_text_only_form() {
        let json = r#"{"text_config": {"hidden_size": 8}, "text_config_dict": {"hidden_size": 16,
            "hidden_act": "gelu"}, "vision_config": null, "vision_config_dict": null, "projection_dim": 4}"#;
        let ConfigFile::Full(c) = ConfigFile::from_json(json).unwrap() else {
            panic!("text_config makes the full form")
        };
        assert_eq!(c.text_config.hidden_size, 16);
        assert_eq!(c.text_config.hidden_act, Activation::GeluErf);
        assert_eq!(c.vision_config, ClipVisionConfig::default());
        let text = r#"{"model_type": "clip_text_model", "hidden_size": 768, "eos_token_id": 2}"#;
        let ConfigFile::Text(t) = ConfigFile::from_json(text).unwrap() else {
            panic!("no towers makes the text-only form")
        };
        assert_eq!((t.hidden_size, t.eos_token_id), (768, Some(2)));
    }

    #[test]
    fn unknown_activation_lists_the_accepted_ones() {
        let err = ConfigFile::from_json(r#"{"hidden_act": "softsign"}"#).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("quick_gelu") && msg.contains("gelu"), "{msg}");
    }
}
