//! The whole job, composed from the stages: text conditioning → prior sampling → CLIP-guided
//! optimization → mesh extraction and export. Each stage lives in its own module; this file only
//! wires them together and records what happened (`report.json`).

use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{Context, Result};
use candle_core::{DType, Device, Tensor};
use serde::Serialize;

use crate::atomic::write_atomic;
use crate::autodiff::memory;
use crate::autodiff::rng::Rng;
use crate::clip::{
    load_text_with_projection_with_dtype, ClipScorer, ClipTextModelWithProjection, ClipTokenizer,
};
use crate::device::memory::{self as device_memory, Meter, Trim};
use crate::device::{device_name, Precision};
use crate::guide::{self, GuideSettings, GuideTrace, StartChoice, Target};
use crate::mesh::{self, ExportReport, Field, Format};
use crate::render::{contact_sheet, preview_settings};
use crate::shap_e::{save_latent, Decoder, FieldQuery, ShapE};

/// The random streams of a run, forked from its root generator `Rng::new(seed)`: the same
/// stream numbers give `generate`, `sample` and `eval` the same draws for the same seed.
pub mod stream {
    /// The prior's initial noise.
    pub const PRIOR: u64 = 1;
    /// The guided optimization (cameras, backgrounds, crops).
    pub const GUIDE: u64 = 3;
    /// The before/after preview contact sheets.
    pub const PREVIEW: u64 = 4;
    /// Exploration: the bank's prior noise and the probes' draws.
    pub const EXPLORE: u64 = 5;
}

/// Where a run's models came from (folders), for reports.
#[derive(Debug, Clone, Serialize)]
pub struct ModelSources {
    /// The Shap-E pipeline folder.
    pub shap_e: String,
    /// The scoring-CLIP folder.
    pub clip: String,
}

/// The models of a run, loaded once (a batch reuses them for every item).
pub struct Models {
    /// Prior, scheduler and decoder.
    pub shap_e: ShapE,
    /// The prior's CLIP text tower.
    pub text_encoder: ClipTextModelWithProjection,
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
    pub load_seconds: f64,
    /// The dtype of the frozen networks' matrix weights.
    pub precision: Precision,
    /// Peak bytes while loading ([`device_memory::peak_bytes`]).
    pub load_peak_bytes: u64,
}

impl Models {
    /// Loads a Shap-E pipeline folder and a scoring-CLIP folder in the device's default
    /// precision ([`Precision::default_for`]: bf16 on CUDA, f32 on the CPU).
    pub fn load(shap_e_dir: &Path, clip_dir: &Path, device: &Device) -> Result<Models> {
        Self::load_with_precision(shap_e_dir, clip_dir, device, Precision::default_for(device))
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
        let dtype = precision.dtype();
        let shap_e = ShapE::load(shap_e_dir, dtype, device)
            .with_context(|| format!("loading the Shap-E pipeline in {}", shap_e_dir.display()))?;
        let text_dir = shap_e_dir.join("text_encoder");
        let text_encoder = load_text_with_projection_with_dtype(&text_dir, dtype, device)
            .with_context(|| {
                format!("loading the prior's text encoder in {}", text_dir.display())
            })?;
        let tok_dir = shap_e_dir.join("tokenizer");
        let tokenizer = ClipTokenizer::from_dir(&tok_dir, 77)
            .with_context(|| format!("loading the prior's tokenizer in {}", tok_dir.display()))?;
        let scorer = ClipScorer::load_with_dtype(clip_dir, dtype, device)
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
            },
            load_seconds: start.elapsed().as_secs_f64(),
            precision,
            load_peak_bytes: device_memory::peak_bytes(device)?,
        })
    }

    /// The prior's raw CLIP text embedding `(1, dim)` of `prompt`.
    pub fn text_embeds(&self, prompt: &str, device: &Device) -> Result<Tensor> {
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

    /// The exploration bank of a run ([`guide::start`]): the prior sampled, in one batch of
    /// [`GuideSettings::explore_prior_steps`] sampler steps, for every negative prompt other than
    /// `prompt` (stream [`stream::EXPLORE`]); `None` without negatives or with exploration off.
    pub fn sample_bank(
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
    /// ([`guide::choose_start`]), then the loop refines it ([`guide::optimize`]). `generate` and
    /// `eval` both go through here.
    pub fn guide(
        &self,
        target: &Target,
        z0: guide::Start<'_>,
        s: &RunSettings,
        rng: &Rng,
        device: &Device,
        on_step: impl FnMut(usize, f32),
    ) -> Result<(Tensor, GuideTrace, StartChoice)> {
        let decoder = &self.shap_e.decoder;
        let t = std::time::Instant::now();
        let bank = self.sample_bank(target.prompt(), s, rng, device)?;
        let explore = rng.fork(stream::EXPLORE);
        let (start, mut choice) = guide::choose_start(
            decoder,
            &self.scorer,
            target,
            z0,
            bank.as_ref(),
            &s.guide,
            &explore,
        )?;
        choice.seconds = t.elapsed().as_secs_f64();
        let start = guide::Start {
            latent: &start,
            score: choice.start_score,
        };
        let (z, trace) = guide::optimize(
            decoder,
            &self.scorer,
            target,
            start,
            &s.guide,
            &mut rng.fork(stream::GUIDE),
            on_step,
        )?;
        Ok((z, trace, choice))
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

/// The decoder's SDF and colour as a mesh field (sRGB colours linearised for the writers).
pub struct LatentField<'a> {
    /// The latent's field query, prepared once (no graph).
    query: FieldQuery<'a>,
}

impl<'a> LatentField<'a> {
    /// The field of `latent` (detached) under `decoder`.
    pub fn new(decoder: &'a Decoder, latent: &Tensor) -> candle_core::Result<Self> {
        Ok(Self {
            query: decoder.field(&latent.detach())?,
        })
    }
}

impl Field for LatentField<'_> {
    fn eval(&self, points: &Tensor) -> candle_core::Result<(Tensor, Tensor)> {
        let (sdf, rgb) = self.query.query(points)?;
        Ok((sdf, mesh::colour::srgb_to_linear_tensor(&rgb)?))
    }

    fn eval_scalar(&self, points: &Tensor) -> candle_core::Result<Tensor> {
        self.query.query_sdf(points)
    }
}

/// The coloured mesh of a plain latent (no graph): grid sampling, marching cubes and vertex
/// colours, as the export does.
pub fn extract_mesh(
    decoder: &Decoder,
    latent: &Tensor,
    grid: usize,
    device: &Device,
) -> Result<mesh::Mesh> {
    let field = LatentField::new(decoder, latent)?;
    let g = mesh::sample_grid(&field, device, grid, mesh::Bounds::SHAP_E, 4096)?;
    let mut m = mesh::marching_cubes(&g, 0.0, mesh::McMode::Exact)?;
    m.colours = mesh::sample_colours(&field, device, &m.positions, 4096)?;
    Ok(m)
}

/// Settings of one `generate` item (written into `report.json`, the guidance settings flattened).
#[derive(Debug, Clone, Serialize)]
pub struct RunSettings {
    /// Seed of every random draw.
    pub seed: u64,
    /// Prior sampling steps.
    pub prior_steps: usize,
    /// Prior guidance scale; `None`: the model's recommendation ([`crate::shap_e::SamplingDefaults`]).
    pub guidance_scale: Option<f64>,
    /// Optimization settings.
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
    /// Settings for evaluating guidance without writing files: seed 0, 64 prior steps, the
    /// model's recommended guidance scale, a 64³ mesh grid, 64 px previews, no output formats.
    pub fn for_evaluation(guide: GuideSettings) -> Self {
        Self {
            seed: 0,
            prior_steps: 64,
            guidance_scale: None,
            guide,
            grid: 64,
            preview_size: 64,
            formats: vec![],
        }
    }
}

/// The settings a run used, as `report.json` records them.
#[derive(Debug, Clone, Serialize)]
pub struct ReportSettings {
    /// The run's settings, with the guidance scale resolved to the one used.
    #[serde(flatten)]
    pub run: RunSettings,
    /// The device it ran on (`cpu`, `cuda:0`).
    pub device: String,
    /// The frozen networks' matrix-weight dtype (`--dtype`: f32, bf16, f16).
    pub dtype: Precision,
}

/// Peak bytes in use during each stage of a run (absolute: the models' weights included),
/// as [`device_memory::peak_bytes`] measures them.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct StagePeakBytes {
    /// Loading the models (once per process).
    pub loading: u64,
    /// Text conditioning and prior sampling.
    pub sampling: u64,
    /// The before/after scores (the larger of the two).
    pub scoring: u64,
    /// CLIP-guided optimization.
    pub optimizing: u64,
    /// Writing the latents and the preview sheets.
    pub previews: u64,
    /// The graph-free export (grid, surface, colours, files), after the cache release.
    pub export: u64,
}

/// The `memory` section of `report.json`.
#[derive(Debug, Clone, Serialize)]
pub struct MemorySection {
    /// The device: `cpu`, or the GPU's name, ordinal and compute capability.
    pub device: String,
    /// What the figures measure: the host heap (CPU) or the CUDA memory pool.
    pub meter: Meter,
    /// The frozen networks' matrix-weight dtype.
    pub dtype: Precision,
    /// Peak bytes per stage.
    pub peak_bytes: StagePeakBytes,
    /// Reserved/used/free bytes before and after the cache release that precedes the export.
    pub export_release: Trim,
}

/// Wall-clock seconds per stage of a run; the stages and `other` add up to `total`.
#[derive(Debug, Clone, Serialize)]
pub struct StageSeconds {
    /// Loading the models (once per process: every item of a batch reports the same load).
    pub loading: f64,
    /// Text conditioning and prior sampling.
    pub sampling: f64,
    /// The scoring CLIP's text embedding and the before/after (and held-out) scores.
    pub scoring: f64,
    /// Exploration: the bank (the prior sampled for the negatives), its completions and their
    /// scores ([`guide::choose_start`]).
    pub exploring: f64,
    /// CLIP-guided optimization (without exploration).
    pub optimizing: f64,
    /// Writing the prior's and the final latent.
    pub latents: f64,
    /// The two 20-view preview sheets (`preview_prior.png`, `preview.png`).
    pub previews: f64,
    /// Sampling the field on the export grid.
    pub mesh_grid: f64,
    /// Marching cubes.
    pub mesh_surface: f64,
    /// Vertex colours from the field.
    pub mesh_colours: f64,
    /// Writing each export file, by file name.
    pub files: std::collections::BTreeMap<String, f64>,
    /// Everything else (creating the folder, progress reporting, bookkeeping).
    pub other: f64,
    /// Loading plus the run's wall time up to writing `report.json`.
    pub total: f64,
}

impl StageSeconds {
    /// The stages `[loading, sampling, scoring, exploring, optimizing, latents, previews]`, the
    /// export's own timings, and the `total`; `other` is what the stages leave of it.
    fn tally(stages: [f64; 7], export: &ExportReport, total: f64) -> Self {
        let [loading, sampling, scoring, exploring, optimizing, latents, previews] = stages;
        let [mesh_grid, mesh_surface, mesh_colours, _] = export.seconds;
        let files: std::collections::BTreeMap<String, f64> = export
            .format_seconds
            .iter()
            .map(|(f, secs)| (f.file_name("mesh"), *secs))
            .collect();
        let counted = stages.iter().sum::<f64>()
            + mesh_grid
            + mesh_surface
            + mesh_colours
            + files.values().sum::<f64>();
        Self {
            loading,
            sampling,
            scoring,
            exploring,
            optimizing,
            latents,
            previews,
            mesh_grid,
            mesh_surface,
            mesh_colours,
            files,
            other: (total - counted).max(0.0),
            total,
        }
    }
}

/// What a run wrote to `report.json`.
#[derive(Debug, Serialize)]
pub struct Report {
    /// clipsculpt version.
    pub version: &'static str,
    /// The prompt.
    pub prompt: String,
    /// Model folders.
    pub models: ModelSources,
    /// Seed, steps and other settings.
    pub settings: ReportSettings,
    /// Per-step CLIP cosine and loss, skipped steps.
    pub trace: GuideTrace,
    /// How exploration chose the start (bank scores, probes, the winner).
    pub start: StartChoice,
    /// Held-aside score ([`guide::Score`]) of the prior's latent: four fixed views, minus the
    /// CLIP term (the bare cosine without negatives).
    pub score_before: f32,
    /// The same of the exported latent (the best one, never below `score_before`).
    pub score_after: f32,
    /// Mean scoring-CLIP cosine to the prompt of the same views, before.
    pub cosine_before: f32,
    /// After.
    pub cosine_after: f32,
    /// Negative prompts the CLIP term contrasted against.
    pub negatives: usize,
    /// The held-out CLIP's cosine before and after, when one was given.
    pub held_out_scores: Option<[f32; 2]>,
    /// Seconds per stage.
    pub seconds: StageSeconds,
    /// Peak heap bytes of the optimization (counting allocator; 0 when not installed).
    pub peak_optimize_bytes: usize,
    /// Memory in use when the export started, after optimization state was dropped (host heap;
    /// device free/total under CUDA).
    pub memory_before_export: String,
    /// Device, dtype, peak bytes per stage and the cache release before the export.
    pub memory: MemorySection,
    /// Mesh statistics.
    pub mesh: mesh::MeshStats,
    /// Files written.
    pub files: Vec<PathBuf>,
}

/// Progress of a run, for bars and logs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Progress {
    /// A stage begins: its name and its number of steps (0 when it has none to count).
    Stage(&'static str, usize),
    /// An optimization step ended with this mean CLIP cosine.
    Step(usize, f32),
}

/// Whether two tensors have the same shape and bitwise-equal values (compared as f32).
fn same_values(a: &Tensor, b: &Tensor) -> Result<bool> {
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

/// Runs the whole job for `prompt` into `out_dir`, reporting progress through `on_progress`.
pub fn generate(
    models: &Models,
    prompt: &str,
    s: &RunSettings,
    out_dir: &Path,
    device: &Device,
    mut on_progress: impl FnMut(Progress),
) -> Result<Report> {
    let start = Instant::now();
    let since = |t: Instant| t.elapsed().as_secs_f64();
    std::fs::create_dir_all(out_dir).with_context(|| format!("creating {}", out_dir.display()))?;
    let rng = Rng::new(s.seed);
    let mut peaks = StagePeakBytes {
        loading: models.load_peak_bytes,
        ..StagePeakBytes::default()
    };
    on_progress(Progress::Stage("sampling the prior", 0));
    let t0 = Instant::now();
    device_memory::reset_peak(device)?;
    let z0 = models.run_sample(prompt, s, &rng, device)?;
    peaks.sampling = device_memory::peak_bytes(device)?;
    let t_sample = since(t0);
    let decoder = &models.shap_e.decoder;
    let t_score = Instant::now();
    device_memory::reset_peak(device)?;
    let target = Target::new(&models.scorer, prompt, &models.negatives, s.guide.contrast)?;
    let score_res = s.guide.eval_side(models.scorer.image_size());
    let before = guide::score(decoder, &models.scorer, &target, &z0, score_res)?;
    peaks.scoring = device_memory::peak_bytes(device)?;
    let mut t_scoring = since(t_score);

    on_progress(Progress::Stage("optimizing", s.guide.steps));
    let t1 = Instant::now();
    let meter = memory::PeakMeter::start();
    device_memory::reset_peak(device)?;
    let (z, trace, start_choice) = if s.guide.steps == 0 {
        (z0.clone(), GuideTrace::default(), StartChoice::default())
    } else {
        let prior = guide::Start {
            latent: &z0,
            score: Some(before.score),
        };
        models.guide(&target, prior, s, &rng, device, |step, c| {
            on_progress(Progress::Step(step, c))
        })?
    };
    peaks.optimizing = device_memory::peak_bytes(device)?;
    let peak_optimize_bytes = meter.peak_above_base();
    let t_opt = since(t1);
    let t_explore = start_choice.seconds;
    let t_score = Instant::now();
    // Scores and previews are deterministic functions of the latent (fixed cameras and draws),
    // so when guidance left the latent unchanged (`--steps 0`) the prior's are reused.
    let unchanged = same_values(&z0, &z)?;
    device_memory::reset_peak(device)?;
    let after = if unchanged {
        before
    } else {
        guide::score(decoder, &models.scorer, &target, &z, score_res)?
    };
    let held_out_scores = match &models.held_out {
        Some(h) => {
            let t = Target::new(h, prompt, &[], 0.0)?;
            let res = h.image_size();
            let prior = guide::score(decoder, h, &t, &z0, res)?.cosine;
            let guided = if unchanged {
                prior
            } else {
                guide::score(decoder, h, &t, &z, res)?.cosine
            };
            Some([prior, guided])
        }
        None => None,
    };
    peaks.scoring = peaks.scoring.max(device_memory::peak_bytes(device)?);
    t_scoring += since(t_score);

    on_progress(Progress::Stage("writing latents, previews and meshes", 0));
    let t_latents = Instant::now();
    device_memory::reset_peak(device)?;
    let mut files = Vec::new();
    for (name, latent) in [
        ("latent_prior.safetensors", &z0),
        ("latent.safetensors", &z),
    ] {
        let p = out_dir.join(name);
        save_latent(&p, latent).with_context(|| format!("writing {}", p.display()))?;
        files.push(p);
    }
    let t_latents = since(t_latents);
    let t_previews = Instant::now();
    let preview = preview_settings();
    let mut prior_png = None;
    for (name, latent) in [("preview_prior.png", &z0), ("preview.png", &z)] {
        let png = match prior_png.take() {
            Some(png) if unchanged => png,
            _ => contact_sheet(
                decoder,
                latent,
                s.preview_size,
                &preview,
                &mut rng.fork(stream::PREVIEW),
            )?,
        };
        let p = out_dir.join(name);
        write_atomic(&p, &png).with_context(|| format!("writing {}", p.display()))?;
        files.push(p);
        prior_png = Some(png);
    }
    let t_previews = since(t_previews);
    peaks.previews = device_memory::peak_bytes(device)?;
    let field = LatentField::new(decoder, &z)?;
    // The export releases the device's cached memory first (which leaves the bytes in use as
    // they are, so resetting the mark here measures the export alone).
    device_memory::reset_peak(device)?;
    let export: ExportReport =
        mesh::export_field(&field, device, s.grid, &s.formats, out_dir, "mesh")
            .with_context(|| format!("exporting the mesh of {prompt:?}"))?;
    peaks.export = device_memory::peak_bytes(device)?;
    files.extend(export.files.iter().cloned());
    let report = Report {
        version: env!("CARGO_PKG_VERSION"),
        prompt: prompt.to_string(),
        models: models.sources.clone(),
        settings: ReportSettings {
            run: RunSettings {
                guidance_scale: Some(
                    s.guidance_scale
                        .unwrap_or(models.shap_e.sampling.guidance_scale as f64),
                ),
                guide: GuideSettings {
                    resolution: s.guide.render_side(models.scorer.image_size()),
                    eval_resolution: score_res,
                    ..s.guide.clone()
                },
                ..s.clone()
            },
            device: device_name(device),
            dtype: models.precision,
        },
        trace,
        start: start_choice,
        score_before: before.score,
        score_after: after.score,
        cosine_before: before.cosine,
        cosine_after: after.cosine,
        negatives: target.negatives(),
        held_out_scores,
        seconds: StageSeconds::tally(
            [
                models.load_seconds,
                t_sample,
                t_scoring,
                t_explore,
                (t_opt - t_explore).max(0.0),
                t_latents,
                t_previews,
            ],
            &export,
            models.load_seconds + since(start),
        ),
        peak_optimize_bytes,
        memory_before_export: export.memory_before.to_string(),
        memory: MemorySection {
            device: device_memory::device_label(device)?,
            meter: device_memory::meter(device),
            dtype: models.precision,
            peak_bytes: peaks,
            export_release: export.memory_before.trim,
        },
        mesh: export.stats,
        files,
    };
    let p = out_dir.join("report.json");
    write_atomic(&p, serde_json::to_string_pretty(&report)?.as_bytes())
        .with_context(|| format!("writing {}", p.display()))?;
    Ok(report)
}
