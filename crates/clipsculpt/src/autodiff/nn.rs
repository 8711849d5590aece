//! Layers with candle-nn's constructor signatures whose backward is correct and lean: the
//! LayerNorm passes gradients (candle-nn's fused one silently does not) and the linear computes
//! weight gradients only for weights that track. Model files import these instead of candle-nn's.
//!
//! **Precision convention.** A VarBuilder's dtype is the dtype of the frozen *matrix* weights
//! ([`linear`], [`matrix`]); every other parameter (biases, norms, embeddings, scales) is loaded
//! with [`param`] in [`param_dtype`], which is f32 under a bf16/f16 VarBuilder and the
//! VarBuilder's own dtype otherwise (f32, or f64 in parity tests). Activations follow the
//! parameters, so a half-precision model computes in f32 except inside its matrix products.

use candle_core::{DType, Module, Result, Shape, Tensor};
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
    pub(crate) fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// The `(out)` bias, if any.
    pub(crate) fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }

    /// Whether the weight or the bias tracks a gradient (trainable, or derived from one).
    pub(crate) fn tracks(&self) -> bool {
        tracks(&self.weight, self.bias.as_ref())
    }
}

/// Whether `weight` or `bias` tracks a gradient.
fn tracks(weight: &Tensor, bias: Option<&Tensor>) -> bool {
    weight.track_op() || bias.is_some_and(Tensor::track_op)
}

impl Module for Linear {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        ops::linear(x, &self.weight, self.bias.as_ref())
    }
}

/// The dtype of the parameters that are not matrix weights under a VarBuilder of `dtype`:
/// f32 for the half types, else `dtype` itself.
pub(crate) fn param_dtype(dtype: DType) -> DType {
    match dtype {
        DType::BF16 | DType::F16 => DType::F32,
        other => other,
    }
}

/// Loads a parameter that keeps full precision (bias, norm, embedding, scale) in
/// [`param_dtype`]`(vb.dtype())`.
pub(crate) fn param<S: Into<Shape>>(vb: &VarBuilder, shape: S, name: &str) -> Result<Tensor> {
    vb.get_with_hints_dtype(shape, name, Default::default(), param_dtype(vb.dtype()))
}

/// Loads a frozen matrix weight in the VarBuilder's dtype (the one matrix products run in).
pub(crate) fn matrix<S: Into<Shape>>(vb: &VarBuilder, shape: S, name: &str) -> Result<Tensor> {
    vb.get(shape, name)
}

/// Loads `weight (out, in)` (VarBuilder dtype) and `bias (out)` ([`param`]) under `vb`.
pub(crate) fn linear(in_dim: usize, out_dim: usize, vb: VarBuilder) -> Result<Linear> {
    let weight = matrix(&vb, (out_dim, in_dim), "weight")?;
    let bias = param(&vb, out_dim, "bias")?;
    Ok(Linear::new(weight, Some(bias)))
}

/// Loads `weight (out, in)` under `vb`; no bias.
pub(crate) fn linear_no_bias(in_dim: usize, out_dim: usize, vb: VarBuilder) -> Result<Linear> {
    Ok(Linear::new(matrix(&vb, (out_dim, in_dim), "weight")?, None))
}

/// LayerNorm over the last dimension, differentiable (see [`ops::layer_norm`]).
#[derive(Debug, Clone)]
pub(crate) struct LayerNorm {
    weight: Tensor,
    bias: Option<Tensor>,
    eps: f64,
}

impl LayerNorm {
    /// A LayerNorm from its `(d)` weight, optional `(d)` bias and epsilon.
    pub(crate) fn new(weight: Tensor, bias: Option<Tensor>, eps: f64) -> Self {
        Self { weight, bias, eps }
    }

    /// The `(d)` weight.
    pub(crate) fn weight(&self) -> &Tensor {
        &self.weight
    }

    /// The `(d)` bias, if any.
    pub(crate) fn bias(&self) -> Option<&Tensor> {
        self.bias.as_ref()
    }

    /// Whether the weight or the bias tracks a gradient.
    pub(crate) fn tracks(&self) -> bool {
        tracks(&self.weight, self.bias.as_ref())
    }
}

impl LayerNorm {
    /// The input gradient for the output gradient `g`, weight and bias frozen (no graph).
    pub(crate) fn input_grad(&self, x: &Tensor, g: &Tensor) -> Result<Tensor> {
        ops::layer_norm_input_grad(x, &self.weight, g, self.eps)
    }
}

impl Module for LayerNorm {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        ops::layer_norm(x, &self.weight, self.bias.as_ref(), self.eps)
    }
}

/// Loads `weight (size)` and `bias (size)` under `vb` ([`param`]: f32 in a half-precision model).
pub(crate) fn layer_norm(size: usize, eps: f64, vb: VarBuilder) -> Result<LayerNorm> {
    Ok(LayerNorm::new(
        param(&vb, size, "weight")?,
        Some(param(&vb, size, "bias")?),
        eps,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autodiff::ops::testing::randn;
    use candle_core::{Device, Var};

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
