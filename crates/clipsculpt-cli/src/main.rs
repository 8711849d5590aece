//! The `clipsculpt` command: clap arguments, validation into settings, dispatch, exit codes. One
//! file per subcommand; shared arguments in [`args`], model loading and output folders in
//! [`context`], progress bars in [`progress`].
//!
//! Exit codes: 0 success; 1 some batch items failed; 2 usage or setup error (bad arguments, bad
//! input files, missing weights, a feature that is not available yet).

mod addon;
mod args;
mod batch;
mod blend;
mod context;
mod derive;
mod download;
mod edit;
mod export;
mod gallery;
mod generate;
mod info;
mod preview;
mod progress;
mod sample;
mod vary;

use std::process::ExitCode;

use clap::{Args as ClapArgs, Parser, Subcommand};

use clipsculpt::device::{DeviceSpec, Precision};
use context::Context;

/// Exit code: everything succeeded.
pub const EXIT_OK: u8 = 0;
/// Exit code: a batch finished but some items failed (see the manifest), or `generate` wrote its run but its
/// Blender preview failed.
pub const EXIT_PARTIAL: u8 = 1;
/// Exit code: usage or setup error; nothing was produced.
pub const EXIT_SETUP: u8 = 2;
/// Exit code: `generate` wrote its latents, previews and `report.json`, but the latent has no surface to mesh.
pub const EXIT_NO_MESH: u8 = 3;

/// Text prompt → 3D mesh (GLB, PLY, OBJ) via a Shap-E prior and CLIP-guided optimization.
#[derive(Debug, Parser)]
#[command(name = "clipsculpt", version, about, long_about = None)]
#[command(
    after_help = "Exit codes: 0 success, 1 some batch items failed, 2 usage or setup error,\n\
3 generate found no surface to mesh (latents, previews and report.json written).\n\
Environment: RUST_LOG (log filter), HF_HOME (hub cache), HF_HUB_OFFLINE=1 (cache only),\n\
SLURM_ARRAY_TASK_ID/SLURM_ARRAY_TASK_COUNT or JOB_COMPLETION_INDEX (default --shard for batch),\n\
BLENDER (the Blender executable for previews)."
)]
pub struct Args {
    #[command(flatten)]
    log: LogArgs,
    /// Compute device: cpu, cuda or cuda:N (cuda needs the `cuda` cargo feature).
    #[arg(long, global = true, default_value = "cpu")]
    device: DeviceSpec,
    /// Dtype of the frozen networks' matrix weights: f32, bf16 or f16 [default: bf16 on CUDA,
    /// f32 on the CPU]; norms, softmax, loss, compositing, the latent and Adam stay f32.
    #[arg(long, global = true)]
    dtype: Option<Precision>,
    #[command(subcommand)]
    command: Command,
}

/// Logging verbosity; `RUST_LOG` overrides both flags.
#[derive(Debug, ClapArgs)]
struct LogArgs {
    /// More log output (-v debug, -vv trace).
    #[arg(short, long, global = true, action = clap::ArgAction::Count)]
    verbose: u8,
    /// Only errors; no progress bars.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    quiet: bool,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Generate a mesh from one prompt (prior sample + CLIP-guided optimization + export).
    Generate(generate::Generate),
    /// Run every prompt of a file (resumable, shardable).
    Batch(batch::Batch),
    /// Plain Shap-E sampling without guidance: latent + contact sheet.
    Sample(sample::Sample),
    /// Decode a saved latent to GLB/PLY/OBJ.
    Export(export::Export),
    /// Show a model's configuration and parameter count, and the environment defaults; or a GLB's provenance.
    Info(info::Info),
    /// Download a model's files into the Hugging Face cache (HF_HOME).
    Download(download::Download),
    /// Render a run (or a mesh file) in Blender: vertex-colour material, camera, soft light, still or turntable.
    Preview(preview::Preview),
    /// Write index.html for a folder of runs (a batch, the runs of vary, or one run): opens from disk, offline.
    Gallery(gallery::Gallery),
    /// Variations of a saved run: its latent re-noised and sampled back with the run's guidance.
    Vary(vary::Vary),
    /// Continue a saved run toward a new prompt.
    Edit(edit::Edit),
    /// Blend two saved latents (slerp): a mesh per step, a contact sheet and a GIF.
    Blend(blend::Blend),
    /// Write the Blender add-on's zip (a sidebar panel that runs clipsculpt and imports the result), or --install it.
    BlenderAddon(addon::BlenderAddon),
}

/// Sets up `tracing` from `-v`/`-q`, or from `RUST_LOG` when it is set.
pub fn init_tracing(args: &Args) {
    let default = match (args.log.quiet, args.log.verbose) {
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

/// How to mesh a saved latent whose field has no surface at level 0.
pub fn remesh_hint(latent: &str) -> String {
    format!("`clipsculpt export {latent} --level L`, with the run's `--model`, meshes it at another level")
}

/// An error as one line: its chain of causes joined by `: `, each cause once (a cause already
/// spelled out by the message above it is not repeated), line breaks folded into `; `.
pub fn error_line(err: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in err.chain() {
        let text = cause.to_string();
        let text = text.trim();
        if text.is_empty() || line.ends_with(text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(text);
    }
    if let Some(hint) = io_hint(err).or_else(|| gpu_memory_hint(&line)) {
        if !line.contains(hint) {
            line.push_str("; ");
            line.push_str(hint);
        }
    }
    let mut one = String::new();
    for l in line.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if !one.is_empty() {
            one.push_str(if one.ends_with(':') { " " } else { "; " });
        }
        one.push_str(l);
    }
    one
}

/// The fix for an error caused by a full or read-only disk.
fn io_hint(err: &anyhow::Error) -> Option<&'static str> {
    let os = err
        .chain()
        .filter_map(|c| c.downcast_ref::<std::io::Error>())
        .find_map(std::io::Error::raw_os_error)?;
    match os {
        libc::ENOSPC | libc::EDQUOT => {
            Some("free some disk space (or choose another --out) and run again")
        }
        libc::EROFS => {
            Some("make the output folder writable (or choose another --out) and run again")
        }
        _ => None,
    }
}

/// The fix for a GPU that ran out of memory (the driver's or cuBLAS's error, as candle words it).
fn gpu_memory_hint(line: &str) -> Option<&'static str> {
    ["CUDA_ERROR_OUT_OF_MEMORY", "CUBLAS_STATUS_ALLOC_FAILED"]
        .iter()
        .any(|code| line.contains(code))
        .then_some(
            "the GPU ran out of memory: pass --memory-budget with what the GPU has free, keep \
             --checkpoint and --prior-checkpoint at blocks, or lower --views or --resolution, and \
             run again",
        )
}

/// Makes writing to a closed pipe (`clipsculpt info | head -1`) end the process quietly, as it does
/// for other command-line tools, instead of panicking in `println!`. Rust starts programs with
/// SIGPIPE ignored; sockets are unaffected (the standard library sends with `MSG_NOSIGNAL`), and
/// every output folder is written atomically, so a run ended this way leaves nothing partial.
fn quiet_on_closed_pipe() {
    // SAFETY: called first in `main`, before any other thread exists; SIG_DFL is a valid handler.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

/// Counts live heap bytes so run reports can state the peak memory of each stage.
#[global_allocator]
static ALLOC: clipsculpt::autodiff::memory::CountingAlloc =
    clipsculpt::autodiff::memory::CountingAlloc;

/// The whole program: parses the command line, sets up logging, runs the command and returns
/// its exit code; a failure is printed once, as one line, and exits with [`EXIT_SETUP`].
fn main() -> ExitCode {
    clipsculpt::autodiff::memory::keep_freed_pages();
    clipsculpt::device::flush_subnormals();
    quiet_on_closed_pipe();
    let args = Args::parse();
    init_tracing(&args);
    match run(args) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {}", error_line(&err));
            ExitCode::from(EXIT_SETUP)
        }
    }
}

/// Runs the parsed command and returns the process exit code.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let cx = Context::new(args.device, args.dtype, args.log.quiet);
    match args.command {
        Command::Generate(c) => c.run(&cx),
        Command::Batch(c) => c.run(&cx),
        Command::Sample(c) => c.run(&cx),
        Command::Export(c) => c.run(&cx),
        Command::Info(c) => c.run(&cx),
        Command::Download(c) => c.run(&cx),
        Command::Preview(c) => c.run(&cx),
        Command::Gallery(c) => c.run(&cx),
        Command::Vary(c) => c.run(&cx),
        Command::Edit(c) => c.run(&cx),
        Command::Blend(c) => c.run(&cx),
        Command::BlenderAddon(c) => c.run(),
    }
}

#[cfg(test)]
mod tests {
    use crate::*;

    #[derive(Debug, thiserror::Error)]
    #[error("writing {path}: {source}")]
    struct Embeds {
        path: String,
        source: std::io::Error,
    }

    /// A cause that its parent already prints (thiserror's `{source}` in the message) appears
    /// once; multi-line messages become one line.
    #[test]
    fn error_line_names_each_cause_once() {
        let io = std::io::Error::from_raw_os_error(libc::ENOSPC);
        let e = anyhow::Error::new(Embeds {
            path: "out/mesh.glb".into(),
            source: io,
        })
        .context("exporting the mesh");
        let line = error_line(&e);
        assert_eq!(line.matches("out/mesh.glb").count(), 1, "{line}");
        assert!(
            line.starts_with("exporting the mesh: writing out/mesh.glb: No space left on device"),
            "{line}"
        );
        assert!(
            line.ends_with("free some disk space (or choose another --out) and run again"),
            "{line}"
        );
        let multi = anyhow::anyhow!("3 problems:\n  a\n  b").context("loading");
        assert_eq!(error_line(&multi), "loading: 3 problems: a; b");
    }

    /// A GPU out of memory (as candle words cudarc's error) gets the flags that lower memory; other
    /// driver errors get no such hint.
    #[test]
    fn gpu_out_of_memory_names_the_fix() {
        let oom = anyhow::anyhow!(r#"DriverError(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")"#)
            .context("guided sampling");
        let line = error_line(&oom);
        assert!(line.starts_with("guided sampling: DriverError"), "{line}");
        assert!(line.contains("--memory-budget"), "{line}");
        let other = anyhow::anyhow!(r#"DriverError(CUDA_ERROR_ILLEGAL_ADDRESS, "illegal")"#);
        assert!(!error_line(&other).contains("--memory-budget"));
    }
}
