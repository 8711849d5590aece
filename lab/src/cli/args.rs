//! Every generation setting as a flag (the research knobs `clipsculpt generate` reaches only
//! through `--settings`), for `eval`; validated by the library into [`RunSettings`].

use std::path::PathBuf;

use anyhow::bail;
use clap::Args as ClapArgs;

use clipsculpt::autodiff::checkpoint::Policy;
use clipsculpt::autodiff::memory::parse_bytes;
use clipsculpt::guide::{
    ChainTarget, EndToEndGuidance, Explore, GuideMode, GuideSettings, Recurrence, SamplerExport,
    SamplingGradient, SamplingGuidance, AUTO_RESOLUTION_MAX,
};
use clipsculpt::mesh::Format;
use clipsculpt::models::ModelSpec;
use clipsculpt::pipeline::{ModelChoice, RunSettings};
use clipsculpt_lab::guidance::{WorldGuidance, GUIDANCE_FILE};

/// Which models to use.
#[derive(Debug, Clone, ClapArgs)]
pub(crate) struct ModelArgs {
    /// Shap-E pipeline: `toy` (embedded), a hub id such as `openai/shap-e[@revision]`, or a folder.
    #[arg(long, default_value = "toy")]
    pub(crate) model: ModelSpec,
    /// Scoring CLIP: `toy`, a hub id such as openai/clip-vit-base-patch16, or a folder
    /// [default: the --model folder's guidance.json `clip`, else toy]
    #[arg(long)]
    pub(crate) clip: Option<ModelSpec>,
    /// A second, held-out CLIP that only scores the result (e.g. openai/clip-vit-base-patch32).
    #[arg(long)]
    pub(crate) eval_clip: Option<ModelSpec>,
    /// Negative prompts to contrast the prompt against, one per line (default: the scoring CLIP
    /// folder's negatives.txt, if any; the toy world ships none: its caption grid,
    /// assets/toy/clip/caption-grid.txt, is for experiments only).
    #[arg(long)]
    pub(crate) negatives: Option<PathBuf>,
}

impl ModelArgs {
    /// The models named here.
    pub(crate) fn choice(&self) -> ModelChoice {
        ModelChoice {
            model: self.model.clone(),
            clip: self.clip.clone().unwrap_or(ModelSpec::Toy),
            eval_clip: self.eval_clip.clone(),
            negatives: self.negatives.clone(),
        }
    }
}

/// Settings of one generation, every one a flag (`eval`).
#[derive(Debug, Clone, ClapArgs)]
pub(crate) struct GenerateArgs {
    #[command(flatten)]
    pub(crate) models: ModelArgs,
    /// Random seed (prior noise, cameras, augmentations).
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// Prior sampling steps (Heun/Karras).
    #[arg(long, default_value_t = 64)]
    pub(crate) prior_steps: usize,
    /// Classifier-free guidance scale of the prior [default: the model's sampling.json, else 15]
    #[arg(long)]
    pub(crate) guidance_scale: Option<f64>,
    /// Sample the prior, unguided, from this many noises (the seed's first) and go on from the one
    /// whose sample the scoring CLIP rates highest on the held-aside views; report.json lists
    /// every candidate's score. Each candidate costs one prior sample and one scoring.
    #[arg(long, default_value_t = 1)]
    pub(crate) candidates: usize,
    /// Where CLIP guidance acts: sampling (inside the prior's sampler, gradients through the
    /// checkpointed prior), latent (optimizing the finished latent through the decoder), both,
    /// end-to-end (optimizing the sampler state --e2e-steps before the end through those steps),
    /// or off (plain Shap-E).
    #[arg(long, default_value_t = GuideMode::Sampling)]
    pub(crate) guide: GuideMode,
    /// Strength of guided sampling: each guided sampler step moves the state by this share of
    /// the step's own displacement, against the CLIP loss's gradient [default: the --model
    /// folder's guidance.json, else 1]
    #[arg(long)]
    pub(crate) sampling_scale: Option<f64>,
    /// Guided sampling acts on the sampler steps whose noise level σ is within MAX:MIN.
    #[arg(long, default_value = "20:0.2", value_parser = parse_sigma_window)]
    pub(crate) sampling_sigmas: (f32, f32),
    /// The gradient guided sampling follows: prior (through the checkpointed prior's transformer
    /// to the sampler state) or prediction (at the prior's x0 prediction, no backward through the
    /// prior: cheaper, and the control that shows what the prior's Jacobian adds).
    #[arg(long, default_value_t = SamplingGuidance::default().gradient)]
    pub(crate) sampling_gradient: SamplingGradient,
    /// Guided sampling's self-recurrence: each guided step whose σ is within
    /// --recurrence-sigmas is taken this many times, the state re-noised back to the step's σ
    /// in between (1: off).
    #[arg(long, default_value_t = Recurrence::default().times)]
    pub(crate) sampling_recurrence: usize,
    /// Self-recurrence acts on the guided steps whose σ is within MAX:MIN.
    #[arg(long, default_value = "12:2", value_parser = parse_sigma_window)]
    pub(crate) recurrence_sigmas: (f32, f32),
    /// End-to-end guidance: the last Heun steps the gradient runs through (each a checkpointed
    /// segment whose prior blocks are checkpointed again inside it).
    #[arg(long, default_value_t = EndToEndGuidance::default().steps)]
    pub(crate) e2e_steps: usize,
    /// End-to-end guidance: gradient iterations (0 = the unguided sample).
    #[arg(long, default_value_t = EndToEndGuidance::default().iterations)]
    pub(crate) e2e_iterations: usize,
    /// End-to-end guidance: each iteration moves the optimized tensor by this share of its scale
    /// (σ of the state, or the conditioning's RMS) [default: the --model folder's
    /// guidance.json, else 0.25]
    #[arg(long)]
    pub(crate) e2e_lr: Option<f64>,
    /// End-to-end guidance optimizes the sampler state (state) or the text conditioning of the
    /// last steps (conditioning).
    #[arg(long, default_value_t = EndToEndGuidance::default().target)]
    pub(crate) e2e_target: ChainTarget,
    /// End-to-end guidance: checkpoint policy of the sampler steps (each step is one block):
    /// none, blocks, sqrt, every:K or last:N.
    #[arg(long, default_value = "blocks")]
    pub(crate) e2e_checkpoint: Policy,
    /// Optimization steps of the latent stage (--guide latent or both; 0 = none).
    #[arg(long, default_value_t = 30)]
    pub(crate) steps: usize,
    /// Peak learning rate of the latent optimizer.
    #[arg(long, default_value_t = GuideSettings::default().lr)]
    pub(crate) lr: f64,
    /// Random views rendered per optimization step.
    #[arg(long, default_value_t = 2)]
    pub(crate) views: usize,
    /// Render resolution of each view in pixels per side [default: 3/8 of the scoring CLIP's input
    /// side, within 24..=64]
    #[arg(long)]
    pub(crate) resolution: Option<usize>,
    /// Side in pixels of the four held-aside views that score the result [default: the scoring
    /// CLIP's input side within 32..=64, upsampled to the CLIP's input]
    #[arg(long)]
    pub(crate) eval_resolution: Option<usize>,
    /// Checkpoint policy for decoder chunks and CLIP blocks: none, blocks, sqrt, every:K, last:N.
    #[arg(long, default_value = "blocks")]
    pub(crate) checkpoint: Policy,
    /// Checkpoint policy for the prior's transformer blocks during guided sampling: none,
    /// blocks, sqrt, every:K, last:N or budget:SIZE [default: blocks, or half of
    /// --memory-budget when that is given]
    #[arg(long)]
    pub(crate) prior_checkpoint: Option<Policy>,
    /// Memory budget, e.g. 6GiB: chooses chunk sizes and policy to fit, or refuses up front.
    #[arg(long, value_parser = parse_bytes)]
    pub(crate) memory_budget: Option<usize>,
    /// Marching-cubes grid size for the export.
    #[arg(long, default_value_t = 96)]
    pub(crate) grid: usize,
    /// Output formats.
    #[arg(long, value_delimiter = ',', default_value = "glb,ply,obj,png")]
    pub(crate) formats: Vec<Format>,
    /// Weight of the contrastive part of the CLIP loss (prompt vs negative prompts); 0 = bare cosine.
    #[arg(long, default_value_t = GuideSettings::default().contrast)]
    pub(crate) contrast: f64,
    /// Exploration, when there are negative prompts: the prior is also sampled for each of them
    /// (the bank); the start is the best of the prior's sample, the bank (bank) and the bank's
    /// consensus latent analogies a + b − c (analogies) on the held-aside views; off = the
    /// prior's sample.
    #[arg(long, default_value_t = GuideSettings::default().explore)]
    pub(crate) explore: Explore,
    /// Refine the prior's sample and the best N exploration candidates for a few steps before
    /// choosing the start (0 = choose by their held-aside score as they are).
    #[arg(long, default_value_t = GuideSettings::default().explore_refine)]
    pub(crate) explore_refine: usize,
    /// Sampler steps of the exploration bank's prior samples.
    #[arg(long, default_value_t = GuideSettings::default().explore_prior_steps)]
    pub(crate) explore_prior_steps: usize,
    /// Score the latent on fixed held-aside views every N steps and export the best (0 = only at the end).
    #[arg(long, default_value_t = GuideSettings::default().eval_every)]
    pub(crate) eval_every: usize,
    /// Held-aside score the optimized latent (latent stage) or the guided sample (guided sampling,
    /// end to end) must gain over its start to be exported instead of it [default: the --model
    /// folder's guidance.json, else 0]
    #[arg(long)]
    pub(crate) keep_margin: Option<f32>,
    /// What guided sampling and end to end export: guarded (the guided sample only when it beats
    /// the unguided sample from the same noise on the held-aside views by --keep-margin; costs one
    /// unguided sample and two scorings) or guided (always the guided sample) [default: the
    /// --model folder's guidance.json, else guarded]
    #[arg(long)]
    pub(crate) sampler_export: Option<SamplerExport>,
    /// Side in pixels of each of the 20 views in the before/after preview sheets.
    #[arg(long, default_value_t = 48)]
    pub(crate) preview_size: usize,
}

impl GenerateArgs {
    /// Validated run settings; `--memory-budget` picks the ray chunk and the CLIP policy, or
    /// refuses up front.
    pub(crate) fn run_settings(&self) -> anyhow::Result<RunSettings> {
        let a = self;
        let samples = (32, 32);
        let (chunk_rays, clip_policy) = self.memory_plan(samples)?;
        let prior_policy = match (a.prior_checkpoint, a.memory_budget) {
            (Some(p), _) => p,
            (None, Some(budget)) => Policy::Budget(budget / 2),
            (None, None) => Policy::BLOCKS,
        };
        let sampling = SamplingGuidance {
            scale: a
                .sampling_scale
                .unwrap_or(SamplingGuidance::default().scale),
            sigma_max: a.sampling_sigmas.0,
            sigma_min: a.sampling_sigmas.1,
            prior_policy,
            gradient: a.sampling_gradient,
            recurrence: Recurrence {
                times: a.sampling_recurrence,
                sigma_max: a.recurrence_sigmas.0,
                sigma_min: a.recurrence_sigmas.1,
            },
            ..SamplingGuidance::default()
        };
        let guide = GuideSettings {
            steps: a.steps,
            lr: a.lr,
            views: a.views,
            resolution: a.resolution.unwrap_or(0),
            eval_resolution: a.eval_resolution.unwrap_or(0),
            samples,
            chunk_rays,
            clip_policy,
            contrast: a.contrast,
            eval_every: a.eval_every,
            explore: a.explore,
            explore_refine: a.explore_refine,
            explore_prior_steps: a.explore_prior_steps,
            keep_margin: a
                .keep_margin
                .unwrap_or(GuideSettings::default().keep_margin),
            sampler_export: a.sampler_export.unwrap_or_default(),
            ..GuideSettings::default()
        };
        let run = RunSettings {
            models: a.models.choice(),
            seed: a.seed,
            prior_steps: a.prior_steps,
            guidance_scale: a.guidance_scale,
            candidates: a.candidates,
            mode: a.guide,
            sampling,
            end_to_end: EndToEndGuidance {
                steps: a.e2e_steps,
                iterations: a.e2e_iterations,
                lr: a.e2e_lr.unwrap_or(EndToEndGuidance::default().lr),
                target: a.e2e_target,
                step_policy: a.e2e_checkpoint,
                ..EndToEndGuidance::default()
            },
            guide,
            grid: a.grid,
            preview_size: a.preview_size.clamp(8, 512),
            formats: a.formats.clone(),
            asset: clipsculpt::mesh::AssetOptions::default(),
        };
        run.validate()?;
        Ok(run)
    }

    /// Fills the flags not given from the `--model` folder's `guidance.json`, if it has one
    /// ([`WorldGuidance`]); explicit flags win.
    pub(crate) fn with_world_guidance(mut self) -> anyhow::Result<Self> {
        let ModelSpec::Dir(shap_e) = &self.models.model else {
            return Ok(self);
        };
        let Some(g) = WorldGuidance::read(shap_e).map_err(anyhow::Error::msg)? else {
            return Ok(self);
        };
        self.sampling_scale = self.sampling_scale.or(g.sampling_scale);
        self.e2e_lr = self.e2e_lr.or(g.e2e_lr);
        self.keep_margin = self.keep_margin.or(g.keep_margin);
        if self.sampler_export.is_none() {
            self.sampler_export = match &g.sampler_export {
                Some(e) => Some(e.parse().map_err(|e| {
                    anyhow::anyhow!(
                        "{}: sampler_export: {e}",
                        shap_e.join(GUIDANCE_FILE).display()
                    )
                })?),
                None => None,
            };
        }
        if self.models.clip.is_none() {
            self.models.clip = g.clip_dir(shap_e).map(ModelSpec::Dir);
        }
        Ok(self)
    }

    /// Rays per decoder chunk and the CLIP policy, from `--checkpoint` and `--memory-budget`.
    fn memory_plan(&self, samples: (usize, usize)) -> anyhow::Result<(Option<usize>, Policy)> {
        let side = self.resolution.unwrap_or(AUTO_RESOLUTION_MAX);
        let rays = self.views * side * side;
        Ok(match (self.memory_budget, self.checkpoint) {
            (None, Policy::None) => (None, Policy::None),
            (None, p) => (Some(1024.min(rays)), p),
            (Some(budget), _) => {
                // Per ray while a chunk is recomputed: its samples × the MLP's stored activations
                // and backward temporaries (≈ 8 layers × 4 tensors of width ≤ 256, f32).
                let per_ray = (samples.0 + samples.1) * 8 * 4 * 256 * 4;
                let half = budget / 2;
                let chunk = half / per_ray;
                if chunk < 16 {
                    bail!(
                        "--memory-budget {budget} bytes is too small: a 16-ray decoder chunk alone needs about {} bytes",
                        2 * 16 * per_ray
                    );
                }
                (Some(chunk.min(rays)), Policy::Budget(half))
            }
        })
    }
}

/// Parses a σ window `MAX:MIN` (both positive, MAX ≥ MIN).
fn parse_sigma_window(s: &str) -> Result<(f32, f32), String> {
    let bad = || format!("invalid σ window {s:?}: expected MAX:MIN, e.g. 20:0.2");
    let (hi, lo) = s.split_once(':').ok_or_else(bad)?;
    let (hi, lo): (f32, f32) = (
        hi.trim().parse().map_err(|_| bad())?,
        lo.trim().parse().map_err(|_| bad())?,
    );
    if !(hi.is_finite() && lo.is_finite() && lo > 0.0 && hi >= lo) {
        return Err(bad());
    }
    Ok((hi, lo))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Flags {
        #[command(flatten)]
        generate: GenerateArgs,
    }

    /// The run settings `eval` derives from `args` (after the program name).
    fn run_json(args: &[&str]) -> anyhow::Result<serde_json::Value> {
        let flags = Flags::try_parse_from(std::iter::once("eval").chain(args.iter().copied()))?;
        let run = flags.generate.with_world_guidance()?.run_settings()?;
        Ok(serde_json::to_value(run)?)
    }

    /// A world's `shap_e/guidance.json` gives `eval` the same run settings (models included) as
    /// the protocol's explicit flags; an explicit flag overrides it; without the file the
    /// defaults differ.
    #[test]
    fn guidance_json_gives_the_explicit_flags_settings() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let (shap_e, clip) = (dir.path().join("shap_e"), dir.path().join("clip"));
        std::fs::create_dir_all(&shap_e)?;
        std::fs::create_dir_all(&clip)?;
        std::fs::write(
            shap_e.join(GUIDANCE_FILE),
            r#"{"sampling_scale":0.5,"e2e_lr":0.1,"keep_margin":0.05,"sampler_export":"guarded","clip":"../clip"}"#,
        )?;
        let (model, clip) = (shap_e.to_string_lossy(), clip.to_string_lossy());
        let explicit = run_json(&[
            "--model",
            &model,
            "--clip",
            &clip,
            "--sampling-scale",
            "0.5",
            "--e2e-lr",
            "0.1",
            "--keep-margin",
            "0.05",
            "--sampler-export",
            "guarded",
        ])?;
        let via_file = run_json(&["--model", &model])?;
        assert_eq!(explicit, via_file);
        let scaled = run_json(&["--model", &model, "--sampling-scale", "2"])?;
        assert_eq!(scaled["sampling"]["scale"], 2.0);
        assert_eq!(scaled["end_to_end"]["lr"], via_file["end_to_end"]["lr"]);
        std::fs::remove_file(shap_e.join(GUIDANCE_FILE))?;
        assert_ne!(run_json(&["--model", &model])?, explicit);
        Ok(())
    }
}
