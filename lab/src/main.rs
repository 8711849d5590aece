//! `clipsculpt-lab`: the toy world's research harness (training, evaluation, random-weight
//! models for GPU checks), built on the `clipsculpt` library's public API.

mod cli;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use clipsculpt::device::{DeviceSpec, Precision};

/// Counts live heap bytes so reports can state peak memory.
#[global_allocator]
static ALLOC: clipsculpt::autodiff::memory::CountingAlloc =
    clipsculpt::autodiff::memory::CountingAlloc;

/// Exit code: everything succeeded.
pub(crate) const EXIT_OK: u8 = 0;
/// Exit code: usage or setup error.
const EXIT_SETUP: u8 = 2;

/// The toy world's research harness: train worlds, evaluate guidance, write random-weight models.
#[derive(Debug, Parser)]
#[command(name = "clipsculpt-lab", version, about, long_about = None)]
struct Args {
    /// Compute device: cpu, cuda or cuda:N (cuda needs the `cuda` cargo feature).
    #[arg(long, global = true, default_value = "cpu")]
    device: DeviceSpec,
    /// Dtype of the frozen networks' matrix weights [default: bf16 on CUDA, f32 on the CPU].
    #[arg(long, global = true)]
    dtype: Option<Precision>,
    /// Only errors; no progress bars.
    #[arg(short, long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Toy-world evaluation: prior-only vs guided shape/colour accuracy, seen vs held-out.
    Eval(Box<cli::eval::Eval>),
    /// Train a toy world (decoder, CLIP, prior) from a seed into a folder.
    TrainToy(cli::train_toy::TrainToy),
    /// Write random-weight Shap-E and CLIP folders at published sizes (GPU timing and memory checks).
    RandomModels(cli::random_models::RandomModels),
}

fn main() -> ExitCode {
    clipsculpt::autodiff::memory::keep_freed_pages();
    clipsculpt::device::flush_subnormals();
    let args = Args::parse();
    let filter = if args.quiet { "error" } else { "info" };
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(filter));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
    let cx = cli::context::Context {
        device: args.device,
        dtype: args.dtype,
        quiet: args.quiet,
    };
    let result = match args.command {
        Command::Eval(c) => (*c).run(&cx),
        Command::TrainToy(c) => c.run(&cx),
        Command::RandomModels(c) => c.run(&cx),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::from(EXIT_SETUP)
        }
    }
}
