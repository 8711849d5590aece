//! The library call behind `clipsculpt export`: field → grid → marching cubes → vertex colours → files.

use std::path::{Path, PathBuf};
use std::time::Instant;

use candle_core::Device;

use super::asset::{self, Asset, AssetOptions, AssetReport};
use super::error::ExportError;
use super::field::{sample_colours, sample_grid, Field, DEFAULT_CHUNK};
use super::grid::Bounds;
use super::iso::{self, Iso, Level};
use super::marching_cubes::{marching_cubes, McMode, McOptions};
use super::memory::{release_device_caches, MemoryReport};
use super::mesh::{Mesh, MeshStats};
use super::{glb, obj, ply, preview};

/// Output files [`write_all`] can produce (`--formats glb,ply,obj,png,gif` on the command line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// `<stem>.glb`: binary glTF, linear COLOR_0, +Y up (Blender: File ▸ Import ▸ glTF).
    Glb,
    /// `<stem>.ply`: binary little-endian PLY, sRGB colours, +Z up.
    Ply,
    /// `<stem>.obj`: OBJ with `v x y z r g b` (sRGB), +Y up.
    Obj,
    /// `<stem>_preview.png`: contact sheet of 8 turntable views.
    #[serde(rename = "png")]
    PreviewPng,
    /// `<stem>_turntable.gif`: animated turntable.
    #[serde(rename = "gif")]
    PreviewGif,
}

impl std::str::FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "glb" => Ok(Self::Glb),
            "ply" => Ok(Self::Ply),
            "obj" => Ok(Self::Obj),
            "png" => Ok(Self::PreviewPng),
            "gif" => Ok(Self::PreviewGif),
            _ => Err(format!("unknown format {s:?} (glb, ply, obj, png, gif)")),
        }
    }
}

impl std::fmt::Display for Format {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Glb => "glb",
            Self::Ply => "ply",
            Self::Obj => "obj",
            Self::PreviewPng => "png",
            Self::PreviewGif => "gif",
        })
    }
}

impl Format {
    /// The three mesh formats plus the PNG preview (what `export` writes by default).
    pub const DEFAULT: [Format; 4] = [Format::Glb, Format::Ply, Format::Obj, Format::PreviewPng];

    /// File name for `stem`.
    pub fn file_name(self, stem: &str) -> String {
        match self {
            Self::Glb => format!("{stem}.glb"),
            Self::Ply => format!("{stem}.ply"),
            Self::Obj => format!("{stem}.obj"),
            Self::PreviewPng => format!("{stem}_preview.png"),
            Self::PreviewGif => format!("{stem}_turntable.gif"),
        }
    }

    /// Every file this format writes for `stem`: a textured OBJ brings its MTL and PNG.
    pub fn file_names(self, stem: &str, textured: bool) -> Vec<String> {
        let mut names = vec![self.file_name(stem)];
        if self == Self::Obj && textured {
            names.extend([format!("{stem}.mtl"), obj::texture_file_name(stem)]);
        }
        names
    }

    /// Whether the format is a mesh file (what a texture needs: GLB or OBJ carry it).
    pub fn carries_texture(self) -> bool {
        matches!(self, Self::Glb | Self::Obj)
    }
}

/// Preview tile / GIF frame size in pixels.
pub(crate) const PREVIEW_SIZE: u32 = 256;
/// Frames of the turntable GIF.
pub(crate) const GIF_FRAMES: u32 = 24;

/// Writes `asset` in each of `formats` to `out_dir/<stem>…` (creating `out_dir`), each file atomically.
/// Returns the paths written, in the order of `formats` (a textured OBJ's MTL and PNG after it).
pub(crate) fn write_all(
    asset: &Asset,
    out_dir: &Path,
    stem: &str,
    formats: &[Format],
) -> Result<Vec<PathBuf>, ExportError> {
    if stem.is_empty() || stem.contains(['/', '\\']) || stem.starts_with('.') {
        return Err(ExportError::Invalid {
            what: "file stem",
            reason: format!("{stem:?}: need a plain file name without separators or a leading dot"),
        });
    }
    let (mesh, texture) = (&asset.mesh, asset.texture.as_ref());
    mesh.validate()?;
    if let Some(t) = texture {
        t.validate(mesh.positions.len())?;
    }
    std::fs::create_dir_all(out_dir).map_err(ExportError::io(out_dir))?;
    let mut written = Vec::with_capacity(formats.len());
    for &format in formats {
        let path = out_dir.join(format.file_name(stem));
        let mut companions = Vec::new();
        match format {
            Format::Glb => glb::write_glb(mesh, texture, &path)?,
            Format::Ply => ply::write_ply(mesh, &path)?,
            Format::Obj => companions = obj::write_obj(mesh, texture, &path)?,
            Format::PreviewPng => preview::write_contact_sheet(asset, &path, PREVIEW_SIZE)?,
            Format::PreviewGif => {
                preview::write_turntable_gif(asset, &path, PREVIEW_SIZE, GIF_FRAMES)?
            }
        }
        written.push(path);
        written.extend(companions);
    }
    Ok(written)
}

/// How a field is turned into a mesh.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct ExportSettings {
    /// Samples per axis (Shap-E decodes at 128).
    pub(crate) grid_size: usize,
    /// Box the grid spans (Shap-E: [−1, 1]³).
    pub(crate) bounds: Bounds,
    /// Vertex placement.
    pub(crate) mode: McMode,
    /// Points per field evaluation.
    pub(crate) chunk: usize,
}

impl Default for ExportSettings {
    fn default() -> Self {
        Self {
            grid_size: 128,
            bounds: Bounds::SHAP_E,
            mode: McMode::Exact,
            chunk: DEFAULT_CHUNK,
        }
    }
}

/// What [`export_field`] did.
#[derive(Debug, Clone)]
pub struct ExportReport {
    /// Files written, in the order of the requested formats.
    pub files: Vec<PathBuf>,
    /// Quality measures of the mesh as extracted (watertight, volume, Euler χ…).
    pub stats: MeshStats,
    /// The iso level it was extracted at, and how that was chosen.
    pub iso: Iso,
    /// The extracted, coloured mesh (field coordinates, +Z up), for scoring its views.
    pub mesh: Mesh,
    /// Quality measures of the exported mesh (after smoothing, simplification, UV seams).
    pub asset_stats: MeshStats,
    /// What the asset stage did (simplification, texture, size).
    pub asset: AssetReport,
    /// Memory right before grid sampling.
    pub(crate) memory_before: MemoryReport,
    /// Seconds spent releasing the device's caches and sampling the grid, extracting the surface, colouring the
    /// vertices (and building the asset: its own split is in [`AssetReport::seconds`]) and writing files.
    pub(crate) seconds: [f64; 4],
    /// Seconds spent writing each file, in the order of the requested formats.
    pub(crate) format_seconds: Vec<(Format, f64)>,
}

/// Samples `field` on a `grid_size`³ grid over Shap-E's [−1, 1]³, extracts the surface at iso
/// `level` (a fixed level, 0 for Shap-E's tanh SDF, positive inside; or [`Level::FromField`], the
/// rule of [`iso`]; [`McMode::Exact`]), colours the vertices from the field, makes the asset `asset`
/// asks for (smoothing, simplification, texture, size; [`AssetOptions::RAW`] keeps the mesh as
/// extracted) and writes `formats` to `out_dir/<stem>…`.
///
/// Call it after dropping optimisation state (optimiser moments, saved activations): the field is evaluated with
/// plain tensors, `chunk` points at a time, on `device`. Errors name the failing input:
/// [`ExportError::EmptySurface`] when the field is nowhere positive, [`ExportError::Io`] with the path, etc.
// The grid, the level, the asset options and the outputs are each a caller's choice (`generate` and `export` set
// them from different places).
#[allow(clippy::too_many_arguments)]
pub fn export_field(
    field: &dyn Field,
    device: &Device,
    grid_size: usize,
    level: impl Into<Level>,
    asset: &AssetOptions,
    formats: &[Format],
    out_dir: &Path,
    stem: &str,
) -> Result<ExportReport, ExportError> {
    let settings = ExportSettings {
        grid_size,
        ..ExportSettings::default()
    };
    let t0 = Instant::now();
    let memory_before =
        release_device_caches(device).map_err(|source| ExportError::Field { points: 0, source })?;
    let grid = sample_grid(
        field,
        device,
        settings.grid_size,
        settings.bounds,
        settings.chunk,
    )?;
    let t1 = Instant::now();
    let iso = iso::choose(level.into(), grid.range());
    let opts = McOptions {
        level: iso.level,
        mode: settings.mode,
        parallel: true,
    };
    let mut mesh = marching_cubes(&grid, &opts)?;
    drop(grid);
    let t2 = Instant::now();
    mesh.colours = sample_colours(field, device, &mesh.positions, settings.chunk)?;
    let stats = mesh.stats();
    let extracted = mesh.clone();
    let (built, asset_report) = asset::build(mesh, field, device, asset, settings.chunk)?;
    let asset_stats = built.mesh.stats();
    let t3 = Instant::now();
    // Checks the stem and the mesh once, then writes and times one format at a time.
    write_all(&built, out_dir, stem, &[])?;
    let mut files = Vec::with_capacity(formats.len());
    let mut format_seconds = Vec::with_capacity(formats.len());
    for &format in formats {
        let t = Instant::now();
        files.extend(write_all(&built, out_dir, stem, &[format])?);
        format_seconds.push((format, t.elapsed().as_secs_f64()));
    }
    let t4 = Instant::now();
    let secs = |a: Instant, b: Instant| (b - a).as_secs_f64();
    Ok(ExportReport {
        files,
        stats,
        iso,
        mesh: extracted,
        asset_stats,
        asset: asset_report,
        memory_before,
        seconds: [secs(t0, t1), secs(t1, t2), secs(t2, t3), secs(t3, t4)],
        format_seconds,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::field::FnField;
    use crate::mesh::shapes;

    #[test]
    fn exports_a_coloured_sphere_end_to_end() {
        let dir = tempfile::tempdir().unwrap();
        let field = FnField(|p: [f32; 3]| (shapes::sphere(p, [0.0; 3], 0.6), [1.0, 0.5, 0.0]));
        let formats = [Format::Glb, Format::Ply, Format::Obj, Format::PreviewPng];
        let r = export_field(
            &field,
            &Device::Cpu,
            24,
            0.0,
            &AssetOptions::RAW,
            &formats,
            dir.path(),
            "ball",
        )
        .unwrap();
        assert!(r.stats.is_clean_solid(), "{:?}", r.stats);
        let names: Vec<_> = r
            .files
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names,
            ["ball.glb", "ball.ply", "ball.obj", "ball_preview.png"]
        );
        // Only the four outputs: no temp files left behind.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 4);
    }

    #[test]
    fn empty_field_and_bad_stem_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let export = |field: &dyn Field, stem| {
            export_field(
                field,
                &Device::Cpu,
                8,
                0.0,
                &AssetOptions::RAW,
                &[Format::Glb],
                dir.path(),
                stem,
            )
        };
        let empty = FnField(|_: [f32; 3]| (-1.0, [0.0; 3]));
        let err = export(&empty, "x").unwrap_err();
        assert!(matches!(err, ExportError::EmptySurface { .. }), "{err}");
        let ball = FnField(|p: [f32; 3]| (shapes::sphere(p, [0.0; 3], 0.5), [0.0; 3]));
        let err = export(&ball, "../x").unwrap_err();
        assert!(err.to_string().contains("file stem"), "{err}");
    }

    /// A field that is nowhere positive (what an unfinished Shap-E sample can decode to) has no
    /// surface at level 0 but has one at a level inside its range, which the error names.
    #[test]
    fn a_level_inside_the_range_meshes_a_field_with_no_surface_at_zero() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let shifted = FnField(|p: [f32; 3]| (shapes::sphere(p, [0.0; 3], 0.5) - 0.8, [0.0; 3]));
        let export = |level| {
            export_field(
                &shifted,
                &Device::Cpu,
                24,
                level,
                &AssetOptions::RAW,
                &[Format::Ply],
                dir.path(),
                "x",
            )
        };
        let err = export(0.0)
            .err()
            .ok_or_else(|| anyhow::anyhow!("a surface at level 0"))?;
        let ExportError::EmptySurface { min, max, .. } = err else {
            anyhow::bail!("{err}");
        };
        let r = export((min + max) / 2.0)?;
        assert!(r.stats.is_clean_solid(), "{:?}", r.stats);
        Ok(())
    }
}
