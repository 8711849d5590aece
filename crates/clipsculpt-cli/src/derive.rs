//! What `vary` and `edit` share: reading the saved run they start from, its settings, and running one derived run
//! (re-noised start, guidance, files, `report.json` with the parent) into a folder.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use candle_core::Device;

use crate::args::GenerateArgs;
use crate::context::Context;
use crate::progress::StageBar;
use clipsculpt::pipeline::{
    self, load_parent, Lineage, LoadedParent, Models, Renoise, Report, RunContext, RunSettings,
};

/// A saved run to start from, with the settings to go on with and the loaded models, all checked before anything
/// is written.
pub(crate) struct Start {
    pub(crate) parent: LoadedParent,
    pub(crate) settings: RunSettings,
    pub(crate) models: Models,
    pub(crate) device: Device,
}

impl Start {
    /// Reads `source` (a run folder or a latent), takes its report's settings (unless `--settings`) with `args`
    /// applied, loads the models and checks the latent's shape against them.
    pub(crate) fn load(cx: &Context, source: &Path, args: &GenerateArgs) -> anyhow::Result<Self> {
        let device = cx.open_device()?;
        let parent = load_parent(source, &device)?;
        let mut settings = args.run_settings_over(parent.report.as_deref())?.settings;
        settings.candidates = 1;
        let models = cx.load_models(&settings.models, &device)?;
        pipeline::renoise::check_latent(&parent.latent, &models)
            .with_context(|| format!("{}", source.display()))?;
        Ok(Self {
            parent,
            settings,
            models,
            device,
        })
    }

    /// The parent's prompt, or `prompt` when given; an error when neither is known.
    pub(crate) fn prompt(&self, prompt: Option<String>) -> anyhow::Result<String> {
        prompt
            .or_else(|| self.parent.parent.prompt.clone())
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "{} has no report.json naming its prompt; give one with --prompt",
                    self.parent.parent.source
                )
            })
    }

    /// Runs `prompt` from the parent re-noised at `strength` with `settings` into `dir`, recording `command`.
    pub(crate) fn run(
        &self,
        cx: &Context,
        (prompt, settings, strength): (&str, &RunSettings, f64),
        command: &str,
        dir: &Path,
    ) -> anyhow::Result<Report> {
        let from = Renoise::new(self.parent.latent.clone(), strength, &self.models)?;
        let ctx = RunContext::new(&self.models, settings, &self.device).with_renoise(&from);
        let bar = StageBar::new(cx.quiet);
        let mut observer = |p| bar.update(p);
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let mut outcome = pipeline::run(&ctx, prompt, &mut observer)?;
        outcome.lineage = Lineage {
            command: Some(command.to_string()),
            strength: Some(strength),
            t: None,
            parents: vec![self.parent.parent.clone()],
        };
        let report = outcome.write(dir, &mut observer)?;
        bar.finish();
        Ok(report)
    }
}

/// `outputs/<slug>-<what>-<seed>`, the default output folder of a derived run.
pub(crate) fn default_out(prompt: &str, what: &str, seed: u64) -> PathBuf {
    PathBuf::from("outputs").join(format!("{}-{what}-{seed}", clipsculpt::batch::slug(prompt)))
}

/// Refuses a `--strength` outside `[0, 1]` (before anything is read or written).
pub(crate) fn check_strength(strength: Option<f64>) -> anyhow::Result<()> {
    strength.map_or(Ok(()), pipeline::renoise::check_strength)
}
