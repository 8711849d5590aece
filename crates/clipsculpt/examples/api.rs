//! The library's public API, used from outside the crate: load the embedded toy models, generate
//! a mesh for one prompt, and read the report. `cargo test` compiles this file, so the facade
//! stays usable; `cargo run --release --example api [OUT_DIR]` runs it (about a minute on a CPU).

use std::path::{Path, PathBuf};

use anyhow::Result;
use candle_core::Device;
use clipsculpt::guide::GuideSettings;
use clipsculpt::mesh::Format;
use clipsculpt::pipeline::{generate, Models, Progress, Report, RunSettings};

fn main() -> Result<()> {
    let out: PathBuf = std::env::args().nth(1).map_or_else(
        || std::env::temp_dir().join("clipsculpt-api"),
        PathBuf::from,
    );
    let toy = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../assets/toy");
    let device = Device::Cpu;
    let models = Models::load(&toy.join("shap_e"), &toy.join("clip"), &device)?;
    let guide = GuideSettings {
        steps: 4,
        ..GuideSettings::default()
    };
    let settings = RunSettings {
        formats: vec![Format::Ply, Format::Obj],
        ..RunSettings::for_evaluation(guide)
    };
    let report: Report = generate(&models, "a red cube", &settings, &out, &device, |p| {
        if let Progress::Stage(name, _) = p {
            eprintln!("{name}");
        }
    })?;
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
