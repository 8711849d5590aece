//! The models of a run, loaded once: the Shap-E pipeline, the prior's text tower and tokenizer,
//! the scoring CLIP and the negative prompts; and what a run draws from them: text embeddings,
//! the prior's sample, the exploration bank and the guided latent.

use super::settings::ModelChoice;
use crate::models::{resolve, HubOptions, ModelKind};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Instant;

use anyhow::{Context, Result};
use candle_core::{Device, Tensor};
use serde::Serialize;

use super::settings::RunSettings;
use super::stream;
use crate::autodiff::rng::Rng;
use crate::clip::{
    load_text_with_projection, ClipScorer, ClipTextModelWithProjection, ClipTokenizer,
};
use crate::device::memory as device_memory;
use crate::device::Precision;
use crate::guide::{
    self, GuideTrace, Kept, SamplerExport, SamplingTrace, Score, StartChoice, Target, ViewLoss,
};
use crate::shap_e::{initial_noise, Denoiser, HeunDiscreteScheduler, ShapE};

/// Where a run's models came from (folders), for reports.
#[derive(Debug, Clone, Serialize)]
pub struct ModelSources {
    /// The Shap-E pipeline folder.
    pub shap_e: String,
    /// The scoring-CLIP folder.
    pub(crate) clip: String,
    /// SHA-256 of every weight file loaded, by role and path (`model/prior/…`, `clip/…`,
    /// `eval_clip/…`; [`crate::weights::digest::folder_digests`]).
    pub weights: BTreeMap<String, String>,
}

/// The SHA-256 of the weight files of the model folder `dir`, keyed `role/path`.
fn digests(dir: &Path, role: &str) -> Result<BTreeMap<String, String>> {
    crate::weights::digest::folder_digests(dir, role)
        .with_context(|| format!("hashing the weights in {}", dir.display()))
}

/// The models of a run, loaded once (a batch reuses them for every item).
pub struct Models {
    /// Prior, scheduler and decoder.
    pub shap_e: ShapE,
    /// The prior's CLIP text tower.
    pub(crate) text_encoder: ClipTextModelWithProjection,
    /// Its tokenizer.
    pub tokenizer: ClipTokenizer,
    /// The scoring CLIP (guidance).
    pub scorer: ClipScorer,
    /// An optional held-out CLIP that scores the result but never guides it.
    pub held_out: Option<ClipScorer>,
    /// Negative prompts guidance contrasts the prompt against (the scoring CLIP folder's
    /// [`guide::NEGATIVES_FILE`], or `--negatives`).
    pub negatives: Vec<String>,
    /// Where they came from, for reports.
    pub sources: ModelSources,
    /// Seconds [`Models::load`] took.
    pub(crate) load_seconds: f64,
    /// The dtype of the frozen networks' matrix weights.
    pub(crate) precision: Precision,
    /// Peak bytes while loading ([`device_memory::peak_bytes`]).
    pub(crate) load_peak_bytes: u64,
}

impl Models {
    /// Loads a Shap-E pipeline folder and a scoring-CLIP folder in the device's default
    /// precision ([`Precision::default_for`]: bf16 on CUDA, f32 on the CPU).
    pub fn load(shap_e_dir: &Path, clip_dir: &Path, device: &Device) -> Result<Models> {
        Self::load_with_precision(shap_e_dir, clip_dir, device, Precision::default_for(device))
    }

    /// Loads the models `choice` names (the embedded toy model, hub ids downloaded unless `hub`
    /// is offline, or folders), with the frozen networks' matrix weights in `precision`.
    pub fn load_choice(
        choice: &ModelChoice,
        device: &Device,
        precision: Precision,
        hub: &HubOptions,
    ) -> Result<Models> {
        let shap_e = resolve(&choice.model, ModelKind::ShapE, hub)
            .with_context(|| format!("resolving the model {}", choice.model))?;
        let clip = resolve(&choice.clip, ModelKind::Clip, hub)
            .with_context(|| format!("resolving the scoring CLIP {}", choice.clip))?;
        let mut models = Self::load_with_precision(&shap_e, &clip, device, precision)?;
        if let Some(spec) = &choice.eval_clip {
            let dir = resolve(spec, ModelKind::Clip, hub)
                .with_context(|| format!("resolving the held-out CLIP {spec}"))?;
            let scorer = ClipScorer::load(&dir, precision.dtype(), device)
                .with_context(|| format!("loading the held-out CLIP in {}", dir.display()))?;
            models.held_out = Some(scorer);
            models.sources.weights.extend(digests(&dir, "eval_clip")?);
        }
        if let Some(file) = &choice.negatives {
            models.negatives = read_negatives(file)?;
        }
        Ok(models)
    }

    /// Loads both folders with the frozen networks' matrix weights (prior, its text tower, the
    /// decoder, the scoring CLIP) in `precision`.
    pub fn load_with_precision(
        shap_e_dir: &Path,
        clip_dir: &Path,
        device: &Device,
        precision: Precision,
    ) -> Result<Models> {
        let start = Instant::now();
        device_memory::reset_peak(device)?;
        crate::device::load_kernels(device)?;
        let dtype = precision.dtype();
        let shap_e = ShapE::load(shap_e_dir, dtype, device)
            .with_context(|| format!("loading the Shap-E pipeline in {}", shap_e_dir.display()))?;
        let text_dir = shap_e_dir.join("text_encoder");
        let text_encoder =
            load_text_with_projection(&text_dir, dtype, device).with_context(|| {
                format!("loading the prior's text encoder in {}", text_dir.display())
            })?;
        let tok_dir = shap_e_dir.join("tokenizer");
        let tokenizer = ClipTokenizer::from_dir(&tok_dir, 77)
            .with_context(|| format!("loading the prior's tokenizer in {}", tok_dir.display()))?;
        let scorer = ClipScorer::load(clip_dir, dtype, device)
            .with_context(|| format!("loading the scoring CLIP in {}", clip_dir.display()))?;
        let negatives_file = clip_dir.join(guide::NEGATIVES_FILE);
        let negatives = if negatives_file.is_file() {
            read_negatives(&negatives_file)?
        } else {
            Vec::new()
        };
        Ok(Models {
            shap_e,
            text_encoder,
            tokenizer,
            scorer,
            held_out: None,
            negatives,
            sources: ModelSources {
                shap_e: shap_e_dir.display().to_string(),
                clip: clip_dir.display().to_string(),
                weights: digests(shap_e_dir, "model")?
                    .into_iter()
                    .chain(digests(clip_dir, "clip")?)
                    .collect(),
            },
            load_seconds: start.elapsed().as_secs_f64(),
            precision,
            load_peak_bytes: device_memory::peak_bytes(device)?,
        })
    }

    /// The prior's raw CLIP text embedding `(1, dim)` of `prompt`.
    pub fn text_embeds(&self, prompt: &str, device: &Device) -> Result<Tensor> {
        let unknown = self.tokenizer.unknown_words(prompt);
        if !unknown.is_empty() {
            tracing::warn!(
                "prompt {prompt:?}: the text encoder's small vocabulary has no word for {}; it reads \
                 them as letters it was never trained on (a vocabulary this small, such as the toy \
                 world's, holds only the words of the captions it was built from)",
                unknown.join(", ")
            );
        }
        let (ids, truncated) = self.tokenizer.encode_batch(&[prompt], device)?;
        if truncated.first().copied().unwrap_or(false) {
            tracing::warn!("prompt truncated to the text encoder's 77 tokens: {prompt:?}");
        }
        let (_, embeds) = self.text_encoder.forward(&ids)?;
        Ok(embeds)
    }

    /// The prior sample of a run with settings `s` and root generator `rng` (its stream
    /// [`stream::PRIOR`]), so `generate` and `eval` start from the same latent for the same
    /// prompt and seed.
    pub fn run_sample(
        &self,
        prompt: &str,
        s: &RunSettings,
        rng: &Rng,
        device: &Device,
    ) -> Result<Tensor> {
        self.sample(
            prompt,
            s.prior_steps,
            s.guidance_scale,
            &mut rng.fork(stream::PRIOR),
            device,
        )
    }

    /// The prior's sample of a run guided through the prior ([`guide::sampling`]): the same
    /// noise as [`Self::run_sample`] (stream [`stream::PRIOR`]), the sampler guided by the view
    /// loss of `target` (stream [`stream::SAMPLING`]) as `s.sampling` says, exported through the
    /// keep guard ([`Self::keep`]) against `unguided`, the unguided sample from the same noise
    /// with its held-aside score when the caller has them (else it is finished from where the
    /// guided run left the unguided one, as [`guide::guided_sample`] returns it). With a
    /// guidance scale of 0 it is [`Self::run_sample`]'s latent, bit for bit, unscored. The third
    /// element is the returned latent's held-aside score, when the guard computed it.
    pub fn guided_sample(
        &self,
        target: &Target,
        s: &RunSettings,
        (rng, unguided): (&Rng, Option<(&Tensor, Score)>),
        device: &Device,
        on_step: impl FnMut(usize, f32),
    ) -> Result<(Tensor, SamplingTrace, Option<Score>)> {
        let (run, noise) = self.sampling_run(target, s, rng, device)?;
        let denoiser = Denoiser::new(run.prior, &run.text_embeds, run.guidance_scale)?;
        let mut sched = run.sched.clone();
        let sampling = rng.fork(stream::SAMPLING);
        let loss = self.view_loss(target, s);
        let state = denoiser.initial_state(&sched, &noise)?;
        let (z, mut trace, fork) = guide::guided_sample(
            &denoiser,
            &mut sched,
            state,
            &s.sampling,
            &loss,
            &sampling,
            on_step,
        )?;
        if trace.steps.is_empty() {
            return Ok((z, trace, None));
        }
        let unguided = || match (unguided, fork) {
            (Some((z, score)), _) => Ok((z.clone(), Some(score))),
            (None, Some(mut f)) => Ok((denoiser.finish(&mut f.sched, f.x)?, None)),
            (None, None) => Ok((self.run_sample(target.prompt(), s, rng, device)?, None)),
        };
        let (z, kept, score) = self.keep(target, s, unguided, z)?;
        trace.keep = kept;
        Ok((z, trace, score))
    }

    /// The prior's sample of a run guided end to end through the sampler's last steps
    /// ([`guide::end_to_end`]): the same noise as [`Self::run_sample`], the view loss of `target`
    /// (stream [`stream::SAMPLING`]), as `s.end_to_end` says, exported through the keep guard
    /// ([`Self::keep`]). With no iterations it is [`Self::run_sample`]'s latent, bit for bit,
    /// unscored. The third element is the returned latent's held-aside score, when the guard
    /// computed it.
    pub fn end_to_end_sample(
        &self,
        target: &Target,
        s: &RunSettings,
        rng: &Rng,
        device: &Device,
        on_iteration: impl FnMut(usize, f32),
    ) -> Result<(Tensor, SamplingTrace, Option<Score>)> {
        let (run, noise) = self.sampling_run(target, s, rng, device)?;
        let loss = self.view_loss(target, s);
        let sampling = rng.fork(stream::SAMPLING);
        let r =
            guide::end_to_end_sample(&run, &noise, &s.end_to_end, &loss, &sampling, on_iteration)?;
        // Every recorded iteration updated the optimized tensor; without one the two are the same.
        let (z, keep, score) = match r.trace.iterations.is_empty() {
            true => (r.unguided, None, None),
            false => self.keep(target, s, || Ok((r.unguided, None)), r.latent)?,
        };
        let trace = SamplingTrace {
            end_to_end: Some(r.trace),
            keep,
            ..SamplingTrace::default()
        };
        Ok((z, trace, score))
    }

    /// The keep guard ([`guide::keep`]): with `s.guide.sampler_export` guarded, the `guided`
    /// sample only if it beats the `unguided` one from the same noise (and its held-aside score,
    /// when known) on the held-aside views by `s.guide.keep_margin`, else the unguided one; with
    /// the comparison and the returned latent's held-aside score. Unguarded, `guided`, unscored.
    pub(crate) fn keep(
        &self,
        target: &Target,
        s: &RunSettings,
        unguided: impl FnOnce() -> Result<(Tensor, Option<Score>)>,
        guided: Tensor,
    ) -> Result<(Tensor, Option<Kept>, Option<Score>)> {
        if s.guide.sampler_export == SamplerExport::Guided {
            return Ok((guided, None, None));
        }
        let side = s.guide.eval_side(self.scorer.image_size());
        let score = |z: &Tensor| guide::score(&self.shap_e.decoder, &self.scorer, target, z, side);
        let (unguided, known) = unguided()?;
        let scores = [known.map_or_else(|| score(&unguided), Ok)?, score(&guided)?];
        let kept = Kept::choose(scores[0].score, scores[1].score, s.guide.keep_margin);
        let z = if kept.exported_guided {
            guided
        } else {
            unguided
        };
        Ok((
            z,
            Some(kept),
            Some(scores[usize::from(kept.exported_guided)]),
        ))
    }

    /// The prior's sampling run for `target`'s prompt with settings `s`, and its starting noise
    /// (stream [`stream::PRIOR`] of `rng`, as [`Self::run_sample`] draws it).
    pub fn sampling_run(
        &self,
        target: &Target,
        s: &RunSettings,
        rng: &Rng,
        device: &Device,
    ) -> Result<(guide::SamplingRun<'_>, Tensor)> {
        let run = guide::SamplingRun {
            prior: &self.shap_e.prior,
            sched: HeunDiscreteScheduler::new(&self.shap_e.scheduler, s.prior_steps)?,
            text_embeds: self.text_embeds(target.prompt(), device)?,
            guidance_scale: s
                .guidance_scale
                .map_or(self.shap_e.sampling.guidance_scale, |g| g as f32),
            prior_policy: s.sampling.prior_policy,
        };
        let noise = initial_noise(run.prior, &run.text_embeds, &mut rng.fork(stream::PRIOR))?;
        Ok((run, noise))
    }

    /// The view loss of `target` at sampler step `step` of `s.prior_steps`: `(loss, cosine)`.
    pub fn view_loss<'a>(
        &'a self,
        target: &'a Target,
        s: &'a RunSettings,
    ) -> impl Fn(&Tensor, usize, &mut Rng) -> candle_core::Result<(Tensor, Tensor)> + 'a {
        let view_loss = ViewLoss {
            decoder: &self.shap_e.decoder,
            scorer: &self.scorer,
            target,
            settings: &s.guide,
        };
        let steps = s.prior_steps.max(1) as f64;
        move |z, step, rng| {
            let parts = view_loss.loss(z, step as f64 / steps, rng)?;
            Ok((parts.loss, parts.cosine))
        }
    }

    /// The exploration bank of a run ([`guide::start`]): the prior sampled, in one batch of
    /// [`guide::GuideSettings::explore_prior_steps`] sampler steps, for every negative prompt
    /// other than `prompt` (stream [`stream::EXPLORE`]); `None` without negatives or with
    /// exploration off.
    pub(crate) fn sample_bank(
        &self,
        prompt: &str,
        s: &RunSettings,
        rng: &Rng,
        device: &Device,
    ) -> Result<Option<Tensor>> {
        let prompts: Vec<&str> = self
            .negatives
            .iter()
            .map(String::as_str)
            .filter(|n| !guide::same_prompt(n, prompt))
            .collect();
        if prompts.is_empty() || s.guide.explore == guide::Explore::Off || s.guide.steps == 0 {
            return Ok(None);
        }
        let (ids, _) = self.tokenizer.encode_batch(&prompts, device)?;
        let (_, embeds) = self.text_encoder.forward(&ids)?;
        let guidance = s
            .guidance_scale
            .map_or(self.shap_e.sampling.guidance_scale, |g| g as f32);
        let mut rng = rng.fork(stream::EXPLORE);
        Ok(Some(self.shap_e.sample(
            &embeds,
            s.guide.explore_prior_steps,
            guidance,
            &mut rng,
        )?))
    }

    /// The guided latent of a run from the prior's sample `z0` (with its held-aside score when the
    /// caller has it, so it is not rendered again): exploration picks the start
    /// ([`guide::choose_start`]), then the loop refines it ([`guide::optimize()`]). `generate` and
    /// `eval` both go through here.
    pub fn guide(
        &self,
        target: &Target,
        z0: guide::Start<'_>,
        s: &RunSettings,
        rng: &Rng,
        device: &Device,
        on_step: impl FnMut(usize, f32),
    ) -> Result<Guided> {
        let decoder = &self.shap_e.decoder;
        let t = Instant::now();
        let bank = self.sample_bank(target.prompt(), s, rng, device)?;
        let explore = rng.fork(stream::EXPLORE);
        let chosen = guide::choose_start(
            decoder,
            &self.scorer,
            target,
            z0,
            bank.as_ref(),
            &s.guide,
            &explore,
        )?;
        let mut choice = chosen.choice;
        choice.seconds = t.elapsed().as_secs_f64();
        let start = guide::Start {
            latent: &chosen.latent,
            score: choice.start_score,
        };
        let run = guide::optimize(
            decoder,
            &self.scorer,
            target,
            start,
            &s.guide,
            &mut rng.fork(stream::GUIDE),
            on_step,
        )?;
        Ok(Guided {
            latent: run.latent,
            trace: run.trace,
            start: choice,
            start_latent: chosen.latent,
        })
    }

    /// A prior sample `(1, rows, d)` for `prompt`.
    pub fn sample(
        &self,
        prompt: &str,
        steps: usize,
        guidance: Option<f64>,
        rng: &mut Rng,
        device: &Device,
    ) -> Result<Tensor> {
        let embeds = self.text_embeds(prompt, device)?;
        let guidance = guidance.map_or(self.shap_e.sampling.guidance_scale, |g| g as f32);
        Ok(self.shap_e.sample(&embeds, steps, guidance, rng)?)
    }
}

/// Reads a negative-prompt file: one prompt per line, blank lines and `#` comments skipped.
pub fn read_negatives(path: &Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading negative prompts from {}", path.display()))?;
    Ok(text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect())
}

/// What [`Models::guide`] returns.
#[derive(Debug, Clone)]
pub struct Guided {
    /// The guided latent (the best by the held-aside score, no graph).
    pub latent: Tensor,
    /// What the loop measured.
    pub trace: GuideTrace,
    /// How exploration chose the start.
    pub start: StartChoice,
    /// The latent the loop started from (the prior's sample unless exploration chose another).
    pub start_latent: Tensor,
}

impl Guided {
    /// `latent` left as it is (no guidance steps).
    pub(crate) fn unguided(latent: &Tensor) -> Self {
        Self {
            latent: latent.clone(),
            trace: GuideTrace::default(),
            start: StartChoice::default(),
            start_latent: latent.clone(),
        }
    }
}
