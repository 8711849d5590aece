//! Differentiable view augmentations for CLIP guidance (DreamFields-style): composite the
//! rendered RGB over a random background using the rendered opacity, then take a random crop and
//! resize it to the scorer's input size. Every random choice is drawn from our seeded [`Rng`]
//! *before* the differentiable work, so a checkpointed recomputation sees the same draws.

use candle_core::{Device, Result, Tensor};

use crate::autodiff::ops::resize_bilinear;
use crate::autodiff::rng::Rng;

/// Kinds of random background.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Background {
    /// Per-pixel uniform noise.
    Noise,
    /// A checkerboard of two random colours with a random cell size.
    Checkerboard,
    /// Smooth noise: coarse noise upsampled bilinearly.
    Blurred,
    /// One random flat colour.
    Flat,
}

/// The random draws of one view's augmentation.
#[derive(Debug, Clone)]
pub struct AugmentDraw {
    /// Background image `(3, H, W)` in [0, 1].
    pub(crate) background: Tensor,
    /// Crop `(top, left, size)` in pixels.
    pub(crate) crop: (usize, usize, usize),
}

/// Draws a background of `kind` and a square crop covering `min_frac..=1` of the side.
pub fn draw(
    kind: Background,
    h: usize,
    w: usize,
    min_frac: f32,
    rng: &mut Rng,
    dev: &Device,
) -> Result<AugmentDraw> {
    let background = match kind {
        Background::Noise => rng.uniform_tensor(&[3, h, w], dev)?,
        Background::Flat => {
            let c = rng.uniform_tensor(&[3, 1, 1], dev)?;
            c.broadcast_as((3, h, w))?.contiguous()?
        }
        Background::Checkerboard => {
            let cell = 2 + rng.below((h.min(w) / 4).max(1));
            let (a, b) = (
                [rng.uniform(), rng.uniform(), rng.uniform()],
                [rng.uniform(), rng.uniform(), rng.uniform()],
            );
            let mut v = vec![0f32; 3 * h * w];
            for c in 0..3 {
                for y in 0..h {
                    for x in 0..w {
                        let odd = (y / cell + x / cell) % 2 == 1;
                        v[(c * h + y) * w + x] = if odd { a[c] } else { b[c] };
                    }
                }
            }
            Tensor::from_vec(v, (3, h, w), dev)?
        }
        Background::Blurred => {
            let coarse = rng.uniform_tensor(&[1, 3, (h / 8).max(2), (w / 8).max(2)], dev)?;
            resize_bilinear(&coarse, h, w, false)?.squeeze(0)?
        }
    };
    let side = h.min(w);
    let size =
        ((side as f32 * rng.range(min_frac.clamp(0.05, 1.0), 1.0)).round() as usize).clamp(1, side);
    let top = rng.below(h - size + 1);
    let left = rng.below(w - size + 1);
    Ok(AugmentDraw {
        background,
        crop: (top, left, size),
    })
}

/// Composites the premultiplied colour `rgb (3, H, W)` (a render over black) with opacity
/// `alpha (1, H, W)` over the drawn background, crops and resizes to `out × out`:
/// `rgb + (1 − alpha)·background`, differentiable with respect to `rgb` and `alpha`.
pub fn apply(rgb: &Tensor, alpha: &Tensor, draw: &AugmentDraw, out: usize) -> Result<Tensor> {
    let bg = draw.background.to_dtype(rgb.dtype())?;
    let inv = alpha.affine(-1.0, 1.0)?;
    let img = (rgb + bg.broadcast_mul(&inv)?)?;
    let (top, left, size) = draw.crop;
    let crop = img.narrow(1, top, size)?.narrow(2, left, size)?;
    resize_bilinear(&crop.unsqueeze(0)?, out, out, true)?.squeeze(0)
}

/// All background kinds, for drawing one uniformly.
pub(crate) const BACKGROUNDS: [Background; 4] = [
    Background::Noise,
    Background::Checkerboard,
    Background::Blurred,
    Background::Flat,
];

/// Draws a background kind uniformly.
pub fn random_background(rng: &mut Rng) -> Background {
    BACKGROUNDS[rng.below(BACKGROUNDS.len())]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autodiff::ops::testing::check_grad;
    use candle_core::DType;

    #[test]
    fn draws_are_reproducible_and_in_range() -> Result<()> {
        let dev = Device::Cpu;
        for kind in BACKGROUNDS {
            let a = draw(kind, 16, 12, 0.5, &mut Rng::new(3), &dev)?;
            let b = draw(kind, 16, 12, 0.5, &mut Rng::new(3), &dev)?;
            assert_eq!(a.crop, b.crop);
            let diff = (&a.background - &b.background)?
                .abs()?
                .max_all()?
                .to_scalar::<f32>()?;
            assert_eq!(diff, 0.0);
            let (lo, hi) = (
                a.background.min_all()?.to_scalar::<f32>()?,
                a.background.max_all()?.to_scalar::<f32>()?,
            );
            assert!(
                (0.0..=1.0).contains(&lo) && (0.0..=1.0).contains(&hi),
                "{kind:?}"
            );
            let (t, l, s) = a.crop;
            assert!(s >= 6 && t + s <= 16 && l + s <= 12);
        }
        Ok(())
    }

    /// An opaque view ignores the background; a transparent one (premultiplied colour 0) shows
    /// only the background.
    #[test]
    fn compositing_uses_opacity() -> Result<()> {
        let dev = Device::Cpu;
        let d = AugmentDraw {
            background: Tensor::full(0.25f32, (3, 4, 4), &dev)?,
            crop: (0, 0, 4),
        };
        let rgb = Tensor::full(0.75f32, (3, 4, 4), &dev)?;
        let opaque = apply(&rgb, &Tensor::ones((1, 4, 4), DType::F32, &dev)?, &d, 4)?;
        let clear = apply(
            &rgb.zeros_like()?,
            &Tensor::zeros((1, 4, 4), DType::F32, &dev)?,
            &d,
            4,
        )?;
        assert_eq!(opaque.mean_all()?.to_scalar::<f32>()?, 0.75);
        assert_eq!(clear.mean_all()?.to_scalar::<f32>()?, 0.25);
        Ok(())
    }

    #[test]
    fn gradients_reach_rgb_and_alpha() -> Result<()> {
        let dev = Device::Cpu;
        let d = draw(Background::Checkerboard, 6, 6, 0.6, &mut Rng::new(9), &dev)?;
        let mut r = Rng::new(1);
        let (rgb, alpha) = (
            r.uniform_tensor(&[3, 6, 6], &dev)?,
            r.uniform_tensor(&[1, 6, 6], &dev)?,
        );
        check_grad(&[rgb, alpha], |t| {
            let draw = AugmentDraw {
                background: d.background.to_dtype(t[0].dtype())?,
                crop: d.crop,
            };
            apply(&t[0], &t[1], &draw, 5)
        })
    }
}
