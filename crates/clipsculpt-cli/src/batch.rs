//! `clipsculpt batch`: every prompt of a file, resumable and shardable.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args as ClapArgs;

use crate::args::GenerateArgs;
use crate::context::{ensure_writable, Context};
use crate::preview::{render_run, BlenderPreviewArgs};
use crate::{EXIT_OK, EXIT_PARTIAL};
use clipsculpt::batch::{parse_prompt_file, run_batch, Shard};
use clipsculpt::pipeline::{self, RunContext};

/// Run every prompt of a file (resumable, shardable).
#[derive(Debug, ClapArgs)]
pub(super) struct Batch {
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
    #[command(flatten)]
    blender: BlenderPreviewArgs,
}

impl Batch {
    pub(crate) fn run(self, cx: &Context) -> anyhow::Result<ExitCode> {
        let Self {
            file,
            settings,
            out,
            shard,
            shard_count,
            blender,
        } = self;
        let blender_exe = blender.find()?;
        let parsed = parse_prompt_file(&file)?;
        for e in &parsed.errors {
            eprintln!("error: {e}");
        }
        let shard = match shard {
            Some(s) => s,
            None => Shard::from_env(|k| std::env::var(k).ok(), shard_count)?.unwrap_or_default(),
        };
        let device = cx.open_device()?;
        let run = settings.run_settings()?.settings;
        ensure_writable(&out)?;
        let models = cx.load_models(&run.models, &device)?;
        tracing::info!(
            "batch {}: {} prompts, shard {shard}",
            file.display(),
            parsed.items.len()
        );
        let summary = run_batch(&parsed.items, shard, &out, run.seed, |item, dir| {
            let mut s = run.clone();
            s.seed = item.seed.unwrap_or(run.seed);
            if let Some(steps) = item.steps {
                s.guide.steps = steps;
            }
            pipeline::generate(
                &RunContext::new(&models, &s, &device),
                &item.prompt,
                dir,
                |_| {},
            )
            .and_then(|report| match report.no_mesh {
                Some(reason) => Err(anyhow::anyhow!(
                    "no mesh: {reason}; {}",
                    crate::remesh_hint("<folder>/latent.safetensors")
                )),
                None => Ok(()),
            })
            .and_then(|_| match &blender_exe {
                Some(exe) => render_run(
                    exe,
                    dir,
                    &clipsculpt::blender::PreviewSettings::default(),
                    true,
                ),
                None => Ok(()),
            })
            .map_err(|e| crate::error_line(&e).into())
        })?;
        println!(
            "batch done: {} done, {} already done, {} failed, {} bad lines, {} for other shards, {} run by another process",
            summary.done,
            summary.skipped,
            summary.failed,
            parsed.errors.len(),
            summary.other_shards,
            summary.running_elsewhere
        );
        if summary.failed > 0 && !cx.quiet {
            eprintln!(
                "the failed items' reasons are in the manifest in {}, and anything they wrote is in their \
                 <id>.failed/ folders there; the same command run again retries them",
                out.display()
            );
        }
        let code = if summary.failed > 0 || !parsed.errors.is_empty() {
            EXIT_PARTIAL
        } else {
            EXIT_OK
        };
        Ok(ExitCode::from(code))
    }
}
