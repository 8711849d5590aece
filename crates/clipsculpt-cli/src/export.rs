//! `clipsculpt export`: decode a saved latent to mesh files.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args as ClapArgs;

use crate::args::{AssetArgs, ModelArgs};
use crate::context::{in_private, Context};
use crate::EXIT_OK;
use clipsculpt::atomic::OutputDir;
use clipsculpt::mesh::{self, AssetOptions, Format, IsoRule, Level};
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
    /// within −1..1) [default: 0 where the field crosses it, else the midpoint of its range]
    #[arg(long, allow_negative_numbers = true)]
    level: Option<f32>,
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
        if let Some(level) = self.level.filter(|l| !l.is_finite() || l.abs() >= 1.0) {
            anyhow::bail!("--level must lie within −1..1 (the field is a tanh), not {level}");
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
        let iso = in_private(&dir, |work| {
            let field = LatentField::new(&decoder, &z)?;
            let level = self.level.map_or(Level::FromField, Level::Fixed);
            let formats = &self.formats;
            let r = mesh::export_field(
                &field, &device, self.grid, level, &asset, formats, work, "mesh",
            )?;
            Ok(r.iso)
        })?;
        dir.commit()?;
        if iso.rule == IsoRule::Midpoint {
            eprintln!(
                "no surface at level 0: meshed at level {:.3}, the midpoint of the field's range",
                iso.level
            );
        }
        for n in &names {
            println!("{}", out.join(n).display());
        }
        Ok(ExitCode::from(EXIT_OK))
    }
}
