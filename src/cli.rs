//! Command-line interface: clap arguments, validation into settings, dispatch, exit codes.
//!
//! Exit codes: 0 success; 1 some batch items failed; 2 usage or setup error (bad arguments, bad
//! input files, missing weights, a feature that is not available yet).

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context};
use clap::{Args as ClapArgs, Parser, Subcommand, ValueEnum};

use candle_core::{DType, Device};

use crate::atomic::write_atomic;
use crate::autodiff::checkpoint::Policy;
use crate::autodiff::memory::parse_bytes;
use crate::autodiff::rng::Rng;
use crate::batch::Shard;
use crate::batch::{check_prompt, parse_prompt_file, run_batch, slug};
use crate::device::DeviceSpec;
use crate::guide::GuideSettings;
use crate::mesh::{self, Format};
use crate::models::{HubOptions, ModelKind, ModelSpec};
use crate::pipeline;
use crate::render::{contact_sheet, RenderSettings};
use crate::shap_e::{load_latent, save_latent, ShapE};

/// Exit code: everything succeeded.
pub const EXIT_OK: u8 = 0;
/// Exit code: a batch finished but some items failed (see the manifest).
pub const EXIT_PARTIAL: u8 = 1;
/// Exit code: usage or setup error; nothing was produced.
pub const EXIT_SETUP: u8 = 2;

/// Text prompt → 3D mesh (GLB, PLY, OBJ) via a Shap-E prior and CLIP-guided optimization.
#[derive(Debug, Parser)]
#[command(name = "clipsculpt", version, about, long_about = None)]
#[command(
    after_help = "Exit codes: 0 success, 1 some batch items failed, 2 usage or setup error.\n\
Environment: RUST_LOG (log filter), HF_HOME (hub cache), HF_HUB_OFFLINE=1 (cache only),\n\
SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT or JOB_COMPLETION_INDEX (default --shard for batch)."
)]
pub struct Args {
    #[command(flatten)]
    pub log: LogArgs,
    /// Compute device: cpu, cuda or cuda:N (cuda needs the `cuda` cargo feature).
    #[arg(long, global = true, default_value = "cpu")]
    pub device: DeviceSpec,
    #[command(subcommand)]
    pub command: Command,
}

/// Logging verbosity; `RUST_LOG` overrides both flags.
#[derive(Debug, ClapArgs)]
pub struct LogArgs {
    /// More log output (-v debug, -vv trace).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    pub verbose: u8,
    /// Only errors; no progress bars.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
}

/// Which models to use.
#[derive(Debug, Clone, ClapArgs)]
pub struct ModelArgs {
    /// Shap-E pipeline: `toy` (embedded), a hub id such as openai/shap-e[@revision], or a folder.
    #[arg(long, default_value = "toy")]
    pub model: ModelSpec,
    /// Scoring CLIP: `toy`, a hub id such as openai/clip-vit-base-patch16, or a folder.
    #[arg(long, default_value = "toy")]
    pub clip: ModelSpec,
    /// A second, held-out CLIP that only scores the result (e.g. openai/clip-vit-base-patch32).
    #[arg(long)]
    pub eval_clip: Option<ModelSpec>,
}

/// Settings of one generation (shared by `generate` and `batch`).
#[derive(Debug, Clone, ClapArgs)]
pub struct GenerateArgs {
    #[command(flatten)]
    pub models: ModelArgs,
    /// Random seed (prior noise, cameras, augmentations).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// Prior sampling steps (Heun/Karras).
    #[arg(long, default_value_t = 64)]
    pub prior_steps: usize,
    /// Classifier-free guidance scale of the prior [default: the model's sampling.json, else 15]
    #[arg(long)]
    pub guidance_scale: Option<f64>,
    /// CLIP-guided optimization steps (0 = plain Shap-E).
    #[arg(long, default_value_t = 30)]
    pub steps: usize,
    /// Peak learning rate of the latent optimizer.
    #[arg(long, default_value_t = 0.01)]
    pub lr: f64,
    /// Random views rendered per optimization step.
    #[arg(long, default_value_t = 2)]
    pub views: usize,
    /// Render resolution of each view (pixels per side).
    #[arg(long, default_value_t = 32)]
    pub resolution: usize,
    /// Checkpoint policy for decoder chunks and CLIP blocks: none, blocks, sqrt, every:K, last:N.
    #[arg(long, default_value = "blocks")]
    pub checkpoint: Policy,
    /// Memory budget, e.g. 6GiB: chooses chunk sizes and policy to fit, or refuses up front.
    #[arg(long, value_parser = parse_bytes)]
    pub memory_budget: Option<usize>,
    /// Marching-cubes grid size for the export.
    #[arg(long, default_value_t = 96)]
    pub grid: usize,
    /// Output formats.
    #[arg(long, value_delimiter = ',', default_value = "glb,ply,obj,png")]
    pub formats: Vec<FormatArg>,
    /// Side in pixels of each of the 20 views in the before/after preview sheets.
    #[arg(long, default_value_t = 48)]
    pub preview_size: usize,
}

/// Output formats on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    /// glTF binary (Blender: File ▸ Import ▸ glTF).
    Glb,
    /// Binary little-endian PLY with vertex colours.
    Ply,
    /// OBJ with per-vertex colours.
    Obj,
    /// PNG contact sheet of 8 views.
    Png,
    /// Animated GIF turntable.
    Gif,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Generate a mesh from one prompt (prior sample + CLIP-guided optimization + export).
    Generate {
        /// The text prompt, e.g. "a red cube".
        prompt: String,
        #[command(flatten)]
        settings: GenerateArgs,
        /// Output folder (default outputs/<slug>-<seed>).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Run every prompt of a file (resumable, shardable).
    Batch {
        /// Prompt file: one prompt per line (# comments), or JSONL with prompt/seed/steps/name.
        file: PathBuf,
        #[command(flatten)]
        settings: GenerateArgs,
        /// Output folder of the batch.
        #[arg(long, default_value = "outputs/batch")]
        out: PathBuf,
        /// This machine's shard, INDEX/COUNT (0-based); defaults from Slurm or Kubernetes.
        #[arg(long)]
        shard: Option<Shard>,
        /// Shard count for Kubernetes indexed Jobs (JOB_COMPLETION_INDEX gives the index).
        #[arg(long)]
        shard_count: Option<usize>,
    },
    /// Plain Shap-E sampling without guidance: latent + contact sheet.
    Sample {
        /// The text prompt.
        prompt: String,
        #[command(flatten)]
        models: ModelArgs,
        /// Random seed.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Prior sampling steps.
        #[arg(long, default_value_t = 64)]
        prior_steps: usize,
        /// Classifier-free guidance scale [default: the model's sampling.json, else 15]
        #[arg(long)]
        guidance_scale: Option<f64>,
        /// Output folder (default outputs/<slug>-<seed>).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Decode a saved latent to GLB/PLY/OBJ.
    Export {
        /// A latent saved by `sample` or `generate` (.safetensors).
        latent: PathBuf,
        #[command(flatten)]
        models: ModelArgs,
        /// Marching-cubes grid size.
        #[arg(long, default_value_t = 128)]
        grid: usize,
        /// Output formats.
        #[arg(long, value_delimiter = ',', default_value = "glb,ply,obj,png")]
        formats: Vec<FormatArg>,
        /// Output folder (default: the latent's folder).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Toy-world evaluation: prior-only vs guided shape/colour accuracy, seen vs held-out.
    Eval {
        /// Prompt file of toy captions (e.g. prompts/toy-eval.txt).
        file: PathBuf,
        #[command(flatten)]
        settings: GenerateArgs,
        /// Seeds per prompt.
        #[arg(long, default_value_t = 3)]
        seeds: u64,
        /// Print JSON instead of markdown tables.
        #[arg(long)]
        json: bool,
    },
    /// Train the embedded toy world (decoder, CLIP, prior) from a seed into a folder.
    TrainToy {
        /// Output folder (the embedded default lives in assets/toy).
        #[arg(long, default_value = "outputs/toy")]
        out: PathBuf,
        /// Root seed of every stage.
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// A few combinations and steps: checks the command in seconds (the weights are not useful).
        #[arg(long)]
        quick: bool,
    },
    /// Show a model's configuration and parameter count, and the environment defaults.
    Info {
        /// A CLIP model to describe.
        #[arg(long)]
        clip: Option<ModelSpec>,
        /// A Shap-E pipeline to describe.
        #[arg(long)]
        model: Option<ModelSpec>,
    },
    /// Download a model's files into the Hugging Face cache (HF_HOME).
    Download {
        /// A hub id such as openai/shap-e or openai/clip-vit-base-patch32[@revision].
        spec: ModelSpec,
        /// Which layout to fetch (guessed from the id when absent).
        #[arg(long, value_enum)]
        kind: Option<KindArg>,
    },
}

/// Model layouts on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum KindArg {
    /// A transformers CLIP model.
    Clip,
    /// A diffusers Shap-E pipeline.
    ShapE,
}

/// Environment defaults, read in this one place.
#[derive(Debug, Clone, Default)]
pub struct Env {
    /// `HF_HUB_OFFLINE` is set to a true value.
    pub offline: bool,
}

impl Env {
    /// Reads the process environment.
    pub fn read() -> Env {
        let offline = std::env::var("HF_HUB_OFFLINE")
            .map(|v| {
                matches!(
                    v.trim().to_ascii_lowercase().as_str(),
                    "1" | "true" | "yes" | "on"
                )
            })
            .unwrap_or(false);
        Env { offline }
    }
}

/// Sets up `tracing` from `-v`/`-q`, or from `RUST_LOG` when it is set.
pub fn init_tracing(log: &LogArgs) {
    let default = match (log.quiet, log.verbose) {
        (true, _) => "error",
        (false, 0) => "info",
        (false, 1) => "debug",
        (false, _) => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

/// Runs the parsed command and returns the process exit code.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let env = Env::read();
    let hub = HubOptions {
        offline: env.offline,
        progress: !args.log.quiet,
    };
    match args.command {
        Command::Download { spec, kind } => {
            let kind = match kind {
                Some(KindArg::Clip) => ModelKind::Clip,
                Some(KindArg::ShapE) => ModelKind::ShapE,
                None => ModelKind::guess(&spec),
            };
            let ModelSpec::Hub { .. } = &spec else {
                bail!("`download` takes a hub id such as openai/shap-e, not '{spec}'");
            };
            let dir = crate::models::resolve(&spec, kind, &toy_root(), &hub)
                .with_context(|| format!("downloading {spec}"))?;
            println!("{}", dir.display());
            Ok(ExitCode::from(EXIT_OK))
        }
        Command::TrainToy { out, seed, quick } => {
            use crate::toy::train::{train_toy, ToyTrainSettings, TrainProgress, LOG_FILE};
            let device = args.device.open()?;
            ensure_writable(&out)?;
            let settings = if quick {
                ToyTrainSettings::quick(seed)
            } else {
                ToyTrainSettings::full(seed)
            };
            let bar = std::cell::RefCell::new(spinner(true));
            let log = train_toy(&out, &settings, &device, |p| match p {
                TrainProgress::Stage(name, steps) => {
                    tracing::info!("{name}: {steps} steps");
                    let b = progress(steps as u64, args.log.quiet);
                    b.set_prefix(name);
                    bar.replace(b).finish_and_clear();
                }
                TrainProgress::Step(loss) => {
                    let b = bar.borrow();
                    b.set_message(format!("loss {loss:.4}"));
                    b.inc(1);
                }
            })
            .with_context(|| format!("training the toy world into {}", out.display()))?;
            bar.borrow().finish_and_clear();
            if !args.log.quiet {
                let last = |v: &[f32]| v.last().copied().unwrap_or(f32::NAN);
                println!(
                    "trained into {} in {:.0} s (decoder {:.0} s, CLIP {:.0} s, prior {:.0} s)",
                    out.display(),
                    log.seconds.iter().sum::<f64>(),
                    log.seconds[0],
                    log.seconds[1],
                    log.seconds[2]
                );
                println!(
                    "final losses: decoder {:.4}, CLIP {:.4} (validation accuracy {:.1}%), prior {:.4}; log in {}",
                    last(&log.decoder_loss),
                    last(&log.clip_loss),
                    100.0 * log.clip_accuracy.last().map_or(f32::NAN, |a| a.1),
                    last(&log.prior_loss),
                    out.join(LOG_FILE).display()
                );
            }
            Ok(ExitCode::from(EXIT_OK))
        }
        Command::Info { clip, model } => {
            println!("device: {}", args.device);
            println!(
                "hf cache: HF_HUB_OFFLINE={} (cache in $HF_HOME, default ~/.cache/huggingface)",
                env.offline
            );
            println!("toy models: {}", toy_root().display());
            if let Some(spec) = clip {
                let dir = crate::models::resolve(&spec, ModelKind::Clip, &toy_root(), &hub)
                    .with_context(|| format!("resolving CLIP model {spec}"))?;
                println!("\nCLIP {spec} ({})", dir.display());
                println!(
                    "{}",
                    crate::clip::describe(&dir)
                        .with_context(|| format!("reading {}", dir.display()))?
                );
            }
            if let Some(spec) = model {
                let dir = crate::models::resolve(&spec, ModelKind::ShapE, &toy_root(), &hub)
                    .with_context(|| format!("resolving Shap-E model {spec}"))?;
                println!("\nShap-E {spec} ({})", dir.display());
            }
            Ok(ExitCode::from(EXIT_OK))
        }
        Command::Generate {
            prompt,
            settings,
            out,
        } => {
            check_prompt(&prompt).map_err(anyhow::Error::msg)?;
            let device = args.device.open()?;
            let run = run_settings(&settings, &device)?;
            let out = out.unwrap_or_else(|| {
                PathBuf::from("outputs").join(format!("{}-{}", slug(&prompt), settings.seed))
            });
            ensure_writable(&out)?;
            let models = load_models(&settings.models, &hub, &device)?;
            let bar = StageBar::new(args.log.quiet);
            let report =
                pipeline::generate(&models, &prompt, &run, &out, &device, |p| bar.update(p))?;
            bar.finish();
            if !args.log.quiet {
                println!(
                    "{prompt:?}: CLIP cosine {:.3} → {:.3} ({} steps, {} skipped) in {}",
                    report.score_before,
                    report.score_after,
                    report.trace.cosine.len(),
                    report.trace.skipped,
                    out.display()
                );
            }
            Ok(ExitCode::from(EXIT_OK))
        }
        Command::Batch {
            file,
            settings,
            out,
            shard,
            shard_count,
        } => {
            let parsed = parse_prompt_file(&file)?;
            for e in &parsed.errors {
                eprintln!("error: {e}");
            }
            let shard = match shard {
                Some(s) => s,
                None => {
                    Shard::from_env(|k| std::env::var(k).ok(), shard_count)?.unwrap_or_default()
                }
            };
            let device = args.device.open()?;
            let run = run_settings(&settings, &device)?;
            ensure_writable(&out)?;
            let models = load_models(&settings.models, &hub, &device)?;
            tracing::info!(
                "batch {}: {} prompts, shard {shard}",
                file.display(),
                parsed.items.len()
            );
            let summary = run_batch(&parsed.items, shard, &out, settings.seed, |item, dir| {
                let mut s = run.clone();
                s.seed = item.seed.unwrap_or(settings.seed);
                if let Some(steps) = item.steps {
                    s.guide.steps = steps;
                }
                pipeline::generate(&models, &item.prompt, &s, dir, &device, |_| {})
                    .map(|_| ())
                    .map_err(|e| format!("{e:#}").into())
            })?;
            println!(
                "batch done: {} done, {} already done, {} failed, {} bad lines, {} for other shards",
                summary.done,
                summary.skipped,
                summary.failed,
                parsed.errors.len(),
                summary.other_shards
            );
            let code = if summary.failed > 0 || !parsed.errors.is_empty() {
                EXIT_PARTIAL
            } else {
                EXIT_OK
            };
            Ok(ExitCode::from(code))
        }
        Command::Sample {
            prompt,
            models,
            seed,
            prior_steps,
            guidance_scale,
            out,
        } => {
            check_prompt(&prompt).map_err(anyhow::Error::msg)?;
            let device = args.device.open()?;
            let out = out.unwrap_or_else(|| {
                PathBuf::from("outputs").join(format!("{}-{seed}", slug(&prompt)))
            });
            ensure_writable(&out)?;
            let models = load_models(&models, &hub, &device)?;
            let rng = Rng::new(seed);
            let z = models.sample(
                &prompt,
                prior_steps,
                guidance_scale,
                &mut rng.fork(1),
                &device,
            )?;
            let latent = out.join("latent.safetensors");
            save_latent(&latent, &z)?;
            let settings = RenderSettings {
                n_coarse: 64,
                n_fine: 128,
                chunk_rays: Some(4096),
                background: None,
            };
            let png = contact_sheet(&models.shap_e.decoder, &z, 64, &settings, &mut rng.fork(4))?;
            let sheet = out.join("views.png");
            write_atomic(&sheet, &png).with_context(|| format!("writing {}", sheet.display()))?;
            println!("{}\n{}", latent.display(), sheet.display());
            Ok(ExitCode::from(EXIT_OK))
        }
        Command::Eval {
            file,
            settings,
            seeds,
            json,
        } => {
            let parsed = parse_prompt_file(&file)?;
            if let Some(e) = parsed.errors.first() {
                bail!("{e}");
            }
            let prompts: Vec<String> = parsed.items.into_iter().map(|i| i.prompt).collect();
            let device = args.device.open()?;
            let run = run_settings(&settings, &device)?;
            let models = load_models(&settings.models, &hub, &device)?;
            let seeds: Vec<u64> = (0..seeds).map(|k| settings.seed + k).collect();
            let bar = progress((prompts.len() * seeds.len()) as u64, args.log.quiet);
            bar.set_prefix("evaluating");
            let [prior, guided] =
                pipeline::evaluate(&models, &prompts, &seeds, &run, &device, |p, seed| {
                    bar.set_message(format!("{p} (seed {seed})"));
                    bar.inc(1);
                })?;
            bar.finish_and_clear();
            if json {
                println!(
                    "{{\"prior_only\": {}, \"guided\": {}}}",
                    prior.to_json()?,
                    guided.to_json()?
                );
            } else {
                println!(
                    "## Prior only\n\n{}\n## Guided ({} steps)\n\n{}",
                    prior.to_markdown(),
                    run.guide.steps,
                    guided.to_markdown()
                );
            }
            Ok(ExitCode::from(EXIT_OK))
        }
        Command::Export {
            latent,
            models,
            grid,
            formats,
            out,
        } => {
            let device = args.device.open()?;
            let z = load_latent(&latent, &device)?;
            let dir = crate::models::resolve(&models.model, ModelKind::ShapE, &toy_root(), &hub)?;
            let shap_e = ShapE::load(&dir, DType::F32, &device)
                .with_context(|| format!("loading {}", dir.display()))?;
            let out = out.unwrap_or_else(|| latent.parent().map(PathBuf::from).unwrap_or_default());
            ensure_writable(&out)?;
            let field = pipeline::LatentField {
                decoder: &shap_e.decoder,
                latent: z,
            };
            let report =
                mesh::export_field(&field, &device, grid, &formats_of(&formats), &out, "mesh")?;
            for f in &report.files {
                println!("{}", f.display());
            }
            Ok(ExitCode::from(EXIT_OK))
        }
    }
}

/// Loads the Shap-E pipeline and the scoring CLIP named by `m`.
fn load_models(
    m: &ModelArgs,
    hub: &HubOptions,
    device: &Device,
) -> anyhow::Result<pipeline::Models> {
    let shap_e = crate::models::resolve(&m.model, ModelKind::ShapE, &toy_root(), hub)
        .with_context(|| format!("resolving --model {}", m.model))?;
    let clip = crate::models::resolve(&m.clip, ModelKind::Clip, &toy_root(), hub)
        .with_context(|| format!("resolving --clip {}", m.clip))?;
    let mut models = pipeline::Models::load(&shap_e, &clip, device)?;
    if let Some(spec) = &m.eval_clip {
        let dir = crate::models::resolve(spec, ModelKind::Clip, &toy_root(), hub)
            .with_context(|| format!("resolving --eval-clip {spec}"))?;
        let scorer = crate::clip::ClipScorer::load(&dir, device)
            .with_context(|| format!("loading the held-out CLIP in {}", dir.display()))?;
        models.held_out = Some(scorer);
    }
    Ok(models)
}

/// Validated run settings from the arguments; `--memory-budget` picks the ray chunk and the CLIP
/// policy, or refuses up front.
fn run_settings(a: &GenerateArgs, _device: &Device) -> anyhow::Result<pipeline::RunSettings> {
    if a.resolution < 4 || a.resolution > 1024 {
        bail!("--resolution {} is out of range (4..=1024)", a.resolution);
    }
    if a.views == 0 || a.grid < 8 || a.grid > 512 {
        bail!("--views must be at least 1 and --grid within 8..=512");
    }
    if !(a.lr.is_finite() && a.lr > 0.0) {
        bail!("--lr must be a positive number");
    }
    let samples = (32, 32);
    let rays = a.views * a.resolution * a.resolution;
    let (chunk_rays, clip_policy) = match (a.memory_budget, a.checkpoint) {
        (None, Policy::None) => (None, Policy::None),
        (None, p) => (Some(1024.min(rays)), p),
        (Some(budget), _) => {
            // Per ray while a chunk is recomputed: its samples × the MLP's stored activations and
            // backward temporaries (≈ 8 layers × 4 tensors of width ≤ 256, f32).
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
    };
    let guide = GuideSettings {
        steps: a.steps,
        lr: a.lr,
        views: a.views,
        resolution: a.resolution,
        samples,
        chunk_rays,
        clip_policy,
        ..GuideSettings::default()
    };
    Ok(pipeline::RunSettings {
        seed: a.seed,
        prior_steps: a.prior_steps,
        guidance_scale: a.guidance_scale,
        guide,
        grid: a.grid,
        preview_size: a.preview_size.clamp(8, 512),
        formats: formats_of(&a.formats),
    })
}

fn formats_of(f: &[FormatArg]) -> Vec<Format> {
    f.iter()
        .map(|f| match f {
            FormatArg::Glb => Format::Glb,
            FormatArg::Ply => Format::Ply,
            FormatArg::Obj => Format::Obj,
            FormatArg::Png => Format::PreviewPng,
            FormatArg::Gif => Format::PreviewGif,
        })
        .collect()
}

/// Creates `dir` and proves it writable before any work starts.
fn ensure_writable(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the output folder {}", dir.display()))?;
    let probe = dir.join(".clipsculpt-write-test");
    write_atomic(&probe, b"ok")
        .with_context(|| format!("the output folder {} is not writable", dir.display()))?;
    let _ = std::fs::remove_file(probe);
    Ok(())
}

/// One bar per stage of a run: a spinner while sampling and exporting, a bar with ETA and the
/// current CLIP cosine while optimizing; hidden in quiet mode.
struct StageBar {
    bar: std::cell::RefCell<Option<indicatif::ProgressBar>>,
    quiet: bool,
}

impl StageBar {
    fn new(quiet: bool) -> Self {
        Self {
            bar: std::cell::RefCell::new(None),
            quiet,
        }
    }

    fn update(&self, p: pipeline::Progress) {
        match p {
            pipeline::Progress::Stage(name, steps) => {
                tracing::debug!("stage: {name}");
                let bar = if steps > 0 {
                    progress(steps as u64, self.quiet)
                } else {
                    spinner(self.quiet)
                };
                bar.set_prefix(name);
                if let Some(old) = self.bar.replace(Some(bar)) {
                    old.finish_and_clear();
                }
            }
            pipeline::Progress::Step(_, c) => {
                if let Some(b) = self.bar.borrow().as_ref() {
                    b.set_message(format!("CLIP cosine {c:.3}"));
                    b.inc(1);
                }
            }
        }
    }

    fn finish(&self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

/// A spinner for a stage without countable steps.
fn spinner(quiet: bool) -> indicatif::ProgressBar {
    if quiet {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new_spinner();
    if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} {prefix} {elapsed}") {
        bar.set_style(style);
    }
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar
}

/// A progress bar with ETA, hidden in quiet mode.
fn progress(len: u64, quiet: bool) -> indicatif::ProgressBar {
    if quiet {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} ETA {eta} {msg}")
    {
        bar.set_style(style);
    }
    bar
}

/// The folder of the embedded toy models (`assets/toy` next to the crate, or beside the binary).
pub fn toy_root() -> PathBuf {
    let crate_assets = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("assets")
        .join("toy");
    if crate_assets.is_dir() {
        return crate_assets;
    }
    std::env::current_exe()
        .ok()
        .and_then(|p| p.parent().map(|d| d.join("assets").join("toy")))
        .unwrap_or(crate_assets)
}
