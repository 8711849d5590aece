//! `clipsculpt export`: decode a saved latent to mesh files.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args as ClapArgs;

use crate::args::ModelArgs;
use crate::context::{in_private, Context};
use crate::EXIT_OK;
use clipsculpt::atomic::OutputDir;
use clipsculpt::mesh::{self, Format};
use clipsculpt::models::ModelKind;
use clipsculpt::pipeline::LatentField;
use clipsculpt::shap_e::{load_latent, Decoder};

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
    /// Iso level of the surface in the field's signed distance (tanh-squashed, positive inside, so
    /// within −1..1). Lower it to mesh a latent whose field is nowhere positive: the error names the
    /// field's range.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    level: f32,
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
        if !self.level.is_finite() || self.level.abs() >= 1.0 {
            anyhow::bail!(
                "--level must lie within −1..1 (the field is a tanh), not {}",
                self.level
            );
        }
        let device = cx.open_device()?;
        let z = load_latent(&self.latent, &device)?;
        let dir = cx.resolve(&self.models.choice().model, ModelKind::ShapE)?;
        let decoder = Decoder::load_in(&dir, cx.precision(&device).dtype(), &device)
            .with_context(|| format!("loading {}", dir.display()))?;
        let out = self
            .out
            .unwrap_or_else(|| self.latent.parent().map(PathBuf::from).unwrap_or_default());
        let names: Vec<String> = self.formats.iter().map(|f| f.file_name("mesh")).collect();
        let dir = OutputDir::files(&out, &names, self.overwrite)?;
        in_private(&dir, |work| {
            let field = LatentField::new(&decoder, &z)?;
            let (grid, level) = (self.grid, self.level);
            mesh::export_field(&field, &device, grid, level, &self.formats, work, "mesh")?;
            Ok(())
        })?;
        dir.commit()?;
        for n in &names {
            println!("{}", out.join(n).display());
        }
        Ok(ExitCode::from(EXIT_OK))
    }
}
