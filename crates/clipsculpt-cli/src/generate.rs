//! `clipsculpt generate`: one prompt → mesh, previews, latents and `report.json`.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args as ClapArgs;

use crate::args::GenerateArgs;
use crate::context::{default_out, in_private, Context};
use crate::preview::BlenderPreviewArgs;
use crate::progress::StageBar;
use crate::{EXIT_NO_MESH, EXIT_OK, EXIT_PARTIAL};
use clipsculpt::atomic::OutputDir;
use clipsculpt::batch::check_prompt;
use clipsculpt::guide::GuideMode;
use clipsculpt::mesh::IsoRule;
use clipsculpt::pipeline::{self, Report, RunContext};

/// Generate a mesh from one prompt (prior sample + CLIP-guided optimization + export).
#[derive(Debug, ClapArgs)]
pub(super) struct Generate {
    /// The text prompt, e.g. "a red cube" (optional with --settings report.json or mesh.glb, which name one).
    prompt: Option<String>,
    #[command(flatten)]
    settings: GenerateArgs,
    /// Output folder (default `outputs/<slug>-<seed>`); written privately beside it and renamed
    /// into place when complete.
    #[arg(long, help_heading = "Output")]
    out: Option<PathBuf>,
    /// Replace an existing run in the output folder (atomically, once the new one is complete).
    #[arg(long, help_heading = "Output")]
    overwrite: bool,
    #[command(flatten)]
    blender: BlenderPreviewArgs,
}

impl Generate {
    pub(crate) fn run(self, cx: &Context) -> anyhow::Result<ExitCode> {
        let Self {
            prompt,
            settings,
            out,
            overwrite,
            blender,
        } = self;
        let file = settings.run_settings()?;
        let Some(prompt) = prompt.or(file.prompt) else {
            anyhow::bail!("no prompt: give one (clipsculpt generate \"a red cube\"), or --settings a run's report.json or mesh.glb");
        };
        check_prompt(&prompt).map_err(anyhow::Error::msg)?;
        let run = file.settings;
        let blender_exe = blender.find()?;
        let device = cx.open_device()?;
        let out = out.unwrap_or_else(|| default_out(&prompt, run.seed));
        let dir = OutputDir::folder(&out, overwrite)?;
        let models = cx.load_models(&run.models, &device)?;
        if let Some(recorded) = &file.weights {
            warn_other_weights(recorded, &models.sources.weights);
        }
        let ctx = RunContext::new(&models, &run, &device);
        let bar = StageBar::new(cx.quiet);
        // A failed Blender preview does not discard the run: it is kept and reported after the commit.
        let (report, preview) = in_private(&dir, |work| {
            let report = pipeline::generate(&ctx, &prompt, work, |p| bar.update(p))?;
            bar.finish();
            // The error names files in `work`, which becomes `out`.
            let preview = match (&blender_exe, &report.no_mesh) {
                (Some(exe), None) => crate::preview::render_run(
                    exe,
                    work,
                    &clipsculpt::blender::PreviewSettings::default(),
                    cx.quiet,
                )
                .err()
                .map(|e| {
                    crate::error_line(&e).replace(&*work.to_string_lossy(), &out.to_string_lossy())
                }),
                _ => None,
            };
            clipsculpt::gallery::write_gallery(work)?;
            Ok((report, preview))
        })?;
        dir.commit()?;
        if let Some(reason) = &report.no_mesh {
            eprintln!(
                "error: {prompt:?}: no mesh: {reason}; the latents, previews and report.json are in {} ({})",
                out.display(),
                crate::remesh_hint(&out.join("latent.safetensors").to_string_lossy())
            );
            return Ok(ExitCode::from(EXIT_NO_MESH));
        }
        if !cx.quiet {
            println!("{prompt:?}: {} in {}", outcome(&report), out.display());
            eprintln!("time {}", report.seconds.summary());
        }
        if let Some(e) = preview {
            eprintln!(
                "error: {e}; the run is complete in {} (`clipsculpt preview {} --blender` renders the preview again)",
                out.display(),
                out.display()
            );
            return Ok(ExitCode::from(EXIT_PARTIAL));
        }
        Ok(ExitCode::from(EXIT_OK))
    }
}

/// Warns when the weights loaded are not those the settings file's run loaded (by SHA-256): the
/// run will not reproduce it.
fn warn_other_weights(recorded: &BTreeMap<String, String>, loaded: &BTreeMap<String, String>) {
    let differ: Vec<&str> = recorded
        .iter()
        .filter(|(file, hash)| loaded.get(*file) != Some(*hash))
        .map(|(file, _)| file.as_str())
        .collect();
    if !differ.is_empty() {
        tracing::warn!(
            "the weights differ from those of the recorded run ({}): the result will differ from it",
            differ.join(", ")
        );
    }
}

/// What a run's guidance did, in one line.
fn outcome(r: &Report) -> String {
    let latent = format!(
        "latent stage: CLIP cosine {:.3} → {:.3}, score {:.3} → {:.3} (best of {} steps at step {}, {} skipped)",
        r.cosine_before,
        r.cosine_after,
        r.score_before,
        r.score_after,
        r.trace.cosine.len(),
        r.trace.best_step,
        r.trace.skipped
    );
    let first_last = |v: Vec<f32>| match (v.first(), v.last()) {
        (Some(a), Some(b)) => format!("view cosine {a:.3} → {b:.3}"),
        _ => "no finite step".to_string(),
    };
    let sampled = match &r.sampling.end_to_end {
        Some(c) => format!(
            "end to end through the last {} sampler steps (σ {:.2}): {} iterations, {}",
            c.steps,
            c.sigma,
            c.iterations.len(),
            first_last(c.iterations.iter().map(|i| i.cosine).collect()),
        ),
        None => format!(
            "guided sampling: {} guided steps, {}",
            r.sampling.steps.len(),
            first_last(r.sampling.steps.iter().map(|s| s.cosine).collect())
        ),
    };
    let sampled = match r.sampling.keep {
        Some(k) if !k.exported_guided => format!(
            "{sampled} (held-aside {:.3} → {:.3}, short of the keep margin: the unguided sample exported)",
            k.held_aside[0], k.held_aside[1]
        ),
        _ => sampled,
    };
    let score = format!("held-aside score {:.3}", r.score_after);
    let score = match r.mesh_score {
        Some(m) => format!("{score}, mesh {m:.3}"),
        None => score,
    };
    let score = match (r.iso_rule, r.iso_level) {
        (Some(IsoRule::Midpoint), Some(level)) => format!(
            "{score}; no surface at level 0, meshed at level {level:.3} (the midpoint of the field's range)"
        ),
        _ => score,
    };
    match r.settings.run.mode {
        GuideMode::Off => format!("unguided, {score}"),
        GuideMode::Sampling | GuideMode::EndToEnd => format!("{sampled}; {score}"),
        GuideMode::Latent => latent,
        GuideMode::Both => format!("{sampled}; {latent}"),
    }
}
