//! The attention's head split `(n, t, heads·d) → (n, heads, t, d)` (optionally scaled, as the
//! queries are) and merge back, differentiable. On the CPU in f32 both run the multi-threaded
//! kernels of [`crate::kernels::heads`], bitwise what candle's `reshape`, `transpose`,
//! `contiguous` and `affine` give (each the other's backward); elsewhere candle's ops.

use std::sync::Arc;

use candle_core::{DType, Result, Tensor};

use super::rows::fused_on;
use super::with_f32;
use crate::autodiff::vjp::{attach, Vjp};
use crate::kernels::heads::{self, Heads};

/// `x (n, t, heads·d)` as `(n, heads, t, d)`, times `scale` when given.
pub(crate) fn split_heads(x: &Tensor, heads: usize, scale: Option<f64>) -> Result<Tensor> {
    let (n, t, width) = x.dims3()?;
    if heads == 0 || width % heads != 0 {
        candle_core::bail!("split_heads: {width} features do not split into {heads} heads");
    }
    let s = Heads {
        n,
        t,
        heads,
        d: width / heads,
    };
    if !runs_fused(x) {
        let y = x
            .reshape((n, t, heads, s.d))?
            .transpose(1, 2)?
            .contiguous()?;
        return match scale {
            Some(by) => y * by,
            None => Ok(y),
        };
    }
    let y = permute(&x.detach(), s, scale, Direction::Split)?;
    attach(
        "split_heads",
        y,
        &[x],
        Arc::new(move |v: &Vjp| Ok(vec![Some(permute(v.grad, s, scale, Direction::Merge)?)])),
    )
}

/// `o (n, heads, t, d)` as `(n, t, heads·d)`.
pub(crate) fn merge_heads(o: &Tensor) -> Result<Tensor> {
    merge_heads_scaled(o, None)
}

/// [`merge_heads`] of `o` times `scale` when given (the split's backward).
pub(crate) fn merge_heads_scaled(o: &Tensor, scale: Option<f64>) -> Result<Tensor> {
    let (n, heads, t, d) = o.dims4()?;
    if !runs_fused(o) {
        let o = match scale {
            Some(by) => (o * by)?,
            None => o.clone(),
        };
        return o.transpose(1, 2)?.reshape((n, t, heads * d));
    }
    let s = Heads { n, t, heads, d };
    let y = permute(&o.detach(), s, scale, Direction::Merge)?;
    attach(
        "merge_heads",
        y,
        &[o],
        Arc::new(move |v: &Vjp| Ok(vec![Some(permute(v.grad, s, scale, Direction::Split)?)])),
    )
}

fn runs_fused(x: &Tensor) -> bool {
    fused_on(x.device()) && x.dtype() == DType::F32
}

#[derive(Clone, Copy)]
enum Direction {
    Split,
    Merge,
}

/// The f32 CPU kernel of one direction, on a detached tensor.
fn permute(x: &Tensor, s: Heads, scale: Option<f64>, to: Direction) -> Result<Tensor> {
    let x = x.contiguous()?;
    let by = scale.map(|v| v as f32);
    let out = with_f32([&x], |[x]| match to {
        Direction::Split => heads::split_heads(x, s, by),
        Direction::Merge => heads::merge_heads(x, s, by),
    })?;
    match to {
        Direction::Split => Tensor::from_vec(out, (s.n, s.heads, s.t, s.d), x.device()),
        Direction::Merge => Tensor::from_vec(out, (s.n, s.t, s.heads * s.d), x.device()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autodiff::ops::testing::{bits, randn};
    use candle_core::{Device, Var};

    /// Split (scaled and not) and merge equal candle's composition bit for bit, forward and
    /// backward (the gradient through each against candle's own backward of the composition).
    #[test]
    fn split_and_merge_equal_candles_ops_forward_and_backward() -> Result<()> {
        let dev = Device::Cpu;
        let (n, t, heads, d) = (2, 7, 3, 4);
        let x = Var::from_tensor(&randn(&[n, t, heads * d], 5, &dev)?)?;
        let w = randn(&[n, heads, t, d], 6, &dev)?;
        for scale in [None, Some(0.125), Some(0.3)] {
            let ours = split_heads(x.as_tensor(), heads, scale)?;
            let y = x.reshape((n, t, heads, d))?.transpose(1, 2)?.contiguous()?;
            let theirs = match scale {
                Some(by) => (y * by)?,
                None => y,
            };
            assert_eq!(bits(&ours)?, bits(&theirs)?);
            let g_ours = (&ours * &w)?.sum_all()?.backward()?;
            let g_theirs = (&theirs * &w)?.sum_all()?.backward()?;
            let grad = |g: &candle_core::backprop::GradStore| {
                g.get(x.as_tensor())
                    .cloned()
                    .ok_or_else(|| candle_core::Error::Msg("no gradient reached x".into()))
            };
            assert_eq!(bits(&grad(&g_ours)?)?, bits(&grad(&g_theirs)?)?);
        }
        let o = Var::from_tensor(&w)?;
        let v = randn(&[n, t, heads * d], 7, &dev)?;
        let ours = merge_heads(o.as_tensor())?;
        let theirs = o.transpose(1, 2)?.reshape((n, t, heads * d))?;
        assert_eq!(bits(&ours)?, bits(&theirs)?);
        let g_ours = (&ours * &v)?.sum_all()?.backward()?;
        let g_theirs = (&theirs * &v)?.sum_all()?.backward()?;
        let (a, b) = (g_ours.get(o.as_tensor()), g_theirs.get(o.as_tensor()));
        let (Some(a), Some(b)) = (a, b) else {
            candle_core::bail!("no gradient reached o");
        };
        assert_eq!(bits(a)?, bits(b)?);
        // Features that do not split into the heads are an error, not a panic.
        assert!(split_heads(&v, 5, None).is_err());
        Ok(())
    }
}
