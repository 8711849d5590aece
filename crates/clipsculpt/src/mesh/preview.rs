//! Preview images: a PNG contact sheet of turntable views and an optional animated GIF, drawn by [`super::raster`].

use std::f32::consts::TAU;
use std::path::Path;

use image::codecs::gif::{GifEncoder, Repeat};
use image::codecs::png::PngEncoder;
use image::{Delay, Frame, ImageEncoder, RgbImage, RgbaImage};

use super::asset::Asset;
use super::error::ExportError;
use super::raster::{render, View};
use crate::atomic::{write_atomic, write_atomic_with};

/// Turntable views on the contact sheet.
pub(crate) const SHEET_VIEWS: u32 = 8;
/// Columns of the contact sheet.
pub(crate) const SHEET_COLUMNS: u32 = 4;
/// Elevation of every preview view (20°).
pub(crate) const ELEVATION: f32 = 20.0 * std::f32::consts::PI / 180.0;

fn turntable(k: u32, count: u32) -> View {
    View {
        azimuth: TAU * k as f32 / count as f32,
        elevation: ELEVATION,
    }
}

/// Renders [`SHEET_VIEWS`] turntable views (45° apart, starting at the front) into a 4×2 sheet of `tile`-pixel tiles.
pub(crate) fn contact_sheet(asset: &Asset, tile: u32) -> RgbImage {
    let rows = SHEET_VIEWS.div_ceil(SHEET_COLUMNS);
    let mut sheet = RgbImage::new(tile * SHEET_COLUMNS, tile * rows);
    for k in 0..SHEET_VIEWS {
        let img = render(
            &asset.mesh,
            asset.texture.as_ref(),
            turntable(k, SHEET_VIEWS),
            tile,
        );
        image::imageops::replace(
            &mut sheet,
            &img,
            ((k % SHEET_COLUMNS) * tile) as i64,
            ((k / SHEET_COLUMNS) * tile) as i64,
        );
    }
    sheet
}

/// Writes the contact sheet as PNG, atomically.
pub(crate) fn write_contact_sheet(
    asset: &Asset,
    path: &Path,
    tile: u32,
) -> Result<(), ExportError> {
    let sheet = contact_sheet(asset, tile);
    let mut png = Vec::new();
    PngEncoder::new(&mut png)
        .write_image(
            sheet.as_raw(),
            sheet.width(),
            sheet.height(),
            image::ExtendedColorType::Rgb8,
        )
        .map_err(|source| ExportError::Image {
            path: path.into(),
            source,
        })?;
    write_atomic(path, &png).map_err(ExportError::io(path))
}

/// Writes a looping turntable GIF of `frames` views at `size` pixels, atomically.
pub(crate) fn write_turntable_gif(
    asset: &Asset,
    path: &Path,
    size: u32,
    frames: u32,
) -> Result<(), ExportError> {
    let frames: Vec<Frame> = (0..frames.max(1))
        .map(|k| {
            let view = turntable(k, frames.max(1));
            let rgb = render(&asset.mesh, asset.texture.as_ref(), view, size);
            let rgba = RgbaImage::from_fn(size, size, |x, y| {
                let p = rgb.get_pixel(x, y).0;
                image::Rgba([p[0], p[1], p[2], 255])
            });
            Frame::from_parts(rgba, 0, 0, Delay::from_numer_denom_ms(80, 1))
        })
        .collect();
    let mut failure = None;
    write_atomic_with(path, |w| {
        let mut enc = GifEncoder::new_with_speed(w, 10);
        let result = enc
            .set_repeat(Repeat::Infinite)
            .and_then(|_| enc.encode_frames(frames));
        result.map_err(|e| {
            failure = Some(e);
            std::io::Error::other("gif encoding failed")
        })
    })
    .map_err(|io| match failure {
        Some(source) => ExportError::Image {
            path: path.into(),
            source,
        },
        None => ExportError::io(path)(io),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::grid::{Bounds, Grid};
    use crate::mesh::marching_cubes::{marching_cubes, McOptions};
    use crate::mesh::shapes;

    fn red_sphere() -> Asset {
        let g = Grid::from_fn(24, Bounds::SHAP_E, |p| shapes::sphere(p, [0.0; 3], 0.7)).unwrap();
        let mut m = marching_cubes(&g, &McOptions::default()).unwrap();
        m.colours.iter_mut().for_each(|c| *c = [1.0, 0.0, 0.0]);
        Asset {
            mesh: m,
            texture: None,
        }
    }

    #[test]
    fn sheet_shows_a_lit_red_disc_on_the_background() {
        let sheet = contact_sheet(&red_sphere(), 64);
        assert_eq!(sheet.dimensions(), (256, 128));
        // Tile centre is the sphere (red, lit), tile corner is background.
        let centre = sheet.get_pixel(32, 32).0;
        assert!(
            centre[0] > 100 && centre[1] == 0 && centre[2] == 0,
            "{centre:?}"
        );
        assert_eq!(*sheet.get_pixel(1, 1), crate::mesh::raster::BACKGROUND);
    }

    #[test]
    fn writes_png_and_gif() {
        let dir = tempfile::tempdir().unwrap();
        let m = red_sphere();
        write_contact_sheet(&m, &dir.path().join("a.png"), 32).unwrap();
        write_turntable_gif(&m, &dir.path().join("a.gif"), 32, 4).unwrap();
        let png = image::open(dir.path().join("a.png")).unwrap();
        assert_eq!((png.width(), png.height()), (128, 64));
        let gif = std::fs::read(dir.path().join("a.gif")).unwrap();
        assert_eq!(&gif[..6], b"GIF89a");
    }
}
