//! The `clipsculpt` command-line entry point: the counting allocator, then [`clipsculpt::cli::main`]
//! (parse, set up logging, dispatch, print the error once).

use std::process::ExitCode;

/// Counts live heap bytes so run reports can state the peak memory of each stage.
#[global_allocator]
static ALLOC: clipsculpt::autodiff::memory::CountingAlloc =
    clipsculpt::autodiff::memory::CountingAlloc;

fn main() -> ExitCode {
    clipsculpt::autodiff::memory::keep_freed_pages();
    clipsculpt::cli::main()
}
