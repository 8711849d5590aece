//! Differentiable CLIP preprocessing: a centred square crop, an antialiased bilinear resize to the
//! model's `image_size` and OpenAI's per-channel mean/std (`docs/clip-guidance.md`).
//!
//! OpenAI's PIL pipeline (resize shortest side, bicubic, centre crop) is not differentiable; for the
//! square renders we score, crop-then-resize is the same geometry. Every step is a linear map, so the
//! gradient reaches the input pixels.

use candle_core::{Result, Tensor};

use crate::autodiff::ops::resize_bilinear;

/// OpenAI CLIP's per-channel mean (RGB).
pub(crate) const OPENAI_MEAN: [f32; 3] = [0.481_454_66, 0.457_827_5, 0.408_210_73];
/// OpenAI CLIP's per-channel standard deviation (RGB).
// The digits OpenAI publishes, verbatim (f32 rounds the last one).
#[allow(clippy::excessive_precision)]
pub(crate) const OPENAI_STD: [f32; 3] = [0.268_629_54, 0.261_302_58, 0.275_777_11];

/// `images (batch, 3, height, width)` with values in [0, 1] → `(batch, 3, image_size, image_size)`
/// normalised pixels. A non-square image is first cropped to its centred square (offsets rounded
/// down). Differentiable with respect to `images`.
pub fn preprocess(images: &Tensor, image_size: usize) -> Result<Tensor> {
    let (_, c, h, w) = images.dims4()?;
    if c != 3 {
        candle_core::bail!(
            "clip preprocessing expects RGB images (batch, 3, height, width), got {:?}",
            images.shape()
        );
    }
    let s = h.min(w);
    let square = images
        .narrow(2, (h - s) / 2, s)?
        .narrow(3, (w - s) / 2, s)?;
    let resized = resize_bilinear(&square, image_size, image_size, true)?;
    let (dev, dt) = (images.device(), images.dtype());
    let mean = Tensor::new(&OPENAI_MEAN, dev)?
        .to_dtype(dt)?
        .reshape((1, 3, 1, 1))?;
    let std = Tensor::new(&OPENAI_STD, dev)?
        .to_dtype(dt)?
        .reshape((1, 3, 1, 1))?;
    resized.broadcast_sub(&mean)?.broadcast_div(&std)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autodiff::ops::testing::{check_grad, randn};
    use candle_core::Device;

    /// A constant grey image of value m_c in channel c maps to 0 everywhere: the crop and the
    /// (row-stochastic) resize keep constants, then (m − m)/s = 0.
    #[test]
    fn mean_grey_maps_to_zero() -> Result<()> {
        let dev = Device::Cpu;
        let grey = Tensor::new(&OPENAI_MEAN, &dev)?
            .reshape((1, 3, 1, 1))?
            .repeat((2, 1, 9, 7))?;
        let out = preprocess(&grey, 4)?;
        assert_eq!(out.dims(), &[2, 3, 4, 4]);
        assert!(out.abs()?.max_all()?.to_scalar::<f32>()? < 1e-5);
        Ok(())
    }

    #[test]
    fn gradient_reaches_the_pixels() -> Result<()> {
        let x = randn(&[1, 3, 7, 6], 4, &Device::Cpu)?;
        check_grad(&[x], |t| preprocess(&t[0], 4))
    }
}
