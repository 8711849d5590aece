//! `clipsculpt info`: the environment defaults and a description of the models named, or what a
//! GLB that `generate` wrote says about itself.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args as ClapArgs;

use crate::context::Context;
use crate::EXIT_OK;
use clipsculpt::models::{ModelKind, ModelSpec};
use clipsculpt::pipeline::Provenance;

/// Show a model's configuration and parameter count, and the environment defaults; or, given a
/// GLB, the prompt, seed, models, settings and latent hash that made it.
#[derive(Debug, ClapArgs)]
pub(super) struct Info {
    /// A mesh.glb written by `generate`: print its provenance record.
    #[arg(conflicts_with_all = ["clip", "model"])]
    glb: Option<PathBuf>,
    /// A CLIP model to describe.
    #[arg(long)]
    clip: Option<ModelSpec>,
    /// A Shap-E pipeline to describe.
    #[arg(long)]
    model: Option<ModelSpec>,
}

impl Info {
    pub(crate) fn run(self, cx: &Context) -> anyhow::Result<ExitCode> {
        if let Some(glb) = &self.glb {
            println!("{}", Provenance::read(glb)?.describe());
            return Ok(ExitCode::from(EXIT_OK));
        }
        println!("device: {}", cx.device);
        println!(
            "hf cache: HF_HUB_OFFLINE={} (cache in $HF_HOME, default ~/.cache/huggingface)",
            cx.hub.offline
        );
        if cfg!(feature = "cuda") {
            let cache = clipsculpt::device::kernel_cache::folder_from_env();
            println!(
                "{}",
                clipsculpt::device::kernel_cache::describe(cache.as_deref())
            );
        }
        match cx.resolve(&ModelSpec::Toy, ModelKind::ShapE) {
            Ok(dir) => println!(
                "toy models: embedded, unpacked in {}",
                dir.parent().unwrap_or(&dir).display()
            ),
            Err(e) => println!("toy models: embedded, but {e:#}"),
        }
        if let Some(spec) = self.clip {
            let dir = cx
                .resolve(&spec, ModelKind::Clip)
                .with_context(|| format!("resolving CLIP model {spec}"))?;
            println!("\nCLIP {spec} ({})", dir.display());
            let text = clipsculpt::clip::describe(&dir)
                .with_context(|| format!("reading {}", dir.display()))?;
            println!("{text}");
        }
        if let Some(spec) = self.model {
            let dir = cx
                .resolve(&spec, ModelKind::ShapE)
                .with_context(|| format!("resolving Shap-E model {spec}"))?;
            println!("\nShap-E {spec} ({})", dir.display());
            let text = clipsculpt::shap_e::describe(&dir)
                .with_context(|| format!("reading {}", dir.display()))?;
            println!("{text}");
            let encoder = dir.join("text_encoder");
            match clipsculpt::clip::describe(&encoder) {
                Ok(d) => {
                    println!("  text encoder:");
                    d.lines().for_each(|l| println!("    {l}"));
                }
                Err(e) => println!("  text encoder: {e}"),
            }
        }
        Ok(ExitCode::from(EXIT_OK))
    }
}
