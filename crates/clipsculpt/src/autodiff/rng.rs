//! Our own seeded random generator. candle cannot seed its CPU generator, and draws made inside a
//! checkpointed segment would differ on recomputation; so every random number (ray jitter,
//! augmentations, dropout masks, diffusion noise) is drawn here, outside segments, and passed in.

use candle_core::{Device, Result, Tensor};

/// A small, fast, seedable generator (SplitMix64 stream; passes BigCrush as a 64-bit generator).
#[derive(Debug, Clone)]
pub struct Rng {
    state: u64,
}

impl Rng {
    /// A generator from a seed; equal seeds give equal streams on every platform.
    pub fn new(seed: u64) -> Self {
        Self {
            state: seed ^ 0x9E37_79B9_7F4A_7C15,
        }
    }

    /// An independent generator for sub-stream `stream` (e.g. one per optimization step).
    pub fn fork(&self, stream: u64) -> Self {
        let mut r = Self::new(self.state ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03));
        r.next_u64();
        r
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)`.
    pub fn uniform(&mut self) -> f32 {
        (self.next_u64() >> 40) as f32 / (1u64 << 24) as f32
    }

    /// Uniform in `[lo, hi)`.
    pub fn range(&mut self, lo: f32, hi: f32) -> f32 {
        lo + (hi - lo) * self.uniform()
    }

    /// Uniform integer in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        ((self.next_u64() >> 11) as f64 / (1u64 << 53) as f64 * n as f64) as usize % n.max(1)
    }

    /// Standard normal (Box–Muller).
    pub(crate) fn normal(&mut self) -> f32 {
        let u1 = ((self.next_u64() >> 11) as f64 + 1.0) / ((1u64 << 53) as f64 + 1.0);
        let u2 = (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
        ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
    }

    /// An f32 tensor of uniform `[0, 1)` draws.
    pub fn uniform_tensor(&mut self, shape: &[usize], device: &Device) -> Result<Tensor> {
        let n = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|_| self.uniform()).collect();
        Tensor::from_vec(v, shape, device)
    }

    /// An f32 tensor of standard-normal draws.
    pub fn normal_tensor(&mut self, shape: &[usize], device: &Device) -> Result<Tensor> {
        let n = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|_| self.normal()).collect();
        Tensor::from_vec(v, shape, device)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reproducible_and_well_spread() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        let xs: Vec<f32> = (0..10_000).map(|_| a.normal()).collect();
        let ys: Vec<f32> = (0..10_000).map(|_| b.normal()).collect();
        assert_eq!(xs, ys);
        let mean = xs.iter().sum::<f32>() / xs.len() as f32;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f32>() / xs.len() as f32;
        assert!(
            mean.abs() < 0.05 && (var - 1.0).abs() < 0.05,
            "mean {mean} var {var}"
        );
        let mut u = Rng::new(1);
        assert!((0..10_000)
            .map(|_| u.uniform())
            .all(|x| (0.0..1.0).contains(&x)));
        assert_ne!(
            Rng::new(7).fork(1).next_u64(),
            Rng::new(7).fork(2).next_u64()
        );
    }
}
