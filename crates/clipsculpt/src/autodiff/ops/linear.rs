//! Linear maps whose backward computes only the gradients that are needed.
//!
//! candle's matmul backward computes (and keeps) a gradient for every operand, so a frozen weight
//! costs a weight-sized dead gradient and a second matmul, and a broadcast bias an activation-sized
//! one (candle#1241). Here the weight and bias gradients are computed only when they track
//! (trainable `Var`s or latent-derived weights); for frozen weights backward is one matmul.
//!
//! **Mixed precision.** A weight stored in a narrower dtype than the input (bf16/f16 weights, f32
//! activations; `docs/gpu.md`, "Mixed precision") sets the dtype of the product: the input is cast
//! to the weight's dtype at the boundary, multiplied there, and the product cast back before the
//! bias (kept in the input's dtype) is added. Backward does the same with the output gradient, so
//! every gradient leaves in its operand's own dtype.
//!
//! On the CPU in f32 the products run on [`crate::kernels::matmul()`] (column blocks per thread,
//! the weight read transposed through strides): 191–213 GFLOP/s on the published prior's shapes
//! where candle's matmul gave 163–205 on the 2-core development machine.

use std::sync::Arc;

use candle_core::{DType, Result, Tensor, D};

use super::rows::fused_on;
use super::with_f32;
use crate::kernels::{add_row, matmul_new, Mat};

/// `a (m, k) · b (k, n)`, or `a · bᵀ` for `b (n, k)` when `transpose_b`: the CPU's f32 kernel,
/// candle's matmul elsewhere.
fn product(a: &Tensor, b: &Tensor, transpose_b: bool) -> Result<Tensor> {
    match product_f32(a, b, transpose_b, None)? {
        Some(p) => Ok(p),
        None if transpose_b => a.matmul(&b.t()?),
        None => a.matmul(b),
    }
}

/// [`product`] plus `bias (n)` on every row, on the CPU's f32 kernel: one new buffer, written by
/// the product (never zeroed first), the bias added in place (as candle's broadcast addition
/// rounds it). `None` off the CPU, when an operand is not f32 or when the bias is not one value
/// per output column.
fn product_f32(
    a: &Tensor,
    b: &Tensor,
    transpose_b: bool,
    bias: Option<&Tensor>,
) -> Result<Option<Tensor>> {
    let f32s = [a, b]
        .into_iter()
        .chain(bias)
        .all(|t| t.dtype() == DType::F32);
    if !(fused_on(a.device()) && f32s) {
        return Ok(None);
    }
    let (a, b) = (a.contiguous()?, b.contiguous()?);
    let (m, k) = a.dims2()?;
    let n = if transpose_b { b.dim(0)? } else { b.dim(1)? };
    if bias.is_some_and(|bias| bias.dims() != [n]) {
        return Ok(None);
    }
    let mut out = with_f32([&a, &b], |[x, y]| {
        let rhs = if transpose_b {
            Mat::transposed(y, k)
        } else {
            Mat::rows(y, n)
        };
        matmul_new(m, n, k, Mat::rows(x, k), rhs)
    })?;
    if let Some(bias) = bias {
        with_f32([&bias.contiguous()?], |[row]| add_row(&mut out, row))?;
    }
    Tensor::from_vec(out, (m, n), a.device()).map(Some)
}

/// Where f16 gradients are scaled to: their largest magnitude lands at 2⁸, leaving the
/// products headroom below f16's 65504 and room above its smallest subnormal (6·10⁻⁸).
const F16_GRAD_TARGET: f64 = 256.0;

/// The output gradient `g` in the weight's dtype, with the factor to divide the product by.
///
/// f16 has 5 exponent bits, so the tiny gradients of a guidance loss (10⁻⁸ and below) would flush
/// to zero (measured: an all-zero latent gradient on the tests' model). In f16 `g` is scaled by
/// `2⁸ / max|g|` first (computed on the device, no synchronisation) and the product unscaled in the
/// input's dtype: per-op dynamic loss scaling. bf16 has f32's exponent range and needs none.
fn grad_in(g: &Tensor, dtype: DType) -> Result<(Tensor, Option<Tensor>)> {
    if dtype != DType::F16 {
        return Ok((cast(g, dtype)?, None));
    }
    let max = g
        .abs()?
        .max_keepdim(D::Minus1)?
        .flatten_all()?
        .max_keepdim(0)?;
    let scale = (max.to_dtype(DType::F32)?.maximum(1e-30)?.recip()? * F16_GRAD_TARGET)?;
    let scaled = g.broadcast_mul(&scale.reshape(vec![1; g.rank()])?)?;
    Ok((scaled.to_dtype(dtype)?, Some(scale)))
}

/// The product `p` of a scaled gradient back in `dtype`, unscaled.
fn grad_out(p: &Tensor, scale: &Option<Tensor>, dtype: DType) -> Result<Tensor> {
    match scale {
        Some(s) => p
            .to_dtype(DType::F32)?
            .broadcast_div(&s.reshape(vec![1; p.rank()])?)?
            .to_dtype(dtype),
        None => cast(p, dtype),
    }
}

/// `a` in `dtype` (a no-op when it already is).
fn cast(a: &Tensor, dtype: DType) -> Result<Tensor> {
    if a.dtype() == dtype {
        Ok(a.clone())
    } else {
        a.to_dtype(dtype)
    }
}

use crate::autodiff::vjp::{attach, Vjp};

/// `y = x·wᵀ + b` for `x (…, in)`, `w (out, in)`, `b (out)`; gradients only where they track.
pub(crate) fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
    let (out_dim, in_dim) = w.dims2()?;
    let mut out_shape = x.dims().to_vec();
    let last = out_shape.len() - 1;
    if out_shape[last] != in_dim {
        candle_core::bail!(
            "linear: input {:?} does not match weight {:?}",
            x.shape(),
            w.shape()
        );
    }
    out_shape[last] = out_dim;
    let x2 = cast(&x.detach().reshape(((), in_dim))?, w.dtype())?;
    let bias = b.map(Tensor::detach);
    let fused = match x.dtype() {
        DType::F32 => product_f32(&x2, &w.detach(), true, bias.as_ref())?,
        _ => None,
    };
    let y = match (fused, bias) {
        (Some(y), _) => y,
        (None, None) => cast(&product(&x2, &w.detach(), true)?, x.dtype())?,
        (None, Some(b)) => cast(&product(&x2, &w.detach(), true)?, x.dtype())?.broadcast_add(&b)?,
    };
    let y = y.reshape(out_shape)?;
    let mut inputs = vec![x, w];
    inputs.extend(b);
    attach("linear", y, &inputs, Arc::new(linear_backward))
}

/// The input gradient of [`linear`] with a frozen `w`: bitwise what its node's backward gives `x`
/// (for hand-written VJPs that call it without a graph). `x` only lends its shape and dtype.
pub(crate) fn linear_input_grad(g: &Tensor, w: &Tensor, x: &Tensor) -> Result<Tensor> {
    let (out_dim, _) = w.dims2()?;
    let (gw, scale) = grad_in(&g.reshape(((), out_dim))?, w.dtype())?;
    input_grad(&gw, &scale, w, x)
}

/// `g·w` from the gradient already in the weight's dtype, back in `x`'s dtype and shape.
fn input_grad(gw: &Tensor, scale: &Option<Tensor>, w: &Tensor, x: &Tensor) -> Result<Tensor> {
    grad_out(&product(gw, w, false)?, scale, x.dtype())?.reshape(x.shape())
}

fn linear_backward(v: &Vjp) -> Result<Vec<Option<Tensor>>> {
    let (x, w) = (&v.inputs[0], &v.inputs[1]);
    let (out_dim, in_dim) = w.dims2()?;
    let g = v.grad.reshape(((), out_dim))?;
    let (gw, scale) = grad_in(&g, w.dtype())?;
    let dx = if v.needs(0) {
        Some(input_grad(&gw, &scale, w, x)?)
    } else {
        None
    };
    let dw = if v.needs(1) {
        let x2 = cast(&x.reshape(((), in_dim))?, w.dtype())?;
        Some(grad_out(&gw.t()?.matmul(&x2)?, &scale, w.dtype())?)
    } else {
        None
    };
    let mut grads = vec![dx, dw];
    if v.inputs.len() > 2 {
        grads.push(if v.needs(2) { Some(g.sum(0)?) } else { None });
    }
    Ok(grads)
}

/// Per-item linear maps: `y[i] = x[i]·w[i]ᵀ (+ b[i])` for `x (B, n, in)`, `w (B, out, in)`,
/// `b (B, out)`; used when the weights themselves are computed from a latent.
pub(crate) fn batched_linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
    let xw = cast(&x.detach(), w.dtype())?;
    let mut y = cast(&xw.matmul(&w.detach().transpose(1, 2)?)?, x.dtype())?;
    if let Some(b) = b {
        y = y.broadcast_add(&b.detach().unsqueeze(1)?)?;
    }
    let mut inputs = vec![x, w];
    inputs.extend(b);
    attach(
        "batched_linear",
        y,
        &inputs,
        Arc::new(|v: &Vjp| {
            let (x, w, g) = (&v.inputs[0], &v.inputs[1], v.grad);
            let (gw, scale) = grad_in(g, w.dtype())?;
            let dx = if v.needs(0) {
                Some(grad_out(&gw.matmul(w)?, &scale, x.dtype())?)
            } else {
                None
            };
            let dw = if v.needs(1) {
                let p = gw.transpose(1, 2)?.matmul(&cast(x, w.dtype())?)?;
                Some(grad_out(&p, &scale, w.dtype())?)
            } else {
                None
            };
            let mut grads = vec![dx, dw];
            if v.inputs.len() > 2 {
                grads.push(if v.needs(2) {
                    Some(g.sum(D::Minus2)?)
                } else {
                    None
                });
            }
            Ok(grads)
        }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autodiff::ops::testing::{bits, check_grad, randn};
    use candle_core::{DType, Device, Var};

    #[test]
    fn matches_plain_matmul() -> Result<()> {
        let dev = Device::Cpu;
        let (x, w, b) = (
            randn(&[2, 3, 4], 1, &dev)?,
            randn(&[5, 4], 2, &dev)?,
            randn(&[5], 3, &dev)?,
        );
        let reference = x.broadcast_matmul(&w.t()?)?.broadcast_add(&b)?;
        let err = (linear(&x, &w, Some(&b))? - reference)?
            .abs()?
            .max_all()?
            .to_scalar::<f32>()?;
        assert!(err < 1e-6);
        Ok(())
    }

    /// On the CPU in f32 the bias is added in place; the result is bitwise the product plus
    /// candle's broadcast addition.
    #[test]
    fn bias_in_place_rounds_as_candles_addition() -> Result<()> {
        let dev = Device::Cpu;
        let (x, w, b) = (
            randn(&[3, 70, 24], 10, &dev)?,
            randn(&[200, 24], 11, &dev)?,
            randn(&[200], 12, &dev)?,
        );
        let plain = product(&x.reshape((210, 24))?, &w, true)?.broadcast_add(&b)?;
        let fused = linear(&x, &w, Some(&b))?.reshape((210, 200))?;
        assert_eq!(bits(&fused)?, bits(&plain)?);
        Ok(())
    }

    #[test]
    fn gradients_match_finite_differences() -> Result<()> {
        let dev = Device::Cpu;
        let (x, w, b) = (
            randn(&[2, 3, 4], 4, &dev)?,
            randn(&[5, 4], 5, &dev)?,
            randn(&[5], 6, &dev)?,
        );
        check_grad(&[x, w, b], |t| linear(&t[0], &t[1], Some(&t[2])))?;
        let (x, w, b) = (
            randn(&[2, 3, 4], 7, &dev)?,
            randn(&[2, 5, 4], 8, &dev)?,
            randn(&[2, 5], 9, &dev)?,
        );
        check_grad(&[x, w, b], |t| batched_linear(&t[0], &t[1], Some(&t[2])))
    }

    /// bf16 and f16 weights with f32 activations: the product is within the half type's rounding
    /// of the f32 one (relative ~2⁻⁸ for bf16, ~2⁻¹¹ for f16, summed over 64 terms), the output
    /// and the input gradient stay f32, and the frozen weight gets no gradient.
    #[test]
    fn half_weights_keep_f32_activations() -> Result<()> {
        let dev = Device::Cpu;
        let (x, w, b) = (
            randn(&[3, 7, 64], 11, &dev)?,
            randn(&[16, 64], 12, &dev)?,
            randn(&[16], 13, &dev)?,
        );
        let exact = linear(&x, &w, Some(&b))?;
        let scale = exact.abs()?.max_all()?.to_scalar::<f32>()?;
        for (dtype, tol) in [(DType::BF16, 0.03), (DType::F16, 0.005)] {
            let xv = Var::from_tensor(&x)?;
            let y = linear(xv.as_tensor(), &w.to_dtype(dtype)?, Some(&b))?;
            assert_eq!(y.dtype(), DType::F32);
            let err = (&y - &exact)?.abs()?.max_all()?.to_scalar::<f32>()? / scale;
            assert!(err < tol, "{dtype:?}: relative error {err}");
            assert!(
                err > 0.0,
                "{dtype:?}: the product was not computed in {dtype:?}"
            );
            let grads = y.sum_all()?.backward()?;
            let g = grads.get(&xv).expect("x gets a gradient");
            assert_eq!(g.dtype(), DType::F32);
            assert_eq!(grads.get_ids().count(), 1);
            let yb = batched_linear(
                xv.as_tensor(),
                &w.to_dtype(dtype)?.unsqueeze(0)?.repeat((3, 1, 1))?,
                None,
            )?;
            let plain = linear(&x, &w, None)?;
            let err = (yb - plain)?.abs()?.max_all()?.to_scalar::<f32>()? / scale;
            assert!(err < tol, "{dtype:?} batched: relative error {err}");
        }
        Ok(())
    }

    /// With a frozen weight, backward returns the input gradient and stores nothing for the weight.
    #[test]
    fn frozen_weight_gets_no_gradient() -> Result<()> {
        let dev = Device::Cpu;
        let x = Var::from_tensor(&randn(&[3, 4], 1, &dev)?)?;
        let (w, b) = (randn(&[5, 4], 2, &dev)?, randn(&[5], 3, &dev)?);
        let grads = linear(x.as_tensor(), &w, Some(&b))?.sum_all()?.backward()?;
        assert!(grads.get(&x).is_some());
        assert!(grads.get(&w).is_none() && grads.get(&b).is_none());
        // Intermediate gradients are freed during backward; nothing weight-sized is left behind.
        assert_eq!(grads.get_ids().count(), 1, "only x holds a gradient");
        Ok(())
    }
}
