//! `clipsculpt edit`: a saved run continued toward a new prompt.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args as ClapArgs;

use crate::args::GenerateArgs;
use crate::context::{in_private, Context};
use crate::derive::{check_strength, default_out, Start};
use crate::{EXIT_NO_MESH, EXIT_OK};
use clipsculpt::atomic::OutputDir;
use clipsculpt::pipeline::{EditMethod, DEFAULT_STRENGTH};

/// Continue a saved run toward a new prompt (re-noised and sampled back, or guided in latent space).
#[derive(Debug, ClapArgs)]
pub(super) struct Edit {
    /// A run folder (generate, vary, edit, a batch item) or a latent file.
    source: PathBuf,
    /// The new prompt, e.g. "a blue cube".
    prompt: String,
    #[arg(long, help = format!(
        "renoise (re-noise, then sample with the new prompt) or latent (CLIP guidance of the latent itself) \
         [default: {}]", EditMethod::DEFAULT))]
    method: Option<EditMethod>,
    #[arg(long, allow_negative_numbers = true, help = format!(
        "With --method renoise: how much of the latent to re-noise, 0..1 [default: {DEFAULT_STRENGTH}]"))]
    strength: Option<f64>,
    #[command(flatten)]
    settings: GenerateArgs,
    /// Output folder [default: outputs/<slug>-edit-<seed>].
    #[arg(long, help_heading = "Output")]
    out: Option<PathBuf>,
    /// Replace an existing folder (atomically, once the new one is complete).
    #[arg(long, help_heading = "Output")]
    overwrite: bool,
}

impl Edit {
    pub(crate) fn run(self, cx: &Context) -> anyhow::Result<ExitCode> {
        clipsculpt::batch::check_prompt(&self.prompt).map_err(anyhow::Error::msg)?;
        check_strength(self.strength)?;
        let start = Start::load(cx, &self.source, &self.settings)?;
        let method = self.method.unwrap_or(EditMethod::DEFAULT);
        let (s, strength) = method.plan(&start.settings, self.strength);
        let out = self
            .out
            .unwrap_or_else(|| default_out(&self.prompt, "edit", s.seed));
        let dir = OutputDir::folder(&out, self.overwrite)?;
        let report = in_private(&dir, |work| {
            let report = start.run(cx, (&self.prompt, &s, strength), "edit", work)?;
            clipsculpt::gallery::write_gallery(work)?;
            Ok(report)
        })?;
        dir.commit()?;
        if let Some(reason) = &report.no_mesh {
            eprintln!(
                "error: {:?}: no mesh: {reason}; the latents, previews and report.json are in {}",
                self.prompt,
                out.display()
            );
            return Ok(ExitCode::from(EXIT_NO_MESH));
        }
        if !cx.quiet {
            println!(
                "{:?} from {}: {method}, held-aside score {:.3}, in {}",
                self.prompt,
                self.source.display(),
                report.score_after,
                out.display()
            );
        }
        Ok(ExitCode::from(EXIT_OK))
    }
}
