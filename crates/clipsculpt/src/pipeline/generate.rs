//! `generate`: the algorithm of one run, stage by stage: sample the prior, score it, guide it,
//! score the result, write the latents and previews, export the mesh, write the report.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use candle_core::{DType, Device, Tensor};

use super::candidates::{Chosen, NoiseChoice};
use super::mesh::LatentField;
use super::models::{Guided, Models};
use super::report::{ExportMemory, Report, ReportSettings};
use super::settings::RunSettings;
use super::stages::{stage, StageRecorder};
use super::stream;
use crate::atomic::write_atomic;
use crate::autodiff::rng::Rng;
use crate::guide::{self, GuideMode, SamplingTrace, Score, Target};
use crate::mesh::{self, ExportError, ExportReport};
use crate::render::{contact_sheet, preview_settings};
use crate::shap_e::{save_latent, Decoder};

/// Progress of a run, for bars and logs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Progress {
    /// A stage begins: its name and its number of steps (0 when it has none to count).
    Stage(&'static str, usize),
    /// An optimization step ended with this mean CLIP cosine.
    Step(usize, f32),
}

/// Runs the whole job for `prompt` into `out_dir`, reporting progress through `on_progress`.
pub fn generate(
    models: &Models,
    prompt: &str,
    s: &RunSettings,
    out_dir: &Path,
    device: &Device,
    mut on_progress: impl FnMut(Progress),
) -> Result<Report> {
    let mut stages = StageRecorder::new(device);
    stages.record(stage::LOADING, models.load_seconds, models.load_peak_bytes);
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let rng = Rng::new(s.seed);

    let judge = stages.run(stage::SCORING, || Judge::new(models, prompt, s))?;
    let chosen = match s.candidates {
        0 | 1 => None,
        n => {
            on_progress(Progress::Stage("sampling candidate noises", n));
            let on_candidate = |k, c| on_progress(Progress::Step(k, c));
            let best = || models.best_noise(&judge.target, s, &rng, device, on_candidate);
            Some(stages.run(stage::SAMPLING, best)?)
        }
    };
    let rng = chosen.as_ref().map_or(rng, |c| c.rng.clone());
    let (z0, sampling, scored) = stages.run(stage::SAMPLING, || {
        let chosen = chosen.as_ref();
        sample(
            models,
            &judge.target,
            s,
            (&rng, chosen),
            device,
            &mut on_progress,
        )
    })?;
    let before = match scored {
        Some(score) => score,
        None => stages.run(stage::SCORING, || judge.score(&z0))?,
    };

    on_progress(Progress::Stage("optimizing", latent_steps(s)));
    let prior = guide::Start {
        latent: &z0,
        score: Some(before.score),
    };
    let guided = stages.run(stage::OPTIMIZING, || match latent_steps(s) {
        0 => Ok(Guided::unguided(&z0)),
        _ => models.guide(&judge.target, prior, s, &rng, device, |step, c| {
            on_progress(Progress::Step(step, c))
        }),
    })?;
    stages.move_seconds(stage::OPTIMIZING, stage::EXPLORING, guided.start.seconds);
    let z = &guided.latent;
    let after = stages.run(stage::SCORING, || judge.after(&z0, z, before))?;

    on_progress(Progress::Stage("writing latents, previews and meshes", 0));
    let mut files = stages.run(stage::LATENTS, || write_latents(out_dir, &z0, z))?;
    let sheets = Previews::new(models, s, &rng);
    files.extend(stages.run(stage::PREVIEWS, || {
        sheets.write(out_dir, &z0, z, after.unchanged)
    })?);
    let field = LatentField::new(&models.shap_e.decoder, z)?;
    let export = stages.run(stage::EXPORT, || {
        export_mesh(&field, s, device, out_dir, prompt)
    })?;
    if let Ok(export) = &export {
        files.extend(export.files.iter().cloned());
    }
    let outcome = Outcome {
        noise: chosen.map(|c| c.choice),
        before,
        after,
        sampling,
        guided,
        files,
    };
    let report = outcome.report(&judge, s, device, &stages, export)?;
    write_report(out_dir, &report)?;
    Ok(report)
}

/// Exports the mesh of `field`; `Ok(Err(reason))` when the field has no surface to extract (empty, or not
/// finite), which the run reports instead of failing, so that its latents, previews and report stay.
fn export_mesh(
    field: &LatentField,
    s: &RunSettings,
    device: &Device,
    out_dir: &Path,
    prompt: &str,
) -> Result<std::result::Result<ExportReport, String>> {
    match mesh::export_field(field, device, s.grid, 0.0, &s.formats, out_dir, "mesh") {
        Ok(report) => Ok(Ok(report)),
        Err(e @ (ExportError::EmptySurface { .. } | ExportError::NonFiniteField { .. })) => {
            Ok(Err(e.to_string()))
        }
        Err(e) => Err(e).with_context(|| format!("exporting the mesh of {prompt:?}")),
    }
}

/// The prior's sample of a run with root generator `rng`: guided through the prior or end to end
/// through its last steps when the mode says so (with its trace, and its held-aside score when
/// guidance computed it), else plain (the `chosen` candidate's sample, when there is one).
fn sample(
    models: &Models,
    target: &Target,
    s: &RunSettings,
    (rng, chosen): (&Rng, Option<&Chosen>),
    device: &Device,
    on_progress: &mut impl FnMut(Progress),
) -> Result<(Tensor, SamplingTrace, Option<Score>)> {
    if s.mode == GuideMode::EndToEnd {
        on_progress(Progress::Stage(
            "end-to-end guidance through the last sampler steps",
            s.end_to_end.iterations,
        ));
        return models.end_to_end_sample(target, s, rng, device, |i, c| {
            on_progress(Progress::Step(i, c))
        });
    }
    if !s.mode.guides_sampling() {
        if let Some(c) = chosen {
            return Ok((c.sample.clone(), SamplingTrace::default(), Some(c.score)));
        }
        on_progress(Progress::Stage("sampling the prior", 0));
        return Ok((
            models.run_sample(target.prompt(), s, rng, device)?,
            SamplingTrace::default(),
            None,
        ));
    }
    on_progress(Progress::Stage(
        "guided sampling through the prior",
        s.prior_steps,
    ));
    let unguided = chosen.map(|c| (&c.sample, c.score));
    models.guided_sample(target, s, (rng, unguided), device, |step, c| {
        on_progress(Progress::Step(step, c))
    })
}

/// Steps of the latent optimization in this run (0 unless the mode optimizes the latent).
fn latent_steps(s: &RunSettings) -> usize {
    if s.mode.optimizes_latent() {
        s.guide.steps
    } else {
        0
    }
}

/// The held-aside scoring of a run: the prompt as the scoring CLIP's [`Target`] (with the
/// models' negatives) at the settings' held-aside side.
struct Judge<'a> {
    models: &'a Models,
    prompt: &'a str,
    target: Target,
    side: usize,
}

/// The scores of the guided latent.
struct After {
    /// Its held-aside score.
    score: Score,
    /// The held-out CLIP's cosine of the prior's and the guided latent, when there is one.
    held_out: Option<[f32; 2]>,
    /// Whether guidance left the latent as the prior sampled it.
    unchanged: bool,
}

impl<'a> Judge<'a> {
    fn new(models: &'a Models, prompt: &'a str, s: &RunSettings) -> Result<Self> {
        let scorer = &models.scorer;
        Ok(Self {
            models,
            prompt,
            target: Target::new(scorer, prompt, &models.negatives, s.guide.contrast)?,
            side: s.guide.eval_side(scorer.image_size()),
        })
    }

    /// The held-aside score of `z`.
    fn score(&self, z: &Tensor) -> candle_core::Result<Score> {
        let m = self.models;
        guide::score(&m.shap_e.decoder, &m.scorer, &self.target, z, self.side)
    }

    /// The scores of the guided `z`, the prior's `z0` having scored `before`. Scores are
    /// deterministic functions of the latent (fixed cameras and draws), so when guidance left the
    /// latent unchanged (`--steps 0`) the prior's are reused.
    fn after(&self, z0: &Tensor, z: &Tensor, before: Score) -> Result<After> {
        let unchanged = same_values(z0, z)?;
        let score = if unchanged { before } else { self.score(z)? };
        Ok(After {
            score,
            held_out: self.held_out(z0, z, unchanged)?,
            unchanged,
        })
    }

    /// The held-out CLIP's cosine of the prior's latent `z0` and the guided `z` (the same when
    /// `unchanged`), when the models have a held-out CLIP.
    fn held_out(&self, z0: &Tensor, z: &Tensor, unchanged: bool) -> Result<Option<[f32; 2]>> {
        let Some(h) = &self.models.held_out else {
            return Ok(None);
        };
        let decoder = &self.models.shap_e.decoder;
        let t = Target::new(h, self.prompt, &[], 0.0)?;
        let res = h.image_size();
        let prior = guide::score(decoder, h, &t, z0, res)?.cosine;
        let guided = if unchanged {
            prior
        } else {
            guide::score(decoder, h, &t, z, res)?.cosine
        };
        Ok(Some([prior, guided]))
    }
}

/// What a run produced, before it is written as a [`Report`].
struct Outcome {
    noise: Option<NoiseChoice>,
    before: Score,
    sampling: SamplingTrace,
    after: After,
    guided: Guided,
    files: Vec<PathBuf>,
}

impl Outcome {
    /// The report of this outcome of the judge's models and prompt with settings `s`.
    fn report(
        self,
        judge: &Judge<'_>,
        s: &RunSettings,
        device: &Device,
        stages: &StageRecorder<'_>,
        export: std::result::Result<ExportReport, String>,
    ) -> Result<Report> {
        let (export, no_mesh) = match export {
            Ok(e) => (Some(e), None),
            Err(reason) => (None, Some(reason)),
        };
        let models = judge.models;
        Ok(Report {
            version: env!("CARGO_PKG_VERSION"),
            prompt: judge.prompt.to_string(),
            models: models.sources.clone(),
            settings: ReportSettings::resolved(s, models, device),
            noise: self.noise,
            sampling: self.sampling,
            trace: self.guided.trace,
            start: self.guided.start,
            score_before: self.before.score,
            score_after: self.after.score.score,
            cosine_before: self.before.cosine,
            cosine_after: self.after.score.cosine,
            negatives: judge.target.negatives(),
            held_out_scores: self.after.held_out,
            seconds: stages.seconds(export.as_ref()),
            peak_optimize_bytes: stages.get(stage::OPTIMIZING).heap_above_start,
            memory_before_export: export
                .as_ref()
                .map(|e| ExportMemory::from(&e.memory_before))
                .unwrap_or_default(),
            memory: stages.memory(models.precision, export.as_ref())?,
            mesh: export.map(|e| e.stats),
            no_mesh,
            files: self.files,
        })
    }
}

/// Writes `report` as `out_dir/report.json`.
fn write_report(out_dir: &Path, report: &Report) -> Result<()> {
    let p = out_dir.join("report.json");
    write_atomic(&p, serde_json::to_string_pretty(report)?.as_bytes())
        .with_context(|| format!("writing {}", p.display()))
}

/// Writes `latent_prior.safetensors` (`z0`) and `latent.safetensors` (`z`) into `out_dir`.
fn write_latents(out_dir: &Path, z0: &Tensor, z: &Tensor) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for (name, latent) in [("latent_prior.safetensors", z0), ("latent.safetensors", z)] {
        let p = out_dir.join(name);
        save_latent(&p, latent).with_context(|| format!("writing {}", p.display()))?;
        files.push(p);
    }
    Ok(files)
}

/// The before/after contact sheets: 20 views of `side` pixels each, drawn from the run's
/// [`stream::PREVIEW`].
struct Previews<'a> {
    decoder: &'a Decoder,
    side: usize,
    rng: &'a Rng,
}

impl<'a> Previews<'a> {
    fn new(models: &'a Models, s: &RunSettings, rng: &'a Rng) -> Self {
        Self {
            decoder: &models.shap_e.decoder,
            side: s.preview_size,
            rng,
        }
    }
}

impl Previews<'_> {
    /// Writes `preview_prior.png` (`z0`) and `preview.png` (`z`; the same sheet when
    /// `unchanged`) into `out_dir`.
    fn write(
        &self,
        out_dir: &Path,
        z0: &Tensor,
        z: &Tensor,
        unchanged: bool,
    ) -> Result<Vec<PathBuf>> {
        let preview = preview_settings();
        let mut files = Vec::new();
        let mut prior_png = None;
        for (name, latent) in [("preview_prior.png", z0), ("preview.png", z)] {
            let png = match prior_png.take() {
                Some(png) if unchanged => png,
                _ => contact_sheet(
                    self.decoder,
                    latent,
                    self.side,
                    &preview,
                    &mut self.rng.fork(stream::PREVIEW),
                )?,
            };
            let p = out_dir.join(name);
            write_atomic(&p, &png).with_context(|| format!("writing {}", p.display()))?;
            files.push(p);
            prior_png = Some(png);
        }
        Ok(files)
    }
}

/// Whether two tensors have the same shape and bitwise-equal values (compared as f32).
pub fn same_values(a: &Tensor, b: &Tensor) -> Result<bool> {
    if a.dims() != b.dims() {
        return Ok(false);
    }
    let v = |t: &Tensor| -> Result<Vec<u32>> {
        Ok(t.to_dtype(DType::F32)?
            .flatten_all()?
            .to_vec1::<f32>()?
            .into_iter()
            .map(f32::to_bits)
            .collect())
    };
    Ok(v(a)? == v(b)?)
}
