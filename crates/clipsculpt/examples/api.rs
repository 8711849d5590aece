//! The library's public API, used from outside the crate as an application would: load the models of
//! `RunSettings::default()` (the embedded toy world), generate a mesh for one prompt with exactly the
//! settings of `clipsculpt generate PROMPT`, and read the report. `tests/facade.rs` runs this file's
//! [`run`] and compares its latent with the CLI's; `cargo run --release --example api [OUT_DIR]` runs it
//! (about 10 s on a CPU).

use std::path::{Path, PathBuf};

use anyhow::Result;
use candle_core::Device;
use clipsculpt::device::Precision;
use clipsculpt::models::HubOptions;
use clipsculpt::pipeline::{generate, Models, Progress, Report, RunContext, RunSettings};

/// Generates `prompt` into `out` with the default settings on the CPU.
pub fn run(prompt: &str, out: &Path) -> Result<Report> {
    let settings = RunSettings::default();
    let device = Device::Cpu;
    let precision = Precision::default_for(&device);
    let models = Models::load_choice(&settings.models, &device, precision, &HubOptions::default())?;
    let ctx = RunContext::new(&models, &settings, &device);
    generate(&ctx, prompt, out, |p| {
        if let Progress::Stage(name, _) = p {
            eprintln!("{name}");
        }
    })
}

#[allow(dead_code)] // `tests/facade.rs` includes this file for `run` alone.
fn main() -> Result<()> {
    let out: PathBuf = std::env::args().nth(1).map_or_else(
        || std::env::temp_dir().join("clipsculpt-api"),
        PathBuf::from,
    );
    let report = run("a red cube", &out)?;
    let Some(mesh) = report.mesh else {
        anyhow::bail!("no mesh: {}", report.no_mesh.unwrap_or_default());
    };
    println!(
        "score {:.3} → {:.3}, {} vertices, {} files in {}",
        report.score_before,
        report.score_after,
        mesh.vertices,
        report.files.len(),
        out.display()
    );
    Ok(())
}
