//! A differentiable loss of a latent at a sampler step, as guided sampling and end-to-end
//! guidance use it, and the RMS that normalises its gradient.

use candle_core::{Result, Tensor};

use crate::autodiff::rng::Rng;

/// A differentiable loss of a latent `(1, rows, d)` at a sampler step: `(loss, mean cosine)`,
/// scalars, drawing its random views from the generator it is given.
pub trait LatentLoss {
    /// The loss and the mean cosine of `z` (whose graph leads back to the sampler state) at Heun
    /// step `step`.
    fn loss(&self, z: &Tensor, step: usize, rng: &mut Rng) -> Result<(Tensor, Tensor)>;
}

impl<F: Fn(&Tensor, usize, &mut Rng) -> Result<(Tensor, Tensor)>> LatentLoss for F {
    fn loss(&self, z: &Tensor, step: usize, rng: &mut Rng) -> Result<(Tensor, Tensor)> {
        self(z, step, rng)
    }
}

/// Root mean square of a tensor's elements, in f64.
pub fn rms(t: &Tensor) -> Result<f64> {
    Ok((t.sqr()?.mean_all()?.to_scalar::<f32>()? as f64).sqrt())
}
