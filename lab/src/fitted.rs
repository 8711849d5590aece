//! A toy world's fitted latents (`latents.safetensors`, tensor `latent`): the decoder's latent of
//! every object, `per_combo` instances for each combination in [`combinations`] order.

use std::path::Path;

use anyhow::{Context, Result};
use candle_core::{Device, Tensor};

use crate::world::{combinations, Colour, Shape};

/// The fitted latents of a toy world, `(combinations × per_combo, rows, d)`.
pub struct Fitted {
    /// Every latent, the instances of one combination together.
    pub all: Tensor,
    /// Instances per combination.
    pub per_combo: usize,
}

impl Fitted {
    /// Loads `path`; an error names the file when it has no `latent` tensor, or when its count is
    /// not a positive multiple of the combinations.
    pub fn load(path: &Path, device: &Device) -> Result<Self> {
        let all = candle_core::safetensors::load(path, device)
            .with_context(|| format!("reading fitted latents {}", path.display()))?
            .remove("latent")
            .with_context(|| format!("{}: no tensor named \"latent\"", path.display()))?;
        Self::new(all).with_context(|| format!("fitted latents {}", path.display()))
    }

    /// `all` split into [`combinations`], or an error when its count does not divide evenly.
    pub fn new(all: Tensor) -> Result<Self> {
        let (n, combos) = (all.dim(0)?, combinations().len());
        anyhow::ensure!(
            all.rank() == 3 && n > 0 && n % combos == 0,
            "{n} latents of shape {:?} for {combos} combinations",
            all.dims()
        );
        Ok(Self {
            per_combo: n / combos,
            all,
        })
    }

    /// The instances of `(shape, colour)`, `(per_combo, rows, d)`.
    pub fn instances(&self, shape: Shape, colour: Colour) -> Result<Tensor> {
        let i = combinations()
            .iter()
            .position(|&c| c == (shape, colour))
            .context("not a toy combination")?;
        Ok(self.all.narrow(0, i * self.per_combo, self.per_combo)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn instances_are_the_combinations_own_rows() {
        let n = combinations().len();
        let all = Tensor::arange(0f32, (2 * n) as f32, &Device::Cpu)
            .unwrap()
            .reshape((2 * n, 1, 1))
            .unwrap();
        let f = Fitted::new(all).unwrap();
        assert_eq!(f.per_combo, 2);
        let i = combinations()
            .iter()
            .position(|&c| c == (Shape::Torus, Colour::Black))
            .unwrap();
        let got: Vec<f32> = f
            .instances(Shape::Torus, Colour::Black)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        assert_eq!(got, vec![(2 * i) as f32, (2 * i + 1) as f32]);
        let odd = Tensor::zeros((n + 1, 1, 1), candle_core::DType::F32, &Device::Cpu).unwrap();
        assert!(Fitted::new(odd).is_err());
    }
}
