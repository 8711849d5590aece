//! Blends (`clipsculpt blend`): spherical interpolation (slerp) between two latents, as Shap-E's paper
//! interpolates its latents, taken over each latent flattened into one vector (not row by row); each step's
//! latent, mesh and report in `step-NN/`, and a contact sheet and a GIF of the steps.

use std::path::Path;

use anyhow::{bail, Context as _, Result};
use candle_core::{DType, Device, Tensor};
use image::{Delay, Frame, RgbImage, RgbaImage};
use serde::Serialize;

use super::lineage::Parent;
use super::mesh::{extract_mesh, LatentField};
use super::models::Models;
use super::provenance::latent_sha256;
use super::settings::RunSettings;
use crate::atomic::{write_atomic, write_atomic_with};
use crate::mesh::{self, ExportError};
use crate::shap_e::save_latent;

/// Side of each step's picture on the contact sheet and in the GIF.
const TILE: u32 = 160;
/// Milliseconds per GIF frame.
const FRAME_MS: u32 = 160;
/// The contact sheet's and the GIF's file names.
pub const SHEET_FILE: &str = "contact_sheet.png";
/// See [`SHEET_FILE`].
pub const GIF_FILE: &str = "blend.gif";

/// `slerp(a, b, t)` over the flattened latents: `sin((1−t)θ)/sin θ · a + sin(tθ)/sin θ · b`, θ the angle between
/// them (a straight line when they are parallel). `t = 0` and `t = 1` return `a` and `b` themselves.
pub fn slerp(a: &Tensor, b: &Tensor, t: f64) -> Result<Tensor> {
    if a.dims() != b.dims() {
        bail!(
            "the two latents have shapes {:?} and {:?}; blend needs latents of one model",
            a.dims(),
            b.dims()
        );
    }
    if t == 0.0 {
        return Ok(a.clone());
    }
    if t == 1.0 {
        return Ok(b.clone());
    }
    let v = |x: &Tensor| -> Result<Vec<f64>> {
        Ok(x.to_dtype(DType::F64)?.flatten_all()?.to_vec1::<f64>()?)
    };
    let (va, vb) = (v(a)?, v(b)?);
    let dot: f64 = va.iter().zip(&vb).map(|(x, y)| x * y).sum();
    let norm = |x: &[f64]| x.iter().map(|e| e * e).sum::<f64>().sqrt();
    let cos = (dot / (norm(&va) * norm(&vb)).max(f64::MIN_POSITIVE)).clamp(-1.0, 1.0);
    let theta = cos.acos();
    let (wa, wb) = if theta.sin().abs() < 1e-6 {
        (1.0 - t, t)
    } else {
        (
            ((1.0 - t) * theta).sin() / theta.sin(),
            (t * theta).sin() / theta.sin(),
        )
    };
    let out: Vec<f32> = va
        .iter()
        .zip(&vb)
        .map(|(x, y)| (wa * x + wb * y) as f32)
        .collect();
    Ok(Tensor::from_vec(out, a.dims(), a.device())?.to_dtype(a.dtype())?)
}

/// The `steps ≥ 2` positions `0, 1/(steps−1), …, 1`.
pub fn positions(steps: usize) -> Vec<f64> {
    (0..steps)
        .map(|i| i as f64 / (steps - 1).max(1) as f64)
        .collect()
}

/// What one step of a blend wrote, as its `report.json` says.
#[derive(Debug, Clone, Serialize)]
pub struct BlendStep {
    /// clipsculpt version.
    pub version: &'static str,
    /// `blend`.
    pub command: &'static str,
    /// What it is, for people: the two prompts and `t`.
    pub title: String,
    /// The position between the parents (0: the first).
    pub t: f64,
    /// SHA-256 of its latent's values.
    pub latent_sha256: String,
    /// The two latents blended.
    pub parents: Vec<Parent>,
    /// The settings used (the models, the grid, the formats).
    pub settings: RunSettings,
    /// Its mesh's statistics, when the latent has a surface.
    pub mesh: Option<mesh::MeshStats>,
    /// Why it has no mesh, when it has none.
    pub no_mesh: Option<String>,
}

/// Writes the blend of `parents` in `steps` steps into `out_dir`: `step-NN/` (latent, meshes in `s.formats`,
/// `report.json`) for each step, then [`SHEET_FILE`] and [`GIF_FILE`]. Returns the steps' reports.
pub fn write_blend(
    models: &Models,
    s: &RunSettings,
    parents: [(&Tensor, &Parent); 2],
    steps: usize,
    out_dir: &Path,
    device: &Device,
) -> Result<Vec<BlendStep>> {
    if !(2..=64).contains(&steps) {
        bail!("--steps must lie within 2..=64 (the two ends included), not {steps}");
    }
    let title = |t: f64| {
        let p = |i: usize| {
            parents[i]
                .1
                .prompt
                .clone()
                .unwrap_or_else(|| parents[i].1.source.clone())
        };
        format!("blend t = {t:.2}: {:?} → {:?}", p(0), p(1))
    };
    let decoder = &models.shap_e.decoder;
    let (mut reports, mut tiles) = (Vec::new(), Vec::new());
    for (i, t) in positions(steps).into_iter().enumerate() {
        let z = slerp(parents[0].0, parents[1].0, t)?;
        let dir = out_dir.join(format!("step-{i:02}"));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let latent_file = dir.join("latent.safetensors");
        save_latent(&latent_file, &z)
            .with_context(|| format!("writing {}", latent_file.display()))?;
        let field = LatentField::new(decoder, &z)?;
        let (stats, no_mesh) = match mesh::export_field(
            &field,
            device,
            s.grid,
            mesh::Level::FromField,
            &s.asset,
            &s.formats,
            &dir,
            "mesh",
        ) {
            Ok(r) => (Some(r.stats), None),
            Err(e @ (ExportError::EmptySurface { .. } | ExportError::NonFiniteField { .. })) => {
                (None, Some(e.to_string()))
            }
            Err(e) => return Err(e).with_context(|| format!("exporting the mesh of step {i}")),
        };
        tiles.push(match no_mesh {
            None => mesh::raster::render(
                &extract_mesh(decoder, &z, s.grid, device)?,
                None,
                front(),
                TILE,
            ),
            Some(_) => RgbImage::from_pixel(TILE, TILE, image::Rgb([90, 90, 90])),
        });
        let report = BlendStep {
            version: env!("CARGO_PKG_VERSION"),
            command: "blend",
            title: title(t),
            t,
            latent_sha256: latent_sha256(&z)?,
            parents: vec![parents[0].1.clone(), parents[1].1.clone()],
            settings: s.clone(),
            mesh: stats,
            no_mesh,
        };
        let p = dir.join("report.json");
        write_atomic(&p, serde_json::to_string_pretty(&report)?.as_bytes())
            .with_context(|| format!("writing {}", p.display()))?;
        reports.push(report);
    }
    write_sheet(&tiles, &out_dir.join(SHEET_FILE))?;
    write_gif(&tiles, &out_dir.join(GIF_FILE))?;
    Ok(reports)
}

/// The view of each step's picture: the preview sheet's second view (45° round, 20° up).
fn front() -> mesh::raster::View {
    mesh::raster::View {
        azimuth: std::f32::consts::FRAC_PI_4,
        elevation: mesh::preview::ELEVATION,
    }
}

/// The steps' pictures in one row, as PNG.
fn write_sheet(tiles: &[RgbImage], path: &Path) -> Result<()> {
    let mut sheet = RgbImage::new(TILE * tiles.len() as u32, TILE);
    for (k, tile) in tiles.iter().enumerate() {
        image::imageops::replace(&mut sheet, tile, (k as u32 * TILE) as i64, 0);
    }
    let mut png = std::io::Cursor::new(Vec::new());
    sheet.write_to(&mut png, image::ImageFormat::Png)?;
    write_atomic(path, png.get_ref()).with_context(|| format!("writing {}", path.display()))
}

/// The steps' pictures there and back as a looping GIF.
fn write_gif(tiles: &[RgbImage], path: &Path) -> Result<()> {
    let order = (0..tiles.len()).chain((1..tiles.len().saturating_sub(1)).rev());
    let frames: Vec<Frame> = order
        .map(|k| {
            let rgba = RgbaImage::from_fn(TILE, TILE, |x, y| {
                let p = tiles[k].get_pixel(x, y).0;
                image::Rgba([p[0], p[1], p[2], 255])
            });
            Frame::from_parts(rgba, 0, 0, Delay::from_numer_denom_ms(FRAME_MS, 1))
        })
        .collect();
    write_atomic_with(path, |w| {
        let mut enc = image::codecs::gif::GifEncoder::new_with_speed(w, 10);
        enc.set_repeat(image::codecs::gif::Repeat::Infinite)
            .and_then(|_| enc.encode_frames(frames))
            .map_err(std::io::Error::other)
    })
    .with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ends are the parents bit for bit; the middle of two orthogonal unit vectors has norm 1.
    #[test]
    fn slerp_ends_are_the_parents() {
        let dev = Device::Cpu;
        let a = Tensor::new(&[[[1f32, 0.0], [0.0, 0.0]]], &dev).unwrap();
        let b = Tensor::new(&[[[0f32, 0.0], [0.0, 1.0]]], &dev).unwrap();
        let bits = |t: &Tensor| {
            t.flatten_all()
                .unwrap()
                .to_vec1::<f32>()
                .unwrap()
                .iter()
                .map(|v| v.to_bits())
                .collect::<Vec<_>>()
        };
        assert_eq!(bits(&slerp(&a, &b, 0.0).unwrap()), bits(&a));
        assert_eq!(bits(&slerp(&a, &b, 1.0).unwrap()), bits(&b));
        let mid = slerp(&a, &b, 0.5)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let norm: f32 = mid.iter().map(|v| v * v).sum::<f32>().sqrt();
        assert!(
            (norm - 1.0).abs() < 1e-6 && (mid[0] - mid[3]).abs() < 1e-6,
            "{mid:?}"
        );
        assert_eq!(positions(3), vec![0.0, 0.5, 1.0]);
    }
}
