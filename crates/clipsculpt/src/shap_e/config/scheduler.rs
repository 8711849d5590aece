//! `HeunDiscreteScheduler` config (`scheduler/scheduler_config.json`).

use serde::{Deserialize, Serialize};

/// `beta_schedule` of a discrete diffusion scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub(crate) enum BetaSchedule {
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
pub(crate) enum PredictionType {
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
    pub(crate) class_name: Option<String>,
    /// Training timesteps.
    #[serde(default = "d1000")]
    pub(crate) num_train_timesteps: usize,
    /// First beta (linear schedules only).
    #[serde(default = "beta_start")]
    pub(crate) beta_start: f64,
    /// Last beta (linear schedules only).
    #[serde(default = "beta_end")]
    pub(crate) beta_end: f64,
    /// The beta schedule.
    #[serde(default = "linear_schedule")]
    pub(crate) beta_schedule: BetaSchedule,
    /// Explicit betas (not supported; must be null).
    #[serde(default)]
    pub(crate) trained_betas: Option<Vec<f64>>,
    /// What the model predicts.
    #[serde(default = "epsilon")]
    pub(crate) prediction_type: PredictionType,
    /// Karras sigma spacing (ρ = 7) between the schedule's sigma range.
    #[serde(default)]
    pub(crate) use_karras_sigmas: bool,
    /// Clamp the x0 estimate to `±clip_sample_range` (after guidance).
    #[serde(default)]
    pub(crate) clip_sample: bool,
    /// Clamp range.
    #[serde(default = "one")]
    pub(crate) clip_sample_range: f64,
    /// Timestep spacing (`"linspace"` only).
    #[serde(default = "linspace")]
    pub(crate) timestep_spacing: String,
    /// Offset added to the timesteps (0 only for "linspace").
    #[serde(default)]
    pub(crate) steps_offset: usize,
    /// Exponential sigmas (not supported).
    #[serde(default)]
    pub(crate) use_exponential_sigmas: bool,
    /// Beta sigmas (not supported).
    #[serde(default)]
    pub(crate) use_beta_sigmas: bool,
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
    pub(crate) fn validate(&self) -> Result<(), String> {
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
