//! A whole Shap-E checkpoint folder (diffusers layout): `prior/`, `scheduler/` and the decoder
//! from `shap_e_renderer/` or, when that has no readable weights, the legacy `renderer/`.

use std::path::Path;

use candle_core::{DType, Device, Result, Tensor};

use super::config::{read_config, SchedulerConfig};
use super::decoder::{load_prior, Decoder};
use super::error::LoadError;
use super::prior::PriorTransformer;
use super::sampler::{initial_noise, sample_latents_from};
use crate::autodiff::rng::Rng;

/// The file of a pipeline folder that recommends sampling settings (optional).
pub const SAMPLING_FILE: &str = "sampling.json";

/// Sampling settings a pipeline recommends (`sampling.json`; Shap-E's published values when the
/// file is absent, as in the hub checkpoints).
#[derive(Debug, Clone, Copy, PartialEq, serde::Deserialize, serde::Serialize)]
pub struct SamplingDefaults {
    /// Classifier-free guidance scale.
    pub guidance_scale: f32,
}

impl Default for SamplingDefaults {
    fn default() -> Self {
        Self {
            guidance_scale: super::sampler::DEFAULT_GUIDANCE_SCALE,
        }
    }
}

impl SamplingDefaults {
    /// Reads `root/sampling.json`; `None` when the file is absent.
    pub(crate) fn read(root: &Path) -> std::result::Result<Option<Self>, LoadError> {
        let path = root.join(SAMPLING_FILE);
        if !path.is_file() {
            return Ok(None);
        }
        let text = std::fs::read_to_string(&path).map_err(|source| LoadError::Io {
            path: path.clone(),
            source,
        })?;
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|source| LoadError::Config { path, source })
    }
}

/// Prior, scheduler config and decoder of one Shap-E checkpoint.
#[derive(Debug, Clone)]
pub struct ShapE {
    /// The latent prior.
    pub prior: PriorTransformer,
    /// The sampler's schedule.
    pub scheduler: SchedulerConfig,
    /// The latent decoder.
    pub decoder: Decoder,
    /// Recommended sampling settings.
    pub sampling: SamplingDefaults,
}

impl ShapE {
    /// Loads `root/prior`, `root/scheduler/scheduler_config.json` (the Shap-E values, with a
    /// warning, if the file is absent) and the first decoder folder of [`DECODER_DIRS`](crate::weights::files::DECODER_DIRS) that has
    /// weights.
    pub(crate) fn load(
        root: &Path,
        dtype: DType,
        device: &Device,
    ) -> std::result::Result<Self, LoadError> {
        let prior = load_prior(&root.join("prior"), dtype, device)?.model;
        let sched_path = root.join("scheduler").join("scheduler_config.json");
        let scheduler = if sched_path.is_file() {
            read_config(&sched_path)?
        } else {
            tracing::warn!(
                "{} is missing; using Shap-E's published scheduler settings",
                sched_path.display()
            );
            SchedulerConfig::shap_e()
        };
        let sampling = SamplingDefaults::read(root)?.unwrap_or_default();
        Ok(Self {
            prior,
            scheduler,
            decoder: Decoder::load_in(root, dtype, device)?,
            sampling,
        })
    }

    /// Latents `(B, tokens, d_latent)` for raw CLIP `text_embeds (B, dim)` with noise from `rng`.
    pub(crate) fn sample(
        &self,
        text_embeds: &Tensor,
        steps: usize,
        guidance_scale: f32,
        rng: &mut Rng,
    ) -> Result<Tensor> {
        let noise = initial_noise(&self.prior, text_embeds, rng)?;
        sample_latents_from(
            &self.prior,
            &self.scheduler,
            text_embeds,
            &noise,
            steps,
            guidance_scale,
        )
    }
}
