//! `clipsculpt export`: decode a saved latent to mesh files.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args as ClapArgs;

use super::args::ModelArgs;
use super::context::{in_private, Context};
use super::EXIT_OK;
use crate::atomic::OutputDir;
use crate::mesh::{self, Format};
use crate::models::ModelKind;
use crate::pipeline::LatentField;
use crate::shap_e::{load_latent, Decoder};

/// Decode a saved latent to GLB/PLY/OBJ.
#[derive(Debug, ClapArgs)]
pub(super) struct Export {
    /// A latent saved by `sample` or `generate` (.safetensors).
    latent: PathBuf,
    #[command(flatten)]
    models: ModelArgs,
    /// Marching-cubes grid size.
    #[arg(long, default_value_t = 128)]
    grid: usize,
    /// Output formats.
    #[arg(long, value_delimiter = ',', default_value = "glb,ply,obj,png")]
    formats: Vec<Format>,
    /// Output folder (default: the latent's folder); the files are written privately and
    /// moved in when complete.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Replace mesh files of the same names already in the output folder.
    #[arg(long)]
    overwrite: bool,
}

impl Export {
    pub(crate) fn run(self, cx: &Context) -> anyhow::Result<ExitCode> {
        let device = cx.open_device()?;
        let z = load_latent(&self.latent, &device)?;
        let dir = cx.resolve(&self.models.model, ModelKind::ShapE)?;
        let decoder = Decoder::load_in(&dir, cx.precision(&device).dtype(), &device)
            .with_context(|| format!("loading {}", dir.display()))?;
        let out = self
            .out
            .unwrap_or_else(|| self.latent.parent().map(PathBuf::from).unwrap_or_default());
        let names: Vec<String> = self.formats.iter().map(|f| f.file_name("mesh")).collect();
        let dir = OutputDir::files(&out, &names, self.overwrite)?;
        in_private(&dir, |work| {
            let field = LatentField::new(&decoder, &z)?;
            mesh::export_field(&field, &device, self.grid, &self.formats, work, "mesh")?;
            Ok(())
        })?;
        dir.commit()?;
        for n in &names {
            println!("{}", out.join(n).display());
        }
        Ok(ExitCode::from(EXIT_OK))
    }
}
