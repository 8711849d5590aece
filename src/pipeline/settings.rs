//! The settings of one `generate` item.

use serde::Serialize;

use crate::guide::{EndToEndGuidance, GuideMode, GuideSettings, SamplingGuidance};
use crate::mesh::Format;

/// Settings of one `generate` item (written into `report.json`, the guidance settings flattened).
#[derive(Debug, Clone, Serialize)]
pub struct RunSettings {
    /// Seed of every random draw.
    pub seed: u64,
    /// Prior sampling steps.
    pub prior_steps: usize,
    /// Prior guidance scale; `None`: the model's recommendation ([`crate::shap_e::SamplingDefaults`]).
    pub guidance_scale: Option<f64>,
    /// Unguided samples from this many noises, the run going on from the one the scorer rates
    /// highest on the held-aside views (1: the seed's noise, no choice).
    pub candidates: usize,
    /// Which guidance stages run.
    pub mode: GuideMode,
    /// Guided sampling through the prior (used when [`GuideMode::guides_sampling`]).
    pub sampling: SamplingGuidance,
    /// End-to-end guidance through the sampler's last steps (used by [`GuideMode::EndToEnd`]).
    pub end_to_end: EndToEndGuidance,
    /// Latent optimization settings (used when [`GuideMode::optimizes_latent`]; the view loss's
    /// views, side and samples are guided sampling's too).
    #[serde(flatten)]
    pub guide: GuideSettings,
    /// Export grid.
    pub grid: usize,
    /// Side of each view in the before/after contact sheets (20 views each).
    pub preview_size: usize,
    /// Output formats.
    pub formats: Vec<Format>,
}

impl RunSettings {
    /// Settings for evaluating latent optimization without writing files: seed 0, 64 prior
    /// steps, the model's recommended guidance scale, a 64³ mesh grid, 64 px previews, no output
    /// formats.
    pub fn for_evaluation(guide: GuideSettings) -> Self {
        Self {
            seed: 0,
            prior_steps: 64,
            guidance_scale: None,
            candidates: 1,
            mode: GuideMode::Latent,
            sampling: SamplingGuidance::default(),
            end_to_end: EndToEndGuidance::default(),
            guide,
            grid: 64,
            preview_size: 64,
            formats: vec![],
        }
    }
}
