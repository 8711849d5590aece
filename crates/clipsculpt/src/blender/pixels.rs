//! What a rendered preview shows of the object: the fraction of the frame it covers and its mean colour,
//! from the render and the object mask that `preview.py --mask` writes.

use std::path::Path;

use super::error::BlenderError;

/// The object's pixels in one render.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ObjectPixels {
    /// Fraction of the frame covered by the object (mask > ½).
    pub fraction: f64,
    /// Mean sRGB colour in [0, 1] of the object's interior pixels (mask pixels whose four neighbours are
    /// object too, so edges blended with the floor do not count).
    pub mean_srgb: [f64; 3],
    /// How many interior pixels the mean is over.
    pub(crate) interior: usize,
}

/// Measures the object in `image` (RGB or RGBA PNG) through `mask` (same size, white = object).
pub fn object_pixels(image: &Path, mask: &Path) -> Result<ObjectPixels, BlenderError> {
    let read = |p: &Path| {
        image::open(p).map_err(|e| BlenderError::Image {
            path: p.to_path_buf(),
            reason: e.to_string(),
        })
    };
    let img = read(image)?.to_rgb8();
    let m = read(mask)?.to_luma8();
    if img.dimensions() != m.dimensions() {
        return Err(BlenderError::Image {
            path: mask.to_path_buf(),
            reason: format!(
                "mask is {:?}, image is {:?}",
                m.dimensions(),
                img.dimensions()
            ),
        });
    }
    let (w, h) = m.dimensions();
    let inside = |x: i64, y: i64| {
        x >= 0 && y >= 0 && x < w as i64 && y < h as i64 && m.get_pixel(x as u32, y as u32)[0] > 127
    };
    let (mut covered, mut interior, mut sum) = (0usize, 0usize, [0f64; 3]);
    for y in 0..h as i64 {
        for x in 0..w as i64 {
            if !inside(x, y) {
                continue;
            }
            covered += 1;
            if inside(x - 1, y) && inside(x + 1, y) && inside(x, y - 1) && inside(x, y + 1) {
                interior += 1;
                let p = img.get_pixel(x as u32, y as u32);
                for k in 0..3 {
                    sum[k] += p[k] as f64 / 255.0;
                }
            }
        }
    }
    let n = interior.max(1) as f64;
    Ok(ObjectPixels {
        fraction: covered as f64 / (w as f64 * h as f64).max(1.0),
        mean_srgb: sum.map(|s| s / n),
        interior,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use image::{GrayImage, Luma, Rgb, RgbImage};

    #[test]
    fn counts_coverage_and_averages_the_interior_only() {
        let d = tempfile::tempdir().unwrap();
        let (ip, mp) = (d.path().join("i.png"), d.path().join("m.png"));
        // A 4×4 object in a 10×10 frame: red inside, its one-pixel rim green (as if blended with the floor).
        let mut img = RgbImage::from_pixel(10, 10, Rgb([128, 128, 128]));
        let mut mask = GrayImage::new(10, 10);
        for y in 3..7 {
            for x in 3..7 {
                mask.put_pixel(x, y, Luma([255]));
                let rim = x == 3 || x == 6 || y == 3 || y == 6;
                img.put_pixel(x, y, Rgb(if rim { [0, 255, 0] } else { [255, 0, 0] }));
            }
        }
        img.save(&ip).unwrap();
        mask.save(&mp).unwrap();
        let o = object_pixels(&ip, &mp).unwrap();
        assert!((o.fraction - 0.16).abs() < 1e-9);
        assert_eq!(o.interior, 4);
        assert_eq!(o.mean_srgb, [1.0, 0.0, 0.0]);
        // Sizes must match.
        GrayImage::new(5, 5).save(&mp).unwrap();
        assert!(object_pixels(&ip, &mp).is_err());
    }
}
