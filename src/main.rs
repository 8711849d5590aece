//! The `clipsculpt` command-line entry point: parse, set up logging, dispatch, print the error once.

use std::process::ExitCode;

use clap::Parser;

/// Counts live heap bytes so run reports can state the peak memory of each stage.
#[global_allocator]
static ALLOC: clipsculpt::autodiff::memory::CountingAlloc =
    clipsculpt::autodiff::memory::CountingAlloc;

fn main() -> ExitCode {
    clipsculpt::autodiff::memory::keep_freed_pages();
    let args = clipsculpt::cli::Args::parse();
    clipsculpt::cli::init_tracing(&args);
    match clipsculpt::cli::run(args) {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {}", clipsculpt::cli::error_line(&err));
            ExitCode::from(clipsculpt::cli::EXIT_SETUP)
        }
    }
}
