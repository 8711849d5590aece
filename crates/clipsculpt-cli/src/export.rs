//! `clipsculpt export`: decode a saved latent to mesh files.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args as ClapArgs;

use crate::args::{AssetArgs, ModelArgs};
use crate::context::{in_private, Context};
use crate::EXIT_OK;
use clipsculpt::atomic::OutputDir;
use clipsculpt::mesh::{self, AssetOptions, Format};
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
    #[command(flatten)]
    asset: AssetArgs,
    /// Taubin smoothing iterations before simplifying [default: 0]
    #[arg(long, value_name = "N", help_heading = "Mesh")]
    smooth: Option<usize>,
}

impl Export {
    pub(crate) fn run(self, cx: &Context) -> anyhow::Result<ExitCode> {
        if !self.level.is_finite() || self.level.abs() >= 1.0 {
            anyhow::bail!(
                "--level must lie within −1..1 (the field is a tanh), not {}",
                self.level
            );
        }
        let mut asset = AssetOptions::default();
        self.asset.apply(&mut asset);
        asset.smooth = self.smooth.unwrap_or(asset.smooth);
        asset
            .validate()
            .map_err(|e| anyhow::anyhow!("invalid settings: {e}"))?;
        if asset.texture.is_some() && !self.formats.iter().any(|f| f.carries_texture()) {
            anyhow::bail!("--texture needs glb or obj among --formats");
        }
        let device = cx.open_device()?;
        let z = load_latent(&self.latent, &device)?;
        let dir = cx.resolve(&self.models.choice().model, ModelKind::ShapE)?;
        let decoder = Decoder::load_in(&dir, cx.precision(&device).dtype(), &device)
            .with_context(|| format!("loading {}", dir.display()))?;
        let out = self
            .out
            .unwrap_or_else(|| self.latent.parent().map(PathBuf::from).unwrap_or_default());
        let textured = asset.texture.is_some();
        let names: Vec<String> = (self.formats.iter())
            .flat_map(|f| f.file_names("mesh", textured))
            .collect();
        let dir = OutputDir::files(&out, &names, self.overwrite)?;
        in_private(&dir, |work| {
            let field = LatentField::new(&decoder, &z)?;
            let (grid, level) = (self.grid, self.level);
            let formats = &self.formats;
            mesh::export_field(&field, &device, grid, level, &asset, formats, work, "mesh")?;
            Ok(())
        })?;
        dir.commit()?;
        for n in &names {
            println!("{}", out.join(n).display());
        }
        Ok(ExitCode::from(EXIT_OK))
    }
}
