//! Layers with candle-nn's constructor signatures whose backward is correct and lean: the
//! LayerNorm passes gradients (candle-nn's fused one silently does not) and the linear computes
//! weight gradients only for weights that track. Model files import these instead of candle-nn's.

use candle_core::{Module, Result, Tensor};
use candle_nn::VarBuilder;

use super::ops;

/// A linear layer `y = x·wᵀ + b`; frozen weights get no gradient (see [`ops::linear`]).
#[derive(Debug, Clone)]
pub struct Linear {
    weight: Tensor,
    bias: Option<Tensor>,
}

impl Linear {
    /// A linear layer from a `(out, in)` weight and an optional `(out)` bias.
    pub fn new(weight: Tensor, bias: Option<Tensor>) -> Self {
        Self { weight, bias }
    }

    /// The `(out, in)` weight.
    pub fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// The `(out)` bias, if any.
    pub fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }
}

impl Module for Linear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        ops::linear(x, &self.weight, self.bias.as_ref())
    }
}

/// Loads `weight (out, in)` and `bias (out)` under `vb`.
pub fn linear(in_dim: usize, out_dim: usize, vb: VarBuilder) -> Result<Linear> {
    let weight = vb.get((out_dim, in_dim), "weight")?;
    let bias = vb.get(out_dim, "bias")?;
    Ok(Linear::new(weight, Some(bias)))
}

/// Loads `weight (out, in)` under `vb`; no bias.
pub fn linear_no_bias(in_dim: usize, out_dim: usize, vb: VarBuilder) -> Result<Linear> {
    Ok(Linear::new(vb.get((out_dim, in_dim), "weight")?, None))
}

/// LayerNorm over the last dimension, differentiable (see [`ops::layer_norm`]).
#[derive(Debug, Clone)]
pub struct LayerNorm {
    weight: Tensor,
    bias: Option<Tensor>,
    eps: f64,
}

impl LayerNorm {
    /// A LayerNorm from its `(d)` weight, optional `(d)` bias and epsilon.
    pub fn new(weight: Tensor, bias: Option<Tensor>, eps: f64) -> Self {
        Self { weight, bias, eps }
    }
}

impl Module for LayerNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        ops::layer_norm(x, &self.weight, self.bias.as_ref(), self.eps)
    }
}

/// Loads `weight (size)` and `bias (size)` under `vb`.
pub fn layer_norm(size: usize, eps: f64, vb: VarBuilder) -> Result<LayerNorm> {
    Ok(LayerNorm::new(
        vb.get(size, "weight")?,
        Some(vb.get(size, "bias")?),
        eps,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autodiff::ops::testing::randn;
    use candle_core::{DType, Device, Var};

    /// The silent-detach trap: candle-nn's LayerNorm on a contiguous input returns an untracked
    /// output, so no gradient reaches x; ours does.
    #[test]
    fn layer_norm_passes_the_gradient_where_candle_nn_does_not() -> Result<()> {
        let dev = Device::Cpu;
        let x = Var::from_tensor(&randn(&[2, 8], 1, &dev)?)?;
        let (w, b) = (
            Tensor::ones(8, DType::F32, &dev)?,
            Tensor::zeros(8, DType::F32, &dev)?,
        );
        let theirs =
            candle_nn::LayerNorm::new(w.clone(), b.clone(), 1e-5).forward(x.as_tensor())?;
        assert!(
            !theirs.track_op(),
            "candle-nn's fused LayerNorm is expected to detach"
        );
        let ours = LayerNorm::new(w, Some(b), 1e-5).forward(x.as_tensor())?;
        let grads = (ours.sqr()?.sum_all()? + x.as_tensor().sum_all()?)?.backward()?;
        let g = grads.get(&x).expect("gradient reaches x");
        assert!(g.abs()?.sum_all()?.to_scalar::<f32>()? > 0.0);
        Ok(())
    }
}
