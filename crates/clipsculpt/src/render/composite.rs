//! Volume compositing (diffusers `integrate_samples` and the void model; `docs/shap-e.md`, "Rendering"), differentiable
//! in densities and colours. For sorted samples `t_k` with bin widths `Δ_k` (from
//! [`super::samplers::partition`]): `τ_k = σ_k·Δ_k`, `M_k = Σ_{i≤k} τ_i`, weights
//! `w_k = (1 − e^{−τ_k})·e^{−M_{k−1}}`, colour `Σ w_k·c_k`, transmittance `e^{−M_last}`. Rays
//! that miss the volume get transmittance 1 and colour 0; then `colour += T·background`.

use candle_core::{Result, Tensor, D};

use super::samplers::partition;

/// Bin widths `(r, s)` for `ts` (`r·s` sorted-per-ray distances) and per-ray `[t0, t1]`.
pub(crate) fn deltas(ts: &[f32], t0: &[f32], t1: &[f32]) -> Vec<f32> {
    let s = ts.len() / t0.len().max(1);
    ts.chunks_exact(s.max(1))
        .zip(t0.iter().zip(t1))
        .flat_map(|(t, (&a, &b))| {
            let (lo, hi) = partition(a, b, t);
            lo.into_iter()
                .zip(hi)
                .map(|(l, h)| h - l)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Compositing weights `w (r, s)` and ray transmittance `T (r)` of `density (r, s)` over bins
/// of width `delta (r, s)`.
pub(crate) fn weights(delta: &Tensor, density: &Tensor) -> Result<(Tensor, Tensor)> {
    let (r, s) = density.dims2()?;
    let tau = (density * delta)?;
    let mass = tau.cumsum(1)?;
    let transmittance = mass.narrow(1, s - 1, 1)?.squeeze(1)?.neg()?.exp()?;
    let alphas = (1.0 - tau.neg()?.exp()?)?;
    let before = Tensor::cat(
        &[
            Tensor::zeros((r, 1), density.dtype(), density.device())?,
            mass.narrow(1, 0, s - 1)?,
        ],
        1,
    )?;
    Ok(((alphas * before.neg()?.exp()?)?, transmittance))
}

/// Integrates `density (r, s)` and `rgb (r, s, 3)` over bins of width `delta (r, s)`. Returns
/// `(colour (r, 3), weights (r, s), transmittance (r))`, before miss handling and background.
pub(crate) fn integrate(
    delta: &Tensor,
    density: &Tensor,
    rgb: &Tensor,
) -> Result<(Tensor, Tensor, Tensor)> {
    let (w, transmittance) = weights(delta, density)?;
    let colour = rgb.broadcast_mul(&w.unsqueeze(D::Minus1)?)?.sum(1)?;
    Ok((colour, w, transmittance))
}

/// Applies the miss mask `hit (r)` (1 for hits, 0 for misses) and the background: returns
/// `(colour (r, 3), transmittance (r))` with `T = 1`, colour = background for misses.
pub(crate) fn over_background(
    colour: &Tensor,
    transmittance: &Tensor,
    hit: &Tensor,
    background: [f32; 3],
) -> Result<(Tensor, Tensor)> {
    let t = ((transmittance * hit)? + (1.0 - hit)?)?;
    let bg = Tensor::new(&background, colour.device())?.to_dtype(colour.dtype())?;
    let colour = colour
        .broadcast_mul(&hit.unsqueeze(1)?)?
        .add(&t.unsqueeze(1)?.broadcast_mul(&bg.unsqueeze(0)?)?)?;
    Ok((colour, t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autodiff::ops::testing::check_grad;
    use candle_core::Device;

    /// One bin of width 1 with density ln 2: α = ½, so half the colour and T = ½; over a white
    /// background the result is ½·c + ½.
    #[test]
    fn single_bin_half_opacity() -> Result<()> {
        let dev = Device::Cpu;
        let delta = Tensor::new(&[[1f32]], &dev)?;
        let density = Tensor::new(&[[2f32.ln()]], &dev)?;
        let rgb = Tensor::new(&[[[1f32, 0.0, 0.0]]], &dev)?;
        let (c, w, t) = integrate(&delta, &density, &rgb)?;
        assert!((w.to_vec2::<f32>()?[0][0] - 0.5).abs() < 1e-6);
        let hit = Tensor::new(&[1f32], &dev)?;
        let (c, t) = over_background(&c, &t, &hit, [1.0; 3])?;
        let c = c.to_vec2::<f32>()?;
        assert!((c[0][0] - 1.0).abs() < 1e-6 && (c[0][1] - 0.5).abs() < 1e-6);
        assert!((t.to_vec1::<f32>()?[0] - 0.5).abs() < 1e-6);
        Ok(())
    }

    #[test]
    fn deltas_follow_the_partition() {
        // ts 1, 2, 4 in [0, 5]: edges 0, 1.5, 3, 5 → widths 1.5, 1.5, 2.
        assert_eq!(
            deltas(&[1.0, 2.0, 4.0], &[0.0], &[5.0]),
            vec![1.5, 1.5, 2.0]
        );
    }

    #[test]
    fn gradients_match_finite_differences() -> Result<()> {
        let dev = Device::Cpu;
        let delta = Tensor::new(&[[0.3f64, 0.5, 0.2], [0.1, 0.4, 0.7]], &dev)?;
        let density = Tensor::new(&[[0.7f64, 1.5, 0.2], [2.0, 0.1, 0.9]], &dev)?;
        let rgb = crate::autodiff::ops::testing::randn(&[2, 3, 3], 5, &dev)?;
        check_grad(&[density, rgb], |t| {
            let (c, _, tr) = integrate(&delta, &t[0], &t[1])?;
            let hit = Tensor::new(&[1f64, 0.0], &dev)?;
            let (c, tr) = over_background(&c, &tr, &hit, [0.2, 0.4, 0.6])?;
            Tensor::cat(&[c, tr.unsqueeze(1)?], 1)
        })
    }
}
