//! Configs deserialised from diffusers' JSON files, with the JSON's field names:
//! `prior/config.json` ([`PriorConfig`], `PriorTransformer`), `shap_e_renderer/config.json`
//! ([`RendererConfig`], `ShapERenderer`) and `scheduler/scheduler_config.json`
//! ([`SchedulerConfig`], `HeunDiscreteScheduler`). Defaults are the diffusers class defaults, so a
//! file that omits a key means what it means to diffusers. Values we do not implement are
//! rejected by [`PriorConfig::validate`] & co. with the accepted choices.

use std::path::Path;

use serde::{de::DeserializeOwned, Deserialize, Serialize};

use super::error::LoadError;

mod renderer;
mod scheduler;

pub use renderer::RendererConfig;
pub(crate) use renderer::{DIRENC_DIM, POSENC_DIM};
pub use scheduler::SchedulerConfig;
pub(crate) use scheduler::{BetaSchedule, PredictionType};

pub(crate) use crate::autodiff::ops::Activation;

/// A normalisation named in a config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub(crate) enum NormType {
    /// `"layer"`: LayerNorm with affine weight and bias, eps 1e-5.
    #[serde(rename = "layer")]
    Layer,
}

/// `PriorTransformer` config (diffusers `models/transformers/prior_transformer.py`).
///
/// Shap-E text prior: <https://huggingface.co/openai/shap-e/blob/main/prior/config.json>.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct PriorConfig {
    /// The class that wrote the file; must be `PriorTransformer` when present.
    #[serde(rename = "_class_name", default)]
    pub(crate) class_name: Option<String>,
    /// Attention heads per block.
    #[serde(default = "d32")]
    pub(crate) num_attention_heads: usize,
    /// Channels per head; the transformer width is `heads × head_dim` ([`Self::inner_dim`]).
    #[serde(default = "d64")]
    pub(crate) attention_head_dim: usize,
    /// Number of transformer blocks.
    #[serde(default = "d20")]
    pub(crate) num_layers: usize,
    /// Channels per latent token (`d_latent` of the renderer).
    #[serde(default = "d768")]
    pub embedding_dim: usize,
    /// Latent tokens (rows of the latent).
    #[serde(default = "d77")]
    pub(crate) num_embeddings: usize,
    /// Extra positional rows beyond the latent tokens (0 for Shap-E).
    #[serde(default = "d4")]
    pub(crate) additional_embeddings: usize,
    /// Dropout (inference ignores it).
    #[serde(default)]
    pub(crate) dropout: f64,
    /// Activation of the timestep MLP.
    #[serde(default = "silu")]
    pub(crate) time_embed_act_fn: Activation,
    /// Norm on the token sequence before the blocks (`"layer"` for Shap-E).
    #[serde(default)]
    pub(crate) norm_in_type: Option<NormType>,
    /// Norm on the conditioning vector before `embedding_proj` (`"layer"` for the image prior).
    #[serde(default)]
    pub(crate) embedding_proj_norm_type: Option<NormType>,
    /// Projection of per-token encoder states; Shap-E: null (the only supported value).
    #[serde(default = "linear_str")]
    pub(crate) encoder_hid_proj_type: Option<String>,
    /// Learned extra token; Shap-E: null (the only supported value).
    #[serde(default = "prd_str")]
    pub(crate) added_emb_type: Option<String>,
    /// Hidden width of the timestep MLP; defaults to the inner dim.
    #[serde(default)]
    pub(crate) time_embed_dim: Option<usize>,
    /// Width of the conditioning vector; defaults to `embedding_dim`.
    #[serde(default)]
    pub(crate) embedding_proj_dim: Option<usize>,
    /// Output channels per token (x0 and variance halves); defaults to `embedding_dim`.
    #[serde(default)]
    pub(crate) clip_embed_dim: Option<usize>,
}

fn d4() -> usize {
    4
}
fn d20() -> usize {
    20
}
fn d32() -> usize {
    32
}
fn d64() -> usize {
    64
}
fn d77() -> usize {
    77
}
fn d768() -> usize {
    768
}
fn silu() -> Activation {
    Activation::Silu
}
fn linear_str() -> Option<String> {
    Some("linear".into())
}
fn prd_str() -> Option<String> {
    Some("prd".into())
}

impl PriorConfig {
    /// Transformer width `heads × head_dim`.
    pub(crate) fn inner_dim(&self) -> usize {
        self.num_attention_heads * self.attention_head_dim
    }
    /// Hidden width of the timestep MLP.
    pub(crate) fn time_embed_dim(&self) -> usize {
        self.time_embed_dim.unwrap_or(self.inner_dim())
    }
    /// Width of the conditioning vector (`proj_embedding`).
    pub(crate) fn embedding_proj_dim(&self) -> usize {
        self.embedding_proj_dim.unwrap_or(self.embedding_dim)
    }
    /// Output channels per token.
    pub fn clip_embed_dim(&self) -> usize {
        self.clip_embed_dim.unwrap_or(self.embedding_dim)
    }
    /// Rows of `positional_embedding`.
    pub(crate) fn positional_rows(&self) -> usize {
        self.num_embeddings + self.additional_embeddings
    }

    /// Rejects values this port does not implement, naming the field and the accepted values.
    pub(crate) fn validate(&self) -> Result<(), String> {
        if let Some(v) = &self.encoder_hid_proj_type {
            return Err(format!(
                "encoder_hid_proj_type \"{v}\" is not supported (Shap-E uses null)"
            ));
        }
        if let Some(v) = &self.added_emb_type {
            return Err(format!(
                "added_emb_type \"{v}\" is not supported (Shap-E uses null)"
            ));
        }
        let tokens = self.num_embeddings + 2;
        let rows = self.positional_rows();
        if rows != tokens && rows + 2 != tokens {
            return Err(format!(
                "num_embeddings {} with additional_embeddings {} gives {rows} positional rows for \
                 {tokens} tokens (expected additional_embeddings 0 or 2)",
                self.num_embeddings, self.additional_embeddings
            ));
        }
        if self.clip_embed_dim() < self.embedding_dim {
            return Err(format!(
                "clip_embed_dim {} is smaller than embedding_dim {}",
                self.clip_embed_dim(),
                self.embedding_dim
            ));
        }
        if self.inner_dim() == 0 || self.num_embeddings == 0 || self.embedding_dim == 0 {
            return Err("num_attention_heads, attention_head_dim, num_embeddings and embedding_dim must be positive".into());
        }
        Ok(())
    }
}

/// Reads a config JSON, checks `_class_name` (when present) and the supported values.
pub(crate) fn read_config<T: DeserializeOwned + ClassChecked>(path: &Path) -> Result<T, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_config(&text, path)
}

/// Parses config JSON text (`path` names it in errors).
pub(crate) fn parse_config<T: DeserializeOwned + ClassChecked>(
    text: &str,
    path: &Path,
) -> Result<T, LoadError> {
    let cfg: T = serde_json::from_str(text).map_err(|source| LoadError::Config {
        path: path.to_path_buf(),
        source,
    })?;
    if let Some(found) = cfg.class_name() {
        if found != T::CLASS {
            return Err(LoadError::WrongModel {
                path: path.to_path_buf(),
                expected: T::CLASS,
                found: found.to_string(),
            });
        }
    }
    cfg.check().map_err(|reason| LoadError::Unsupported {
        path: path.to_path_buf(),
        reason,
    })?;
    Ok(cfg)
}

/// A config whose `_class_name` names a diffusers class.
pub(crate) trait ClassChecked {
    /// The expected `_class_name`.
    const CLASS: &'static str;
    /// The `_class_name` in the file, if any.
    fn class_name(&self) -> Option<&str>;
    /// Supported-value check.
    fn check(&self) -> Result<(), String>;
}

macro_rules! class_checked {
    ($t:ty, $name:literal) => {
        impl ClassChecked for $t {
            const CLASS: &'static str = $name;
            fn class_name(&self) -> Option<&str> {
                self.class_name.as_deref()
            }
            fn check(&self) -> Result<(), String> {
                self.validate()
            }
        }
    };
}
class_checked!(PriorConfig, "PriorTransformer");
class_checked!(RendererConfig, "ShapERenderer");
class_checked!(SchedulerConfig, "HeunDiscreteScheduler");

#[cfg(test)]
mod tests {
    use super::*;

    const PRIOR: &str = r#"{"_class_name":"PriorTransformer","_diffusers_version":"0.18.0.dev0",
      "num_attention_heads":16,"attention_head_dim":64,"num_layers":24,"embedding_dim":1024,
      "num_embeddings":1024,"additional_embeddings":0,"dropout":0.0,"time_embed_act_fn":"gelu",
      "time_embed_dim":4096,"norm_in_type":"layer","embedding_proj_norm_type":null,
      "embedding_proj_dim":768,"encoder_hid_proj_type":null,"added_emb_type":null,"clip_embed_dim":2048}"#;

    #[test]
    fn reads_the_real_prior_config() {
        let c: PriorConfig = parse_config(PRIOR, Path::new("prior/config.json")).unwrap();
        assert_eq!(c.inner_dim(), 1024);
        assert_eq!(c.time_embed_act_fn, Activation::GeluErf);
        assert_eq!(c.norm_in_type, Some(NormType::Layer));
        assert_eq!(c.clip_embed_dim(), 2048);
    }

    #[test]
    fn wrong_class_names_the_file() {
        let text = PRIOR.replace("PriorTransformer", "CLIPTextModel");
        let err = parse_config::<PriorConfig>(&text, Path::new("x/config.json")).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("expected PriorTransformer, found CLIPTextModel"),
            "{msg}"
        );
        assert!(msg.contains("x/config.json"), "{msg}");
    }

    #[test]
    fn renderer_and_scheduler_defaults() {
        let r: RendererConfig = parse_config("{}", Path::new("r.json")).unwrap();
        assert_eq!(r.latent_rows(), 1024);
        assert_eq!(r.layer_shape(4), (256, 307));
        assert_eq!(r.layer_shape(6), (12, 256));
        let s = r#"{"_class_name":"HeunDiscreteScheduler","beta_schedule":"exp","num_train_timesteps":1024,
           "clip_sample":true,"clip_sample_range":1.0,"prediction_type":"sample","use_karras_sigmas":true,"trained_betas":null}"#;
        let s: SchedulerConfig = parse_config(s, Path::new("s.json")).unwrap();
        assert_eq!(s, SchedulerConfig::shap_e());
        let bad =
            parse_config::<SchedulerConfig>(r#"{"beta_schedule":"cosine"}"#, Path::new("s.json"));
        assert!(bad.unwrap_err().to_string().contains("exp"));
    }
}
