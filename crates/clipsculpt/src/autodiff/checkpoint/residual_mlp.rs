//! A reference block for exercising the engine (tests and `benches/checkpoint.rs`): a pre-LN
//! residual MLP, `x + W2·gelu(W1·LN(x) + b1) ⊙ mask + tanh(x·Cᵀ)`, where the optional context
//! holds `mask` (dropout drawn outside) and `C` (a differentiable matrix shared by every block,
//! like latent-derived weights).

use candle_core::{Device, Module, Result, Tensor};

use super::chain::Block;
use crate::autodiff::nn::{LayerNorm, Linear};
use crate::autodiff::ops;
use crate::autodiff::rng::Rng;

/// A pre-LN residual MLP block with random frozen weights.
#[derive(Debug, Clone)]
pub struct ResidualMlp {
    ln: LayerNorm,
    fc1: Linear,
    fc2: Linear,
}

impl ResidualMlp {
    /// Random weights from `seed` for width `d` and hidden width `h`.
    pub fn new(d: usize, h: usize, seed: u64, dev: &Device) -> Result<Self> {
        let mut rng = Rng::new(seed);
        let s = 1.0 / (d as f64).sqrt();
        Ok(Self {
            ln: LayerNorm::new(
                rng.normal_tensor(&[d], dev)?.affine(0.1, 1.0)?,
                Some(rng.normal_tensor(&[d], dev)?),
                1e-5,
            ),
            fc1: Linear::new(
                (rng.normal_tensor(&[h, d], dev)? * s)?,
                Some(rng.normal_tensor(&[h], dev)?),
            ),
            fc2: Linear::new((rng.normal_tensor(&[d, h], dev)? * (s / 2.0))?, None),
        })
    }
}

impl Block for ResidualMlp {
    fn forward(&self, x: &Tensor, ctx: &[Tensor]) -> Result<Tensor> {
        let y = self.fc2.forward(
            &ops::Activation::GeluErf.forward(&self.fc1.forward(&self.ln.forward(x)?)?)?,
        )?;
        let y = match ctx.first() {
            Some(mask) => y.broadcast_mul(mask)?,
            None => y,
        };
        let y = (x + y)?;
        match ctx.get(1) {
            Some(c) => y + ops::Activation::Tanh.forward(&ops::linear(x, c, None)?)?,
            None => Ok(y),
        }
    }
}
