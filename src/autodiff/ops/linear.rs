//! Linear maps whose backward computes only the gradients that are needed.
//!
//! candle's matmul backward computes (and keeps) a gradient for every operand, so a frozen weight
//! costs a weight-sized dead gradient and a second matmul, and a broadcast bias an activation-sized
//! one (candle#1241). Here the weight and bias gradients are computed only when they track
//! (trainable `Var`s or latent-derived weights); for frozen weights backward is one matmul.

use std::sync::Arc;

use candle_core::{Result, Tensor, D};

use crate::autodiff::vjp::{attach, Vjp};

/// `y = x·wᵀ + b` for `x (…, in)`, `w (out, in)`, `b (out)`; gradients only where they track.
pub fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
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
    let x2 = x.detach().reshape(((), in_dim))?;
    let mut y = x2.matmul(&w.detach().t()?)?;
    if let Some(b) = b {
        y = y.broadcast_add(&b.detach())?;
    }
    let y = y.reshape(out_shape)?;
    let mut inputs = vec![x, w];
    inputs.extend(b);
    attach("linear", y, &inputs, Arc::new(linear_backward))
}

fn linear_backward(v: &Vjp) -> Result<Vec<Option<Tensor>>> {
    let (x, w) = (&v.inputs[0], &v.inputs[1]);
    let (out_dim, in_dim) = w.dims2()?;
    let g = v.grad.reshape(((), out_dim))?;
    let dx = if v.needs(0) {
        Some(g.matmul(w)?.reshape(x.shape())?)
    } else {
        None
    };
    let dw = if v.needs(1) {
        Some(g.t()?.matmul(&x.reshape(((), in_dim))?)?)
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
pub fn batched_linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
    let mut y = x.detach().matmul(&w.detach().transpose(1, 2)?)?;
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
            let dx = if v.needs(0) { Some(g.matmul(w)?) } else { None };
            let dw = if v.needs(1) {
                Some(g.transpose(1, 2)?.matmul(x)?)
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
    use crate::autodiff::ops::testing::{check_grad, randn};
    use candle_core::{Device, Var};

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
