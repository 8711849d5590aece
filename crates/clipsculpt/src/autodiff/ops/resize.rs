//! Differentiable bilinear resize as two matrix products, `Y = R_h · X · R_wᵀ`.
//!
//! candle's `upsample_bilinear2d` has no backward; interpolation matrices give an exact forward and
//! the backward `dX = R_hᵀ · dY · R_w`. Coordinates follow PyTorch's `interpolate(mode="bilinear",
//! align_corners=False)`; with `antialias` a downscale uses the triangle filter widened by the
//! scale factor, as `antialias=True` does (a 2× reduction weights 4 taps ⅛ ⅜ ⅜ ⅛).

use std::sync::Arc;

use candle_core::{Result, Tensor};

use crate::autodiff::vjp::attach;

/// The `(out, in)` row-stochastic interpolation matrix for one axis.
pub(crate) fn resize_matrix(input: usize, output: usize, antialias: bool) -> Vec<f32> {
    let mut m = vec![0f32; output * input];
    let scale = input as f64 / output as f64;
    for o in 0..output {
        let row = &mut m[o * input..(o + 1) * input];
        if antialias && scale > 1.0 {
            // Triangle filter of half-width `scale` centred on the output pixel's centre.
            let centre = scale * (o as f64 + 0.5);
            let lo = ((centre - scale + 0.5).floor().max(0.0)) as usize;
            let hi = ((centre + scale + 0.5).floor() as usize).min(input);
            let mut total = 0.0;
            for (i, w) in row.iter_mut().enumerate().take(hi).skip(lo) {
                let t = 1.0 - ((i as f64 + 0.5 - centre) / scale).abs();
                if t > 0.0 {
                    *w = t as f32;
                    total += t;
                }
            }
            row.iter_mut().for_each(|w| *w = (*w as f64 / total) as f32);
        } else {
            let src = ((o as f64 + 0.5) * scale - 0.5).max(0.0);
            let i0 = (src.floor() as usize).min(input - 1);
            let i1 = (i0 + 1).min(input - 1);
            let lambda = (src - i0 as f64) as f32;
            row[i0] += 1.0 - lambda;
            row[i1] += lambda;
        }
    }
    m
}

/// Resizes `x (N, C, H, W)` to `(N, C, out_h, out_w)`; differentiable with respect to `x`.
pub(crate) fn resize_bilinear(
    x: &Tensor,
    out_h: usize,
    out_w: usize,
    antialias: bool,
) -> Result<Tensor> {
    let (n, c, h, w) = x.dims4()?;
    if (h, w) == (out_h, out_w) {
        return Ok(x.clone());
    }
    let dev = x.device();
    let rh = Tensor::from_vec(resize_matrix(h, out_h, antialias), (out_h, h), dev)?
        .to_dtype(x.dtype())?;
    let rw = Tensor::from_vec(resize_matrix(w, out_w, antialias), (out_w, w), dev)?
        .to_dtype(x.dtype())?;
    let xs = x.detach().reshape((n * c, h, w))?;
    let y = rh
        .broadcast_matmul(&xs)?
        .broadcast_matmul(&rw.t()?)?
        .reshape((n, c, out_h, out_w))?;
    attach(
        "resize_bilinear",
        y,
        &[x],
        Arc::new(move |v| {
            let g = v.grad.reshape((n * c, out_h, out_w))?;
            let dx = rh.t()?.broadcast_matmul(&g)?.broadcast_matmul(&rw)?;
            Ok(vec![Some(dx.reshape((n, c, h, w))?)])
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autodiff::ops::testing::{check_grad, randn};
    use candle_core::Device;

    #[test]
    fn rows_sum_to_one_and_known_weights() {
        for (i, o, aa) in [
            (8, 4, true),
            (4, 8, false),
            (7, 3, true),
            (5, 5, false),
            (224, 32, true),
        ] {
            let m = resize_matrix(i, o, aa);
            for r in m.chunks(i) {
                assert!((r.iter().sum::<f32>() - 1.0).abs() < 1e-5);
            }
        }
        // 2× antialiased reduction: taps ⅛ ⅜ ⅜ ⅛ around each output pixel (interior row).
        let m = resize_matrix(8, 4, true);
        assert_eq!(&m[8 + 1..8 + 5], &[0.125, 0.375, 0.375, 0.125]);
        // 2× upscale, align_corners=False: output 1 sits at source 0.25 → 0.75·x0 + 0.25·x1.
        let m = resize_matrix(4, 8, false);
        assert_eq!(&m[4..6], &[0.75, 0.25]);
    }

    #[test]
    fn gradient_matches_finite_differences() -> Result<()> {
        let x = randn(&[1, 2, 6, 5], 3, &Device::Cpu)?;
        check_grad(std::slice::from_ref(&x), |t| {
            resize_bilinear(&t[0], 3, 4, true)
        })?;
        check_grad(&[x], |t| resize_bilinear(&t[0], 9, 7, false))
    }
}
