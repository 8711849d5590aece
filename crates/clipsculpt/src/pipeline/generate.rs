//! `generate`: the algorithm of one run, stage by stage: sample the prior, score it, guide it,
//! score the result, write the latents and previews, export the mesh, write the report.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use candle_core::{DType, Device, Tensor};

use super::candidates::Chosen;
use super::lineage::Lineage;
use super::mesh::LatentField;
use super::models::{Guided, Models};
use super::observer::{Observer, Progress};
use super::provenance::{latent_sha256, Provenance};
use super::renoise::Renoise;
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

/// What every stage of one run shares: the loaded models, the settings and the device.
#[derive(Clone, Copy)]
pub struct RunContext<'a> {
    /// The loaded models.
    pub models: &'a Models,
    /// The run's settings.
    pub settings: &'a RunSettings,
    /// The device the models are on.
    pub device: &'a Device,
    /// A saved latent to start the sampler from (`vary`, `edit`), instead of noise; candidates are then not drawn.
    pub renoise: Option<&'a Renoise>,
}

impl<'a> RunContext<'a> {
    /// The context of runs of `models` on `device` with `settings`.
    pub fn new(models: &'a Models, settings: &'a RunSettings, device: &'a Device) -> Self {
        Self {
            models,
            settings,
            device,
            renoise: None,
        }
    }

    /// This context, its runs starting from `from` ([`Models::resample`]).
    pub fn with_renoise(self, from: &'a Renoise) -> Self {
        Self {
            renoise: Some(from),
            ..self
        }
    }
}

/// Runs the whole job for `prompt` into `out_dir` ([`run`], then its files and `report.json`),
/// telling `observer` its progress and stages.
pub fn generate(
    ctx: &RunContext<'_>,
    prompt: &str,
    out_dir: &Path,
    mut observer: impl Observer,
) -> Result<Report> {
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let outcome = run(ctx, prompt, &mut observer)?;
    outcome.write(out_dir, &mut observer)
}

/// The latents and scores of one run, before anything is written: sample the prior (from the
/// best of the candidate noises), score it, guide it, score the result.
pub fn run<'a>(
    ctx: &RunContext<'a>,
    prompt: &'a str,
    observer: &mut dyn Observer,
) -> Result<Outcome<'a>> {
    let (models, s, device) = (ctx.models, ctx.settings, ctx.device);
    let mut stages = StageRecorder::new(device);
    stages.record(stage::LOADING, models.load_seconds, models.load_peak_bytes);
    observer.stage(stage::LOADING, &stages.get(stage::LOADING));
    let judge = observed(&mut stages, stage::SCORING, observer, |_| {
        Judge::new(ctx, prompt)
    })?;
    let chosen = match s.candidates {
        _ if ctx.renoise.is_some() => None,
        0 | 1 => None,
        n => Some(observed(&mut stages, stage::SAMPLING, observer, |o| {
            o.progress(Progress::Stage("sampling candidate noises", n));
            let on_candidate = |k, c| o.progress(Progress::Step(k, c));
            models.best_noise(&judge.target, s, &Rng::new(s.seed), device, on_candidate)
        })?),
    };
    let rng = chosen.as_ref().map_or(Rng::new(s.seed), |c| c.rng.clone());
    let (z0, sampling, scored) = observed(&mut stages, stage::SAMPLING, observer, |o| {
        sample(ctx, &judge.target, (&rng, chosen.as_ref()), o)
    })?;
    let before = match scored {
        Some(score) => score,
        None => observed(&mut stages, stage::SCORING, observer, |_| judge.score(&z0))?,
    };
    let guided = observed(&mut stages, stage::OPTIMIZING, observer, |o| {
        o.progress(Progress::Stage("optimizing", latent_steps(s)));
        let start = guide::Start {
            latent: &z0,
            score: Some(before.score),
        };
        match latent_steps(s) {
            0 => Ok(Guided::unguided(&z0)),
            _ => models.guide(&judge.target, start, s, &rng, device, |step, c| {
                o.progress(Progress::Step(step, c))
            }),
        }
    })?;
    stages.move_seconds(stage::OPTIMIZING, stage::EXPLORING, guided.start.seconds);
    let after = observed(&mut stages, stage::SCORING, observer, |_| {
        judge.after(&z0, &guided.latent, before)
    })?;
    Ok(Outcome {
        ctx: *ctx,
        judge,
        rng,
        noise: chosen,
        prior: z0,
        before,
        sampling,
        guided,
        after,
        stages,
        lineage: Lineage::default(),
    })
}

/// Exports the mesh of latent `z`'s field at the level the field's range calls for ([`mesh::iso`]),
/// the time spent building the field counted as sampling the grid; `Ok(Err(reason))` when the field
/// has no surface to extract (empty, or not finite), which the run reports instead of failing, so
/// that its latents, previews and report stay.
fn export_mesh(
    decoder: &Decoder,
    z: &Tensor,
    s: &RunSettings,
    device: &Device,
    out_dir: &Path,
    prompt: &str,
) -> Result<std::result::Result<ExportReport, String>> {
    let t = std::time::Instant::now();
    let field = LatentField::new(decoder, z)?;
    let building = t.elapsed().as_secs_f64();
    let level = mesh::Level::FromField;
    match mesh::export_field(
        &field, device, s.grid, level, &s.asset, &s.formats, out_dir, "mesh",
    ) {
        Ok(mut report) => {
            report.seconds[0] += building;
            Ok(Ok(report))
        }
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
    ctx: &RunContext<'_>,
    target: &Target,
    (rng, chosen): (&Rng, Option<&Chosen>),
    observer: &mut dyn Observer,
) -> Result<(Tensor, SamplingTrace, Option<Score>)> {
    let (models, s, device) = (ctx.models, ctx.settings, ctx.device);
    let stage = |o: &mut dyn Observer, name, steps| o.progress(Progress::Stage(name, steps));
    if let Some(from) = ctx.renoise {
        stage(observer, "sampling from the saved latent", s.prior_steps);
        return models.resample(target, s, (from, rng), device, |i, c| {
            observer.progress(Progress::Step(i, c))
        });
    }
    if s.mode == GuideMode::EndToEnd {
        let name = "end-to-end guidance through the last sampler steps";
        stage(observer, name, s.end_to_end.iterations);
        return models.end_to_end_sample(target, s, rng, device, |i, c| {
            observer.progress(Progress::Step(i, c))
        });
    }
    if !s.mode.guides_sampling() {
        if let Some(c) = chosen {
            return Ok((c.sample.clone(), SamplingTrace::default(), Some(c.score)));
        }
        stage(observer, "sampling the prior", 0);
        let z0 = models.run_sample(target.prompt(), s, rng, device)?;
        return Ok((z0, SamplingTrace::default(), None));
    }
    stage(observer, "guided sampling through the prior", s.prior_steps);
    let unguided = chosen.map(|c| (&c.sample, c.score));
    models.guided_sample(target, s, (rng, unguided), device, |i, c| {
        observer.progress(Progress::Step(i, c))
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
pub struct After {
    /// Its held-aside score.
    pub score: Score,
    /// The held-out CLIP's cosine of the prior's and the guided latent, when there is one.
    pub held_out: Option<[f32; 2]>,
    /// Whether guidance left the latent as the prior sampled it.
    pub unchanged: bool,
}

impl<'a> Judge<'a> {
    fn new(ctx: &RunContext<'a>, prompt: &'a str) -> Result<Self> {
        let (models, s) = (ctx.models, ctx.settings);
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

    /// The held-aside score of the exported mesh's own views ([`guide::score_mesh`]).
    fn score_mesh(&self, mesh: &mesh::Mesh, device: &Device) -> candle_core::Result<Score> {
        guide::score_mesh(mesh, &self.models.scorer, &self.target, self.side, device)
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

/// What a run made ([`run`]), before it is written ([`Outcome::write`]).
pub struct Outcome<'a> {
    ctx: RunContext<'a>,
    judge: Judge<'a>,
    /// The root generator the run went on with (the chosen candidate's).
    rng: Rng,
    /// The chosen candidate noise, with its unguided sample, when there were several.
    pub noise: Option<Chosen>,
    /// The sampler's output (guided in the sampling modes), where the latent stage started.
    pub prior: Tensor,
    /// The held-aside score of `prior`.
    pub before: Score,
    /// What guided sampling measured.
    pub sampling: SamplingTrace,
    /// The latent stage's result: `guided.latent` is the run's latent.
    pub guided: Guided,
    /// The scores of the run's latent.
    pub after: After,
    stages: StageRecorder,
    /// What the run was made from (`vary`, `edit`), recorded in its report.
    pub lineage: Lineage,
}

impl Outcome<'_> {
    /// The run's latent (what is exported).
    pub fn latent(&self) -> &Tensor {
        &self.guided.latent
    }

    /// Writes the latents, previews, meshes and `report.json` into `out_dir`, telling `observer`.
    pub fn write(mut self, out_dir: &Path, observer: &mut dyn Observer) -> Result<Report> {
        let (z0, z) = (&self.prior, &self.guided.latent);
        let (s, device) = (self.ctx.settings, self.ctx.device);
        let prompt = self.judge.prompt;
        observer.progress(Progress::Stage("writing latents, previews and meshes", 0));
        let mut files = observed(&mut self.stages, stage::LATENTS, observer, |_| {
            write_latents(out_dir, z0, z)
        })?;
        let sheets = Previews::new(self.ctx.models, s, &self.rng);
        let unchanged = self.after.unchanged;
        files.extend(observed(
            &mut self.stages,
            stage::PREVIEWS,
            observer,
            |_| sheets.write(out_dir, z0, z, unchanged),
        )?);
        let decoder = &self.ctx.models.shap_e.decoder;
        let mut export = observed(&mut self.stages, stage::EXPORT, observer, |_| {
            export_mesh(decoder, z, s, device, out_dir, prompt)
        })?;
        let settings = ReportSettings::resolved(s, self.ctx.models, device);
        let latent_sha256 = latent_sha256(z)?;
        let mut mesh_score = None;
        if let Ok(export) = &mut export {
            files.extend(export.files.iter().cloned());
            let record = Provenance {
                version: env!("CARGO_PKG_VERSION").to_string(),
                prompt: prompt.to_string(),
                seed: s.seed,
                weights: self.ctx.models.sources.weights.clone(),
                settings: serde_json::to_value(&settings)?,
                latent_sha256: latent_sha256.clone(),
                iso: export.iso,
                lineage: match self.lineage.command {
                    Some(_) => serde_json::to_value(&self.lineage)?,
                    None => serde_json::Value::Null,
                },
            };
            stamp_glbs(export, &record)?;
            let judge = &self.judge;
            mesh_score = Some(observed(
                &mut self.stages,
                stage::MESH_SCORING,
                observer,
                |_| judge.score_mesh(&export.mesh, device),
            )?);
        }
        let report = self.report(files, export, (settings, latent_sha256, mesh_score))?;
        write_report(out_dir, &report)?;
        Ok(report)
    }

    /// The report of this outcome, with the `files` written, the `export`, the resolved
    /// settings, the latent's SHA-256 and the mesh's held-aside score.
    fn report(
        self,
        files: Vec<PathBuf>,
        export: std::result::Result<ExportReport, String>,
        (settings, latent_sha256, mesh_score): (ReportSettings, String, Option<Score>),
    ) -> Result<Report> {
        let (export, no_mesh) = match export {
            Ok(e) => (Some(e), None),
            Err(reason) => (None, Some(reason)),
        };
        let models = self.ctx.models;
        let stages = &self.stages;
        Ok(Report {
            version: env!("CARGO_PKG_VERSION"),
            prompt: self.judge.prompt.to_string(),
            models: models.sources.clone(),
            settings,
            noise: self.noise.map(|c| c.choice),
            sampling: self.sampling,
            trace: self.guided.trace,
            start: self.guided.start,
            score_before: self.before.score,
            score_after: self.after.score.score,
            cosine_before: self.before.cosine,
            cosine_after: self.after.score.cosine,
            negatives: self.judge.target.negatives(),
            held_out_scores: self.after.held_out,
            seconds: stages.seconds(export.as_ref()),
            peak_optimize_bytes: stages.get(stage::OPTIMIZING).heap_above_start,
            memory_before_export: export
                .as_ref()
                .map(|e| ExportMemory::from(&e.memory_before))
                .unwrap_or_default(),
            memory: stages.memory(models.precision, export.as_ref())?,
            mesh_score: mesh_score.map(|m| m.score),
            mesh_cosine: mesh_score.map(|m| m.cosine),
            iso_level: export.as_ref().map(|e| e.iso.level),
            iso_rule: export.as_ref().map(|e| e.iso.rule),
            latent_sha256,
            asset: export.as_ref().map(|e| e.asset.clone()),
            asset_mesh: export.as_ref().map(|e| e.asset_stats),
            mesh: export.map(|e| e.stats),
            no_mesh,
            files,
            lineage: self.lineage,
        })
    }
}

/// Stamps `record` into the GLB files of `export`, the time it takes counted as writing them.
fn stamp_glbs(export: &mut ExportReport, record: &Provenance) -> Result<()> {
    let t = std::time::Instant::now();
    let is_glb = |f: &PathBuf| f.extension() == Some("glb".as_ref());
    for glb in export.files.iter().filter(|f| is_glb(f)) {
        record.stamp(glb)?;
    }
    let seconds = t.elapsed().as_secs_f64();
    let glb_times = export.format_seconds.iter_mut();
    for (_, s) in glb_times.filter(|(f, _)| *f == mesh::Format::Glb) {
        *s += seconds;
    }
    Ok(())
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

/// Runs `f` as (another part of) stage `name` of `stages`, with `observer` handed to it and told
/// of the stage when it ends.
fn observed<T, E>(
    stages: &mut StageRecorder,
    name: &'static str,
    observer: &mut dyn Observer,
    f: impl FnOnce(&mut dyn Observer) -> Result<T, E>,
) -> Result<T, E>
where
    E: From<candle_core::Error>,
{
    let out = stages.run(name, || f(&mut *observer))?;
    observer.stage(name, &stages.get(name));
    Ok(out)
}
