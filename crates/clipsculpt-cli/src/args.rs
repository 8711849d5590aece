//! The options `generate` and `batch` share, in headed groups, and how they make [`RunSettings`]:
//! a settings file (or [`RunSettings::default`]), then each option given on the command line.
//! Every default comes from the library; every other setting is reachable through `--settings`.

use std::path::PathBuf;

use clap::Args as ClapArgs;
use clipsculpt::autodiff::memory::parse_bytes;
use clipsculpt::guide::GuideMode;
use clipsculpt::mesh::Format;
use clipsculpt::models::ModelSpec;
use clipsculpt::pipeline::{ModelChoice, RunSettings, SettingsFile};

/// `text`, then the library's default in clap's style.
fn with_default(text: &str, default: impl std::fmt::Display) -> String {
    format!("{text} [default: {default}]")
}

fn d() -> RunSettings {
    RunSettings::default()
}

/// Help of `--formats`, with the default list.
fn formats_help() -> String {
    let list: Vec<String> = d().formats.iter().map(Format::to_string).collect();
    with_default("Output files: glb, ply, obj, png, gif", list.join(","))
}

/// Which models to use (`generate`, `batch`, `sample`, `export`).
#[derive(Debug, Clone, ClapArgs)]
pub(super) struct ModelArgs {
    #[arg(long, help_heading = "Models", help = with_default(
        "Shap-E pipeline: toy (embedded), a hub id such as openai/shap-e[@revision], or a folder",
        d().models.model))]
    model: Option<ModelSpec>,
    #[arg(long, help_heading = "Models", help = with_default(
        "Scoring CLIP that guides: toy, a hub id such as openai/clip-vit-base-patch16, or a folder",
        d().models.clip))]
    clip: Option<ModelSpec>,
}

impl ModelArgs {
    /// `choice` with the models given here.
    pub(crate) fn apply(&self, choice: &mut ModelChoice) {
        set(&mut choice.model, self.model.clone());
        set(&mut choice.clip, self.clip.clone());
    }

    /// The default models with the ones given here.
    pub(crate) fn choice(&self) -> ModelChoice {
        let mut choice = ModelChoice::default();
        self.apply(&mut choice);
        choice
    }
}

/// Settings of one generation (shared by `generate` and `batch`).
#[derive(Debug, Clone, ClapArgs)]
pub(super) struct GenerateArgs {
    #[command(flatten)]
    models: ModelArgs,
    /// A second, held-out CLIP that only scores the result (e.g. openai/clip-vit-base-patch32)
    #[arg(long, help_heading = "Models")]
    eval_clip: Option<ModelSpec>,
    #[arg(long, help_heading = "Guidance", help = with_default(
        "Where CLIP guidance acts: sampling (through the prior's sampler), latent (the finished \
         latent), both, end-to-end (the sampler's last steps), or off (plain Shap-E)",
        d().mode))]
    guide: Option<GuideMode>,
    #[arg(long, help_heading = "Guidance", help = with_default(
        "Random seed (prior noise, cameras, augmentations)", d().seed))]
    pub(crate) seed: Option<u64>,
    /// Classifier-free guidance scale of the prior [default: the model's sampling.json, else 15]
    #[arg(long, help_heading = "Guidance")]
    guidance_scale: Option<f64>,
    #[arg(long, help_heading = "Memory and speed", help = with_default(
        "Prior sampling steps (Heun/Karras); fewer is faster and rougher", d().prior_steps))]
    prior_steps: Option<usize>,
    /// Memory budget, e.g. 6GiB: chooses chunk sizes and checkpoint policies to fit, or refuses up front
    #[arg(long, help_heading = "Memory and speed", value_parser = parse_bytes)]
    memory_budget: Option<usize>,
    /// Settings JSON, or a run's report.json or mesh.glb to repeat that run (its prompt too);
    /// options given here override it. Every setting without an option is set this way
    #[arg(long, help_heading = "Output")]
    settings: Option<PathBuf>,
    #[arg(long, help_heading = "Output", value_delimiter = ',', help = formats_help())]
    formats: Option<Vec<Format>>,
    #[arg(long, help_heading = "Output", help = with_default(
        "Marching-cubes grid of the mesh (8..=512)", d().grid))]
    grid: Option<usize>,
}

impl GenerateArgs {
    /// The settings file (or the defaults) with every option given here applied, validated; the
    /// file's prompt when it is a report.
    pub(crate) fn run_settings(&self) -> anyhow::Result<SettingsFile> {
        self.run_settings_over(None)
    }

    /// [`Self::run_settings`] with `base` (a run's `report.json`) in place of the defaults when no
    /// `--settings` is given.
    pub(crate) fn run_settings_over(
        &self,
        base: Option<&std::path::Path>,
    ) -> anyhow::Result<SettingsFile> {
        let mut file = match self.settings.as_deref().or(base) {
            Some(path) => RunSettings::read(path)?,
            None => SettingsFile {
                settings: RunSettings::default(),
                prompt: None,
                weights: None,
            },
        };
        let s = &mut file.settings;
        self.models.apply(&mut s.models);
        if self.eval_clip.is_some() {
            s.models.eval_clip = self.eval_clip.clone();
        }
        set(&mut s.mode, self.guide);
        set(&mut s.seed, self.seed);
        if self.guidance_scale.is_some() {
            s.guidance_scale = self.guidance_scale;
        }
        set(&mut s.prior_steps, self.prior_steps);
        set(&mut s.formats, self.formats.clone());
        set(&mut s.grid, self.grid);
        if let Some(budget) = self.memory_budget {
            s.fit_memory_budget(budget)?;
        }
        s.validate()
            .map_err(|e| anyhow::anyhow!("invalid settings: {e}"))?;
        Ok(file)
    }
}

/// `*slot = value` when one was given.
fn set<T>(slot: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *slot = v;
    }
}
