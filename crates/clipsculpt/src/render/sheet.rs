//! Images out of renders: `[0, 1]` tensors to 8-bit RGB (`round(x·255)`, as diffusers' PIL
//! output) and the 20-view contact sheet of Shap-E's pan cameras as PNG bytes.

use std::io::Cursor;

use candle_core::{DType, Result, Tensor};
use image::{ImageFormat, RgbImage};

use super::{camera, render_views, RenderSettings};
use crate::autodiff::rng::Rng;
use crate::shap_e::Decoder;

/// Columns of a contact sheet (20 views → 5 × 4).
pub(crate) const SHEET_COLUMNS: usize = 5;

/// Samples for preview sheets: 32 stratified samples per ray and no importance pass. A sheet of
/// 20 small tiles is a glance at the field, not the guidance image; the 32 + 32 samples it used
/// before (one coarse pass to place 32 more samples, then 64 per ray) cost three times as many
/// MLP queries and made the two sheets most of a `generate --steps 0`.
pub fn preview_settings() -> RenderSettings {
    RenderSettings {
        n_coarse: 32,
        n_fine: 0,
        chunk_rays: Some(4096),
        background: None,
    }
}

/// `rgb (H, W, 3)` in `[0, 1]` → an 8-bit image (values clamped, rounded).
pub(crate) fn to_rgb_image(rgb: &Tensor) -> Result<RgbImage> {
    let (h, w, c) = rgb.dims3()?;
    if c != 3 {
        candle_core::bail!("expected (H, W, 3) colours, got {:?}", rgb.shape());
    }
    let v = rgb
        .detach()
        .to_dtype(DType::F32)?
        .flatten_all()?
        .to_vec1::<f32>()?;
    let bytes = v
        .iter()
        .map(|x| (x.clamp(0.0, 1.0) * 255.0).round() as u8)
        .collect();
    RgbImage::from_raw(w as u32, h as u32, bytes)
        .ok_or_else(|| candle_core::Error::Msg("image buffer size mismatch (bug)".into()))
}

/// Renders the 20 pan views of `latent` at `size × size` (graph-free: the latent is detached)
/// and tiles them 5 per row. Returns PNG bytes.
pub fn contact_sheet(
    decoder: &Decoder,
    latent: &Tensor,
    size: usize,
    settings: &RenderSettings,
    rng: &mut Rng,
) -> Result<Vec<u8>> {
    let cams = camera::pan_cameras(size);
    let views = render_views(decoder, &latent.detach(), &cams, settings, rng)?;
    let rows = cams.len().div_ceil(SHEET_COLUMNS);
    let mut sheet = RgbImage::new((SHEET_COLUMNS * size) as u32, (rows * size) as u32);
    for i in 0..cams.len() {
        let tile = to_rgb_image(&views.rgb.get(i)?)?;
        let (x, y) = ((i % SHEET_COLUMNS) * size, (i / SHEET_COLUMNS) * size);
        image::imageops::replace(&mut sheet, &tile, x as i64, y as i64);
    }
    let mut png = Vec::new();
    sheet
        .write_to(&mut Cursor::new(&mut png), ImageFormat::Png)
        .map_err(|e| candle_core::Error::Msg(format!("png encoding failed: {e}")))?;
    Ok(png)
}
