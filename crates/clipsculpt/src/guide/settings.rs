//! The settings of the guide stage: the loop's, the held-aside evaluation's and exploration's,
//! with their defaults and the render sides they resolve to.

use super::explore::Explore;
use super::keep::SamplerExport;
use crate::autodiff::checkpoint::Policy;

/// Settings of the optimization.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct GuideSettings {
    /// Optimization steps.
    pub steps: usize,
    /// Peak learning rate.
    pub lr: f64,
    /// Views rendered per step.
    pub views: usize,
    /// Render resolution (pixels per side; 0: automatic, [`GuideSettings::render_side`]).
    pub resolution: usize,
    /// Samples per ray, coarse and fine.
    pub samples: (usize, usize),
    /// Rays per checkpointed decoder chunk (`None`: one graph over all rays).
    pub chunk_rays: Option<usize>,
    /// Checkpoint policy for the scoring CLIP's vision blocks.
    pub clip_policy: Policy,
    /// Weight of the transmittance term.
    pub transmittance_weight: f64,
    /// Weight of the pull toward the prior's latent.
    pub prior_weight: f64,
    /// Smallest crop, as a fraction of the view side.
    pub min_crop: f32,
    /// Consecutive non-finite steps after which the run is aborted.
    pub max_bad_steps: usize,
    /// Score the latent on the held-aside views every this many steps and keep the best (0: only
    /// the start and the end are scored).
    pub eval_every: usize,
    /// Side of the held-aside views (0: automatic, [`GuideSettings::eval_side`]).
    pub eval_resolution: usize,
    /// Weight of the contrastive part of the CLIP term ([`super::Target`]); 0 uses the bare
    /// cosine.
    pub contrast: f64,
    /// Exploration ([`super::start`]): which candidates besides the prior's sample can start the
    /// optimization.
    pub explore: Explore,
    /// Candidates refined for [`Self::explore_steps`] before the start is chosen (0: chosen by
    /// their held-aside score as they are).
    pub explore_refine: usize,
    /// Sampler steps of the bank's prior samples (fewer than the prompt's own: the bank only
    /// proposes candidates, which are then scored).
    pub explore_prior_steps: usize,
    /// Steps of each exploration probe.
    pub explore_steps: usize,
    /// Held-aside score a candidate must gain over the prior's sample to replace it.
    pub switch_margin: f32,
    /// Held-aside score an optimized latent must gain over the start to replace it: smaller
    /// gains are within what the optimizer wins by exploiting the scorer rather than by changing
    /// the object, and they cost the start's clean geometry.
    pub keep_margin: f32,
    /// Which sample guided sampling and end to end export ([`super::keep`]).
    pub sampler_export: SamplerExport,
}

impl Default for GuideSettings {
    fn default() -> Self {
        Self {
            steps: 30,
            lr: 0.01,
            views: 2,
            resolution: 0,
            samples: (32, 32),
            chunk_rays: Some(1024),
            clip_policy: Policy::BLOCKS,
            transmittance_weight: 0.5,
            prior_weight: 0.1,
            min_crop: 0.8,
            max_bad_steps: 5,
            eval_every: 5,
            eval_resolution: 0,
            contrast: 10.0,
            explore: Explore::Off,
            explore_refine: 0,
            explore_prior_steps: 16,
            explore_steps: 5,
            switch_margin: 0.05,
            keep_margin: KEEP_MARGIN,
            sampler_export: SamplerExport::Guarded,
        }
    }
}

/// Default [`GuideSettings::keep_margin`].
pub(crate) const KEEP_MARGIN: f32 = 0.05;

/// Largest side the automatic render resolution picks: views of a 224-pixel CLIP are rendered at
/// 64 and upsampled.
pub const AUTO_RESOLUTION_MAX: usize = 64;

/// Smallest side the automatic render resolution picks (unless the scoring CLIP's input is
/// smaller).
pub(crate) const AUTO_RESOLUTION_MIN: usize = 24;

impl GuideSettings {
    /// Side of the views the optimization renders, for a scoring CLIP of input side `clip_side`:
    /// [`Self::resolution`], or automatically 3/8 of `clip_side` within
    /// [`AUTO_RESOLUTION_MIN`]`..=`[`AUTO_RESOLUTION_MAX`] (never above `clip_side`), upsampled
    /// to the CLIP's input: 64 for a 224 px CLIP, 24 for the toy world's 64 px scorer. On the toy,
    /// guided sampling tuned on world B's held-out split was as right at 24 as at 32, with a larger
    /// held-aside gain, in 0.8× the time per run (docs/experiments.md).
    pub(crate) fn render_side(&self, clip_side: usize) -> usize {
        if self.resolution == 0 {
            (clip_side * 3 / 8).clamp(AUTO_RESOLUTION_MIN.min(clip_side), AUTO_RESOLUTION_MAX)
        } else {
            self.resolution
        }
    }

    /// Side of the held-aside views for a scoring CLIP of input side `clip_side`:
    /// [`Self::eval_resolution`], or automatically `clip_side` within
    /// 32..=[`AUTO_RESOLUTION_MAX`], upsampled to the CLIP's input like the guided views. A
    /// 224 px CLIP's held-aside views thus render 64² rays instead of 224² (12× fewer); the toy's
    /// 64 px scorer keeps its full side.
    pub fn eval_side(&self, clip_side: usize) -> usize {
        if self.eval_resolution == 0 {
            clip_side.clamp(32, AUTO_RESOLUTION_MAX)
        } else {
            self.eval_resolution
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn automatic_sides_follow_the_scoring_clip() {
        let s = GuideSettings::default();
        // Published CLIPs (224 px): guided views 64 px, held-aside views 64 px, both upsampled.
        assert_eq!((s.render_side(224), s.eval_side(224)), (64, 64));
        // The toy's 64 px scorer: guided views 24 px, held-aside views at the full side.
        assert_eq!((s.render_side(64), s.eval_side(64)), (24, 64));
        assert_eq!(s.eval_side(16), 32);
        let asked = GuideSettings {
            resolution: 40,
            eval_resolution: 224,
            ..GuideSettings::default()
        };
        assert_eq!((asked.render_side(224), asked.eval_side(224)), (40, 224));
    }
}
