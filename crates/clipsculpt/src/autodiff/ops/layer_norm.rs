//! LayerNorm over the last dimension with an analytic backward for the input, weight and bias.
//!
//! Forward: `y = x̂·w + b`, `x̂ = (x − μ)·r`, `r = 1/√(var + eps)` (biased variance, as PyTorch).
//! Backward, with `ĝ = g·w`: `dx = r·(ĝ − mean(ĝ) − x̂·mean(ĝ·x̂))`, `dw = Σ g·x̂`, `db = Σ g`.
//! On the CPU `dx` is one fused pass over the rows (no input-sized temporaries besides `dx`);
//! elsewhere composed ops over row chunks.

use std::sync::Arc;

use candle_core::{CpuStorage, CustomOp3, DType, Layout, Result, Shape, Tensor, D};

use super::contiguous_slice;
use super::rows::{by_rows, fused_on};
use crate::autodiff::vjp::{attach, Vjp};
use crate::kernels::{ln_backward, ln_stats, zeros, Real};

/// Differentiable LayerNorm over the last dimension; `weight`/`bias` have that dimension's size.
pub(crate) fn layer_norm(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<Tensor> {
    let xd = x.detach().contiguous()?;
    let y = if x.dtype() == DType::F64 {
        // The fused kernel has no f64 path; the composed form is exact (used by f64 gradient checks).
        let b = match bias {
            Some(b) => b.detach(),
            None => weight.detach().zeros_like()?,
        };
        candle_nn::ops::layer_norm_slow(&xd, &weight.detach(), &b, eps as f32)?
    } else {
        match bias {
            Some(b) => candle_nn::ops::layer_norm(&xd, &weight.detach(), &b.detach(), eps as f32)?,
            None => {
                let zeros = weight.detach().zeros_like()?;
                candle_nn::ops::layer_norm(&xd, &weight.detach(), &zeros, eps as f32)?
            }
        }
    };
    let mut inputs = vec![x, weight];
    if let Some(b) = bias {
        inputs.push(b);
    }
    attach(
        "layer_norm",
        y,
        &inputs,
        Arc::new(move |v: &Vjp| backward(v, eps)),
    )
}

fn backward(v: &Vjp, eps: f64) -> Result<Vec<Option<Tensor>>> {
    let (x, w, g) = (&v.inputs[0], &v.inputs[1], v.grad);
    if !v.needs(1) && !v.inputs.get(2).is_some_and(|_| v.needs(2)) {
        let dx = if v.needs(0) {
            Some(layer_norm_input_grad(x, w, g, eps)?)
        } else {
            None
        };
        let mut out = vec![dx, None];
        out.resize(v.inputs.len(), None);
        return Ok(out);
    }
    composed_backward(v, eps)
}

/// `∂LayerNorm/∂x · g` with a frozen weight and bias: bitwise what the node's backward gives `x`
/// (for hand-written VJPs that call it without a graph). One fused pass on the CPU.
pub(crate) fn layer_norm_input_grad(
    x: &Tensor,
    w: &Tensor,
    g: &Tensor,
    eps: f64,
) -> Result<Tensor> {
    let fused = fused_on(x.device())
        && matches!(x.dtype(), DType::F32 | DType::F64)
        && w.dtype() == x.dtype()
        && g.dtype() == x.dtype();
    if fused {
        return input_grad(x, w, g, eps);
    }
    let dtype = x.dtype();
    let w = w.to_dtype(DType::F32)?;
    by_rows(&[x, g], |p| {
        let (x, g) = (p[0].to_dtype(DType::F32)?, p[1].to_dtype(DType::F32)?);
        composed_input_grad(&x, &w, &g, eps)?.to_dtype(dtype)
    })
}

/// `(x̂, r)`: the normalised rows and their `1/√(var + eps)`.
fn normalized(x: &Tensor, eps: f64) -> Result<(Tensor, Tensor)> {
    let mu = x.mean_keepdim(D::Minus1)?;
    let xc = x.broadcast_sub(&mu)?;
    let r = (xc.sqr()?.mean_keepdim(D::Minus1)? + eps)?
        .sqrt()?
        .recip()?;
    Ok((xc.broadcast_mul(&r)?, r))
}

/// The composed `dx` in f32 (any device).
fn composed_input_grad(x: &Tensor, w: &Tensor, g: &Tensor, eps: f64) -> Result<Tensor> {
    let (xhat, r) = normalized(x, eps)?;
    let gh = g.broadcast_mul(w)?;
    let m1 = gh.mean_keepdim(D::Minus1)?;
    let m2 = (&gh * &xhat)?.mean_keepdim(D::Minus1)?;
    gh.broadcast_sub(&m1)?
        .sub(&xhat.broadcast_mul(&m2)?)?
        .broadcast_mul(&r)
}

/// `dx` on the CPU in one pass: each row's statistics, then [`ln_backward`].
fn input_grad(x: &Tensor, w: &Tensor, g: &Tensor, eps: f64) -> Result<Tensor> {
    let (x, w, g) = (x.contiguous()?, w.contiguous()?, g.contiguous()?);
    x.apply_op3_no_bwd(&w, &g, &InputVjp(eps))
}

/// The composed backward (any device and dtype; weight and bias gradients).
fn composed_backward(v: &Vjp, eps: f64) -> Result<Vec<Option<Tensor>>> {
    let (x, w, g) = (&v.inputs[0], &v.inputs[1], v.grad);
    let dtype = x.dtype();
    let (x, w, g) = (
        x.to_dtype(DType::F32)?,
        w.to_dtype(DType::F32)?,
        g.to_dtype(DType::F32)?,
    );
    let rows = |t: &Tensor| -> Result<Tensor> {
        let n = t.dim(D::Minus1)?;
        t.reshape(((), n))?.sum(0)
    };
    let dx = if v.needs(0) {
        Some(composed_input_grad(&x, &w, &g, eps)?.to_dtype(dtype)?)
    } else {
        None
    };
    let dw = if v.needs(1) {
        let (xhat, _) = normalized(&x, eps)?;
        Some(rows(&(&g * &xhat)?)?.to_dtype(dtype)?)
    } else {
        None
    };
    let mut out = vec![dx, dw];
    if v.inputs.len() > 2 {
        out.push(if v.needs(2) {
            Some(rows(&g)?.to_dtype(dtype)?)
        } else {
            None
        });
    }
    Ok(out)
}

/// The CPU kernel `(x, w, g) -> ∂LayerNorm/∂x · g` over contiguous f32/f64 storages.
struct InputVjp(f64);

impl InputVjp {
    fn run<T: Real>(&self, x: &[T], w: &[T], g: &[T]) -> Vec<T> {
        let d = w.len();
        let rows = x.len() / d.max(1);
        let (mut mu, mut rstd) = (vec![T::zero(); rows], vec![T::zero(); rows]);
        ln_stats(x, d, T::from_f64(self.0), &mut mu, &mut rstd);
        let mut dx = zeros(x.len());
        ln_backward(g, x, &mu, &rstd, w, &mut dx, false);
        dx
    }
}

impl CustomOp3 for InputVjp {
    fn name(&self) -> &'static str {
        "layer_norm_vjp"
    }

    fn cpu_fwd(
        &self,
        x: &CpuStorage,
        lx: &Layout,
        w: &CpuStorage,
        lw: &Layout,
        g: &CpuStorage,
        lg: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        const OP: &str = "layer_norm_vjp";
        let out = match (x, w, g) {
            (CpuStorage::F32(x), CpuStorage::F32(w), CpuStorage::F32(g)) => {
                CpuStorage::F32(self.run(
                    contiguous_slice(x, lx, OP)?,
                    contiguous_slice(w, lw, OP)?,
                    contiguous_slice(g, lg, OP)?,
                ))
            }
            (CpuStorage::F64(x), CpuStorage::F64(w), CpuStorage::F64(g)) => {
                CpuStorage::F64(self.run(
                    contiguous_slice(x, lx, OP)?,
                    contiguous_slice(w, lw, OP)?,
                    contiguous_slice(g, lg, OP)?,
                ))
            }
            _ => candle_core::bail!("layer_norm_vjp: unsupported dtype (bug)"),
        };
        Ok((out, lx.shape().clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autodiff::ops::testing::{check_grad, randn};
    use candle_core::Device;

    /// Matches the composed-primitive reference `candle_nn::ops::layer_norm_slow` in value.
    #[test]
    fn matches_reference_forward() -> Result<()> {
        let dev = Device::Cpu;
        let x = randn(&[3, 5, 8], 1, &dev)?;
        let w = randn(&[8], 2, &dev)?;
        let b = randn(&[8], 3, &dev)?;
        let ours = layer_norm(&x, &w, Some(&b), 1e-5)?;
        let reference = candle_nn::ops::layer_norm_slow(&x, &w, &b, 1e-5)?;
        let err = (ours - reference)?.abs()?.max_all()?.to_scalar::<f32>()?;
        assert!(err < 1e-5, "max error {err}");
        Ok(())
    }

    /// d/dx, d/dw, d/db of Σ c·LN(x) equal central finite differences.
    #[test]
    fn gradients_match_finite_differences() -> Result<()> {
        let dev = Device::Cpu;
        let x = randn(&[4, 6], 4, &dev)?;
        let w = randn(&[6], 5, &dev)?;
        let b = randn(&[6], 6, &dev)?;
        check_grad(&[x, w, b], |t| layer_norm(&t[0], &t[1], Some(&t[2]), 1e-5))
    }

    /// The fused input gradient (frozen weight and bias) matches finite differences, and the
    /// composed backward, in f32 over many rows.
    #[test]
    fn fused_input_gradient_matches() -> Result<()> {
        let dev = Device::Cpu;
        let w = randn(&[6], 5, &dev)?.to_dtype(DType::F64)?;
        let b = randn(&[6], 6, &dev)?.to_dtype(DType::F64)?;
        let x = randn(&[4, 6], 4, &dev)?;
        check_grad(&[x], |t| layer_norm(&t[0], &w, Some(&b), 1e-5))?;
        let x = candle_core::Var::from_tensor(&randn(&[70, 33], 7, &dev)?)?;
        let (w, b) = (randn(&[33], 8, &dev)?, randn(&[33], 9, &dev)?);
        let gy = randn(&[70, 33], 10, &dev)?;
        let y = layer_norm(x.as_tensor(), &w, Some(&b), 1e-5)?;
        let fused = (y * &gy)?.sum_all()?.backward()?;
        let fused = fused.get(&x).expect("input gradient").clone();
        let wv = candle_core::Var::from_tensor(&w)?;
        let y = layer_norm(x.as_tensor(), wv.as_tensor(), Some(&b), 1e-5)?;
        let composed = (y * &gy)?.sum_all()?.backward()?;
        let composed = composed.get(&x).expect("input gradient").clone();
        let err = (fused - &composed)?.abs()?.max_all()?.to_scalar::<f32>()?;
        let scale = composed.abs()?.max_all()?.to_scalar::<f32>()?;
        assert!(err <= 1e-5 * scale, "max error {err} at scale {scale}");
        Ok(())
    }
}
