//! The options `generate` and `batch` share, in headed groups, and how they make [`RunSettings`]:
//! a settings file (or [`RunSettings::default`]), then each option given on the command line.
//! Every default comes from the library; every other setting is reachable through `--settings`.

use std::path::PathBuf;

use clap::Args as ClapArgs;
use clipsculpt::autodiff::memory::parse_bytes;
use clipsculpt::guide::GuideMode;
use clipsculpt::mesh::{AssetOptions, Format};
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

/// A number or none (`full`, `none`, `off`), as an option's value.
#[derive(Debug, Clone, Copy)]
pub(crate) struct OrNone<T>(Option<T>);

/// `N`, or `full`/`none`/`off` for none.
fn parse_limit<T: std::str::FromStr>(s: &str) -> Result<OrNone<T>, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "full" | "none" | "off" => Ok(OrNone(None)),
        t => t
            .parse()
            .map(|v| OrNone(Some(v)))
            .map_err(|_| format!("{s:?} is not a number (or none)")),
    }
}

/// A default that may be "none", in help text.
fn or_none(v: Option<impl std::fmt::Display>) -> String {
    v.map_or("none".into(), |v| v.to_string())
}

fn a() -> AssetOptions {
    AssetOptions::default()
}

/// What the exported mesh becomes (`generate`, `batch`, `export`; `docs/mesh.md`). Smoothing, off by
/// default, is set with `--settings` (`"smooth": N`) or `export --smooth`.
#[derive(Debug, Clone, ClapArgs)]
pub(super) struct AssetArgs {
    #[arg(long, help_heading = "Mesh", value_parser = parse_limit::<usize>, help = with_default(
        "Simplify the mesh to about N triangles (full: as extracted)", or_none(a().faces)))]
    faces: Option<OrNone<usize>>,
    #[arg(long, value_name = "SIZE", help_heading = "Mesh", value_parser = parse_limit::<u32>,
        help = with_default("Bake the colour into a SIZE² PNG texture (GLB and OBJ)", or_none(a().texture)))]
    texture: Option<OrNone<u32>>,
    #[arg(long, value_name = "METRES", help_heading = "Mesh", allow_negative_numbers = true,
        value_parser = parse_limit::<f32>, help = with_default(
        "Height of the object, origin at its base centre (none: the field's units)", or_none(a().height)))]
    height: Option<OrNone<f32>>,
}

impl AssetArgs {
    /// `opts` with the options given here.
    pub(crate) fn apply(&self, opts: &mut AssetOptions) {
        set(&mut opts.faces, self.faces.map(|v| v.0));
        set(&mut opts.texture, self.texture.map(|v| v.0));
        set(&mut opts.height, self.height.map(|v| v.0));
    }
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
    #[command(flatten)]
    asset: AssetArgs,
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
        self.asset.apply(&mut s.asset);
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
