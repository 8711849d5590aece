//! Why guidance does or does not fix the prior's held-out samples (toy world): see
//! `clipsculpt_lab::probe::diagnose` (`src/toy/probe/diagnose.rs`) for what it prints.
//!
//! `cargo bench --bench diagnose [-- --seeds N]` (`TOY_DIR=DIR` for another toy world;
//! `-- --fitted-only`, `-- --clip`, `-- --clip-only`, `-- --seed-spread`).

fn main() -> anyhow::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    clipsculpt_lab::probe::diagnose(&args)
}
