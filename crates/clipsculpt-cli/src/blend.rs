//! `clipsculpt blend`: spherical interpolation between two saved latents, meshed step by step.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args as ClapArgs;

use crate::args::GenerateArgs;
use crate::context::{in_private, Context};
use crate::derive::Start;
use crate::EXIT_OK;
use clipsculpt::atomic::{write_atomic, OutputDir};
use clipsculpt::pipeline::blend::{write_blend, GIF_FILE, SHEET_FILE};
use clipsculpt::pipeline::load_parent;

/// Blend two saved latents (slerp): the meshes of each step, a contact sheet and a GIF.
#[derive(Debug, ClapArgs)]
pub(super) struct Blend {
    /// The first run folder or latent file.
    a: PathBuf,
    /// The second run folder or latent file.
    b: PathBuf,
    /// Steps, the two ends included.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(2..=64))]
    steps: u32,
    /// Models, grid and formats (the other settings do not apply) [default: the first run's].
    #[command(flatten)]
    settings: GenerateArgs,
    /// Output folder [default: outputs/blend-<a>-<b>].
    #[arg(long, help_heading = "Output")]
    out: Option<PathBuf>,
    /// Replace an existing folder (atomically, once the new one is complete).
    #[arg(long, help_heading = "Output")]
    overwrite: bool,
}

impl Blend {
    pub(crate) fn run(self, cx: &Context) -> anyhow::Result<ExitCode> {
        let a = Start::load(cx, &self.a, &self.settings)?;
        let b = load_parent(&self.b, &a.device)?;
        clipsculpt::pipeline::renoise::check_latent(&b.latent, &a.models)
            .with_context(|| format!("{}", self.b.display()))?;
        let name = |p: &PathBuf| {
            p.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        let out = self.out.clone().unwrap_or_else(|| {
            PathBuf::from("outputs").join(clipsculpt::batch::slug(&format!(
                "blend {} {}",
                name(&self.a),
                name(&self.b)
            )))
        });
        let dir = OutputDir::folder(&out, self.overwrite)?;
        let parents = [(&a.parent.latent, &a.parent.parent), (&b.latent, &b.parent)];
        in_private(&dir, |work| {
            let steps = write_blend(
                &a.models,
                &a.settings,
                parents,
                self.steps as usize,
                work,
                &a.device,
            )?;
            let summary = serde_json::json!({
                "version": env!("CARGO_PKG_VERSION"),
                "command": "blend",
                "title": format!("blend of {} and {}", self.a.display(), self.b.display()),
                "interpolation": "slerp over the flattened latent",
                "parents": [&a.parent.parent, &b.parent],
                "steps": steps.iter().enumerate().map(|(i, s)| serde_json::json!({
                    "folder": format!("step-{i:02}"), "t": s.t, "latent_sha256": s.latent_sha256,
                    "no_mesh": s.no_mesh,
                })).collect::<Vec<_>>(),
                "files": [SHEET_FILE, GIF_FILE],
            });
            let p = work.join("report.json");
            write_atomic(&p, serde_json::to_string_pretty(&summary)?.as_bytes())?;
            clipsculpt::gallery::write_gallery(work)?;
            Ok(())
        })?;
        dir.commit()?;
        if !cx.quiet {
            println!(
                "blend of {} and {} in {} steps: {} ({SHEET_FILE}, {GIF_FILE}, index.html)",
                self.a.display(),
                self.b.display(),
                self.steps,
                out.display()
            );
        }
        Ok(ExitCode::from(EXIT_OK))
    }
}
