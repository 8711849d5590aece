//! Configs deserialised from diffusers' JSON files, with the JSON's field names:
//! `prior/config.json` ([`PriorConfig`], `PriorTransformer`), `shap_e_renderer/config.json`
//! ([`RendererConfig`], `ShapERenderer`) and `scheduler/scheduler_config.json`
//! ([`SchedulerConfig`], `HeunDiscreteScheduler`). Defaults are the diffusers class defaults, so a
//! file that omits a key means what it means to diffusers. Values we do not implement are
//! rejected by [`PriorConfig::validate`] & co. with the accepted choices.

use std::path::Path;

use serde::{de::DeserializeOwned, Deserialize, Serialize};

use super::error::LoadError;

/// An activation named in a config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum Activation {
    /// `"gelu"`: exact GELU, `x·Φ(x)` with the erf (PyTorch `nn.GELU()`), not the tanh form.
    #[serde(rename = "gelu")]
    Gelu,
    /// `"silu"`/`"swish"`: `x·σ(x)`.
    #[serde(rename = "silu", alias = "swish")]
    Silu,
}

/// A normalisation named in a config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum NormType {
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
    pub class_name: Option<String>,
    /// Attention heads per block.
    #[serde(default = "d32")]
    pub num_attention_heads: usize,
    /// Channels per head; the transformer width is `heads × head_dim` ([`Self::inner_dim`]).
    #[serde(default = "d64")]
    pub attention_head_dim: usize,
    /// Number of transformer blocks.
    #[serde(default = "d20")]
    pub num_layers: usize,
    /// Channels per latent token (`d_latent` of the renderer).
    #[serde(default = "d768")]
    pub embedding_dim: usize,
    /// Latent tokens (rows of the latent).
    #[serde(default = "d77")]
    pub num_embeddings: usize,
    /// Extra positional rows beyond the latent tokens (0 for Shap-E).
    #[serde(default = "d4")]
    pub additional_embeddings: usize,
    /// Dropout (inference ignores it).
    #[serde(default)]
    pub dropout: f64,
    /// Activation of the timestep MLP.
    #[serde(default = "silu")]
    pub time_embed_act_fn: Activation,
    /// Norm on the token sequence before the blocks (`"layer"` for Shap-E).
    #[serde(default)]
    pub norm_in_type: Option<NormType>,
    /// Norm on the conditioning vector before `embedding_proj` (`"layer"` for the image prior).
    #[serde(default)]
    pub embedding_proj_norm_type: Option<NormType>,
    /// Projection of per-token encoder states; Shap-E: null (the only supported value).
    #[serde(default = "linear_str")]
    pub encoder_hid_proj_type: Option<String>,
    /// Learned extra token; Shap-E: null (the only supported value).
    #[serde(default = "prd_str")]
    pub added_emb_type: Option<String>,
    /// Hidden width of the timestep MLP; defaults to the inner dim.
    #[serde(default)]
    pub time_embed_dim: Option<usize>,
    /// Width of the conditioning vector; defaults to `embedding_dim`.
    #[serde(default)]
    pub embedding_proj_dim: Option<usize>,
    /// Output channels per token (x0 and variance halves); defaults to `embedding_dim`.
    #[serde(default)]
    pub clip_embed_dim: Option<usize>,
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
    pub fn inner_dim(&self) -> usize {
        self.num_attention_heads * self.attention_head_dim
    }
    /// Hidden width of the timestep MLP.
    pub fn time_embed_dim(&self) -> usize {
        self.time_embed_dim.unwrap_or(self.inner_dim())
    }
    /// Width of the conditioning vector (`proj_embedding`).
    pub fn embedding_proj_dim(&self) -> usize {
        self.embedding_proj_dim.unwrap_or(self.embedding_dim)
    }
    /// Output channels per token.
    pub fn clip_embed_dim(&self) -> usize {
        self.clip_embed_dim.unwrap_or(self.embedding_dim)
    }
    /// Rows of `positional_embedding`.
    pub fn positional_rows(&self) -> usize {
        self.num_embeddings + self.additional_embeddings
    }

    /// Rejects values this port does not implement, naming the field and the accepted values.
    pub fn validate(&self) -> Result<(), String> {
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

/// `ShapERenderer` config (diffusers `pipelines/shap_e/renderer.py`).
///
/// <https://huggingface.co/openai/shap-e/blob/main/shap_e_renderer/config.json>.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct RendererConfig {
    /// The class that wrote the file; must be `ShapERenderer` when present.
    #[serde(rename = "_class_name", default)]
    pub class_name: Option<String>,
    /// MLP weights computed from the latent, `nerstf.mlp.{k}.weight`, in latent-row order.
    #[serde(default = "param_names")]
    pub param_names: Vec<String>,
    /// `(out, in)` of each projected weight; `out` latent rows feed each.
    #[serde(default = "param_shapes")]
    pub param_shapes: Vec<(usize, usize)>,
    /// Channels per latent row.
    #[serde(default = "d1024")]
    pub d_latent: usize,
    /// MLP hidden width.
    #[serde(default = "d256")]
    pub d_hidden: usize,
    /// MLP output channels (12: sdf, 2 densities, 3 RGB triples).
    #[serde(default = "d12")]
    pub n_output: usize,
    /// Hidden layers (the MLP has `n_hidden_layers + 1` linears).
    #[serde(default = "d6")]
    pub n_hidden_layers: usize,
    /// Hidden activation (`"swish"` only).
    #[serde(default = "silu")]
    pub act_fn: Activation,
    /// Layer whose input gets the (all-zero) direction features.
    #[serde(default = "d4opt")]
    pub insert_direction_at: Option<usize>,
    /// Background colour in 0..255 (divided by 255 for rendering).
    #[serde(default = "white")]
    pub background: [f32; 3],
}

fn d6() -> usize {
    6
}
fn d12() -> usize {
    12
}
fn d256() -> usize {
    256
}
fn d1024() -> usize {
    1024
}
fn d4opt() -> Option<usize> {
    Some(4)
}
fn white() -> [f32; 3] {
    [255.0; 3]
}
fn param_names() -> Vec<String> {
    (0..4).map(|k| format!("nerstf.mlp.{k}.weight")).collect()
}
fn param_shapes() -> Vec<(usize, usize)> {
    vec![(256, 93), (256, 256), (256, 256), (256, 256)]
}

/// Width of the NeRF position encoding of a 3-vector with 15 octaves: `3 + 2·3·15`.
pub const POSENC_DIM: usize = 93;
/// Width of the (always zero) direction encoding with 8 octaves: `3 + 2·3·8`.
pub const DIRENC_DIM: usize = 51;

impl RendererConfig {
    /// Latent rows consumed by the params projection (`Σ out`).
    pub fn latent_rows(&self) -> usize {
        self.param_shapes.iter().map(|s| s.0).sum()
    }

    /// `(out, in)` of MLP layer `k` as stored in the checkpoint (direction columns included).
    pub fn layer_shape(&self, k: usize) -> (usize, usize) {
        let inp = if k == 0 { POSENC_DIM } else { self.d_hidden };
        let out = if k == self.n_hidden_layers {
            self.n_output
        } else {
            self.d_hidden
        };
        let extra = if self.insert_direction_at == Some(k) {
            DIRENC_DIM
        } else {
            0
        };
        (out, inp + extra)
    }

    /// Background colour in `[0, 1]`.
    pub fn background_unit(&self) -> [f32; 3] {
        self.background.map(|c| c / 255.0)
    }

    /// Rejects values this port does not implement.
    pub fn validate(&self) -> Result<(), String> {
        if self.param_names.len() != self.param_shapes.len() {
            return Err(format!(
                "{} param_names but {} param_shapes",
                self.param_names.len(),
                self.param_shapes.len()
            ));
        }
        for (k, (name, shape)) in self.param_names.iter().zip(&self.param_shapes).enumerate() {
            if *name != format!("nerstf.mlp.{k}.weight") {
                return Err(format!(
                    "param_names[{k}] is \"{name}\"; expected \"nerstf.mlp.{k}.weight\" (projected \
                     weights must be the first MLP layers, in order)"
                ));
            }
            if *shape != self.layer_shape(k) {
                return Err(format!(
                    "param_shapes[{k}] is {shape:?}; the MLP layer {k} weight is {:?}",
                    self.layer_shape(k)
                ));
            }
        }
        if self.n_output != 12 {
            return Err(format!(
                "n_output {} is not supported (expected 12: sdf, densities, rgb)",
                self.n_output
            ));
        }
        if self.param_names.len() > self.n_hidden_layers {
            return Err("more projected weights than hidden layers".into());
        }
        if matches!(self.insert_direction_at, Some(k) if k > self.n_hidden_layers) {
            return Err("insert_direction_at is past the last layer".into());
        }
        if self.act_fn != Activation::Silu {
            return Err("act_fn must be \"swish\"".into());
        }
        Ok(())
    }
}

/// `beta_schedule` of a discrete diffusion scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum BetaSchedule {
    /// `"linear"`: betas linear from `beta_start` to `beta_end`.
    #[serde(rename = "linear")]
    Linear,
    /// `"scaled_linear"`: square roots linear, then squared.
    #[serde(rename = "scaled_linear")]
    ScaledLinear,
    /// `"squaredcos_cap_v2"`: the cosine ᾱ(t) of Nichol & Dhariwal, betas capped at 0.999.
    #[serde(rename = "squaredcos_cap_v2")]
    SquaredCos,
    /// `"exp"`: ᾱ(t) = exp(−12t) (Shap-E), betas capped at 0.999.
    #[serde(rename = "exp")]
    Exp,
}

/// What the model predicts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum PredictionType {
    /// `"epsilon"`: the noise.
    #[serde(rename = "epsilon")]
    Epsilon,
    /// `"v_prediction"`: the velocity.
    #[serde(rename = "v_prediction")]
    VPrediction,
    /// `"sample"`: the clean sample x0 (Shap-E).
    #[serde(rename = "sample")]
    Sample,
}

/// `HeunDiscreteScheduler` config (diffusers `schedulers/scheduling_heun_discrete.py`).
///
/// Shap-E: <https://huggingface.co/openai/shap-e/blob/main/scheduler/scheduler_config.json>.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct SchedulerConfig {
    /// The class that wrote the file; must be `HeunDiscreteScheduler` when present.
    #[serde(rename = "_class_name", default)]
    pub class_name: Option<String>,
    /// Training timesteps.
    #[serde(default = "d1000")]
    pub num_train_timesteps: usize,
    /// First beta (linear schedules only).
    #[serde(default = "beta_start")]
    pub beta_start: f64,
    /// Last beta (linear schedules only).
    #[serde(default = "beta_end")]
    pub beta_end: f64,
    /// The beta schedule.
    #[serde(default = "linear_schedule")]
    pub beta_schedule: BetaSchedule,
    /// Explicit betas (not supported; must be null).
    #[serde(default)]
    pub trained_betas: Option<Vec<f64>>,
    /// What the model predicts.
    #[serde(default = "epsilon")]
    pub prediction_type: PredictionType,
    /// Karras sigma spacing (ρ = 7) between the schedule's sigma range.
    #[serde(default)]
    pub use_karras_sigmas: bool,
    /// Clamp the x0 estimate to `±clip_sample_range` (after guidance).
    #[serde(default)]
    pub clip_sample: bool,
    /// Clamp range.
    #[serde(default = "one")]
    pub clip_sample_range: f64,
    /// Timestep spacing (`"linspace"` only).
    #[serde(default = "linspace")]
    pub timestep_spacing: String,
    /// Offset added to the timesteps (0 only for "linspace").
    #[serde(default)]
    pub steps_offset: usize,
    /// Exponential sigmas (not supported).
    #[serde(default)]
    pub use_exponential_sigmas: bool,
    /// Beta sigmas (not supported).
    #[serde(default)]
    pub use_beta_sigmas: bool,
}

fn d1000() -> usize {
    1000
}
fn beta_start() -> f64 {
    0.00085
}
fn beta_end() -> f64 {
    0.012
}
fn linear_schedule() -> BetaSchedule {
    BetaSchedule::Linear
}
fn epsilon() -> PredictionType {
    PredictionType::Epsilon
}
fn one() -> f64 {
    1.0
}
fn linspace() -> String {
    "linspace".into()
}

impl SchedulerConfig {
    /// The Shap-E scheduler (values of `openai/shap-e` `scheduler/scheduler_config.json`, URL above).
    pub fn shap_e() -> Self {
        Self {
            class_name: Some("HeunDiscreteScheduler".into()),
            num_train_timesteps: 1024,
            beta_start: beta_start(),
            beta_end: beta_end(),
            beta_schedule: BetaSchedule::Exp,
            trained_betas: None,
            prediction_type: PredictionType::Sample,
            use_karras_sigmas: true,
            clip_sample: true,
            clip_sample_range: 1.0,
            timestep_spacing: linspace(),
            steps_offset: 0,
            use_exponential_sigmas: false,
            use_beta_sigmas: false,
        }
    }

    /// Rejects values this port does not implement.
    pub fn validate(&self) -> Result<(), String> {
        if self.trained_betas.is_some() {
            return Err("trained_betas is not supported (expected null)".into());
        }
        if self.timestep_spacing != "linspace" {
            return Err(format!(
                "timestep_spacing \"{}\" is not supported (expected \"linspace\")",
                self.timestep_spacing
            ));
        }
        if self.use_exponential_sigmas || self.use_beta_sigmas {
            return Err("use_exponential_sigmas/use_beta_sigmas are not supported".into());
        }
        if self.num_train_timesteps < 2 {
            return Err("num_train_timesteps must be at least 2".into());
        }
        Ok(())
    }
}

/// Reads a config JSON, checks `_class_name` (when present) and the supported values.
pub fn read_config<T: DeserializeOwned + ClassChecked>(path: &Path) -> Result<T, LoadError> {
    let text = std::fs::read_to_string(path).map_err(|source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_config(&text, path)
}

/// Parses config JSON text (`path` names it in errors).
pub fn parse_config<T: DeserializeOwned + ClassChecked>(
    text: &str,
    path: &Path,
) -> Result<T, LoadError> {
    let cfg: T = serde_json::from_str(text).map_err(|source| LoadError::Config {
        path: path.to_path_buf(),
        source,
    })?;
    if let Some(found) = cfg.class_name() {
        if found != T::CLASS {
            return Err(LoadError::WrongClass {
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
pub trait ClassChecked {
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
        assert_eq!(c.time_embed_act_fn, Activation::Gelu);
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
