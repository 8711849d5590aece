//! `clipsculpt vary`: variations of a saved run (its latent re-noised and sampled back with its settings).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args as ClapArgs;

use crate::args::GenerateArgs;
use crate::context::{in_private, Context};
use crate::derive::{check_strength, default_out, Start};
use crate::{EXIT_OK, EXIT_PARTIAL};
use clipsculpt::atomic::OutputDir;
use clipsculpt::pipeline::DEFAULT_STRENGTH;

/// Variations of a saved run: its latent re-noised to --strength and sampled back with the run's guidance.
#[derive(Debug, ClapArgs)]
pub(super) struct Vary {
    /// A run folder (generate, vary, edit, a batch item) or a latent file.
    source: PathBuf,
    /// How many variations.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=64))]
    count: u32,
    #[arg(long, allow_negative_numbers = true, help = format!(
        "How much of the latent to re-noise, 0..1: 0 returns it unchanged, 1 is a new sample [default: {DEFAULT_STRENGTH}]"))]
    strength: Option<f64>,
    /// The prompt to sample toward [default: the run's].
    #[arg(long)]
    prompt: Option<String>,
    #[command(flatten)]
    settings: GenerateArgs,
    /// Output folder [default: outputs/<slug>-vary-<seed>]; variation i in vary-NN/, its seed the run's + 1 + i.
    #[arg(long, help_heading = "Output")]
    out: Option<PathBuf>,
    /// Replace an existing folder (atomically, once the new one is complete).
    #[arg(long, help_heading = "Output")]
    overwrite: bool,
}

impl Vary {
    pub(crate) fn run(self, cx: &Context) -> anyhow::Result<ExitCode> {
        check_strength(self.strength)?;
        let start = Start::load(cx, &self.source, &self.settings)?;
        let prompt = start.prompt(self.prompt)?;
        clipsculpt::batch::check_prompt(&prompt).map_err(anyhow::Error::msg)?;
        let strength = self.strength.unwrap_or(DEFAULT_STRENGTH);
        let base = start.settings.seed;
        let out = self
            .out
            .unwrap_or_else(|| default_out(&prompt, "vary", base));
        let dir = OutputDir::folder(&out, self.overwrite)?;
        let no_mesh = in_private(&dir, |work| {
            let mut no_mesh = 0;
            for i in 0..u64::from(self.count) {
                let mut s = start.settings.clone();
                s.seed = base + 1 + i;
                let folder = work.join(format!("vary-{i:02}"));
                let report = start.run(cx, (&prompt, &s, strength), "vary", &folder)?;
                no_mesh += usize::from(report.no_mesh.is_some());
            }
            clipsculpt::gallery::write_gallery(work)?;
            Ok(no_mesh)
        })?;
        dir.commit()?;
        if !cx.quiet {
            println!(
                "{prompt:?}: {} variation(s) at strength {strength} in {} (index.html)",
                self.count,
                out.display()
            );
        }
        if no_mesh > 0 {
            eprintln!("error: {no_mesh} variation(s) have no surface to mesh (their report.json says why)");
            return Ok(ExitCode::from(EXIT_PARTIAL));
        }
        Ok(ExitCode::from(EXIT_OK))
    }
}
