//! Reference denoisers of one caption's training latents, to read the trained prior's reach
//! against (`cargo bench --bench diagnose -- --reach`): what a prior trained to its optimum on
//! those latents would predict at noise level σ, in two ways it could have learned them.
//!
//! - [`Reference::Memoriser`]: the exact posterior mean of the empirical distribution (the
//!   minimiser of the diffusion loss over all functions): the instances weighted by
//!   `softmax(−‖x − xⱼ‖² / 2σ²)`. At low noise it snaps to the nearest instance.
//! - [`Reference::Linear`]: the best *linear* denoiser of the same latents, the posterior mean
//!   of the Gaussian with their mean `μ` and covariance `Σ`: `μ + Σ(Σ + σ²I)⁻¹(x − μ)`. It
//!   keeps a share `v / (v + σ²)` of a deviation along a direction of variance `v`, and none
//!   along a direction the instances do not vary in: a prior that generalises smoothly.
//! - [`Reference::TokenLinear`]: the same Gaussian posterior mean taken on each latent token (a
//!   row of `d` numbers) on its own: the best linear denoiser that never combines tokens, which
//!   cannot tell a deviation correlated across tokens (an instance) from noise that is not.

use candle_core::{Result, Tensor};

/// Which reference denoiser.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reference {
    Memoriser,
    Linear,
    TokenLinear,
}

impl Reference {
    /// All, in table order.
    pub const ALL: [Reference; 3] = [
        Reference::Memoriser,
        Reference::Linear,
        Reference::TokenLinear,
    ];

    /// The table's name.
    pub fn name(self) -> &'static str {
        match self {
            Reference::Memoriser => "memoriser (posterior mean of the instances)",
            Reference::Linear => "linear (Gaussian posterior mean of the instances)",
            Reference::TokenLinear => "token-wise linear (the same, each latent token on its own)",
        }
    }
}

/// One caption's training latents, flattened, and the reference's x0 prediction from them.
pub struct Instances {
    rows: Vec<Vec<f64>>,
    shape: Vec<usize>,
}

impl Instances {
    /// From `latents (k, …)`, `k ≥ 1`.
    pub fn new(latents: &Tensor) -> Result<Self> {
        let shape = latents.dims()[1..].to_vec();
        let k = latents.dim(0)?;
        let rows = (0..k)
            .map(|j| {
                let v = latents.get(j)?.flatten_all()?.to_vec1::<f32>()?;
                Ok(v.into_iter().map(f64::from).collect())
            })
            .collect::<Result<Vec<Vec<f64>>>>()?;
        Ok(Self { rows, shape })
    }

    /// The reference's x0 prediction for the state `x (1, …)` at noise level `sigma`.
    pub fn x0(&self, reference: Reference, x: &Tensor, sigma: f32) -> Result<Tensor> {
        let x: Vec<f64> = x
            .flatten_all()?
            .to_vec1::<f32>()?
            .into_iter()
            .map(f64::from)
            .collect();
        let s2 = f64::from(sigma).powi(2);
        let out = match reference {
            Reference::Memoriser => self.memoriser(&x, s2),
            Reference::Linear => self.linear(&x, s2),
            Reference::TokenLinear => self.token_linear(&x, s2),
        };
        let out: Vec<f32> = out.into_iter().map(|v| v as f32).collect();
        let mut dims = vec![1];
        dims.extend(&self.shape);
        Tensor::from_vec(out, dims, &candle_core::Device::Cpu)
    }

    /// `Σⱼ wⱼ xⱼ`, `w = softmax(−‖x − xⱼ‖² / 2σ²)`.
    fn memoriser(&self, x: &[f64], s2: f64) -> Vec<f64> {
        let logits: Vec<f64> = self
            .rows
            .iter()
            .map(|r| -r.iter().zip(x).map(|(a, b)| (a - b).powi(2)).sum::<f64>() / (2.0 * s2))
            .collect();
        let top = logits.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let w: Vec<f64> = logits.iter().map(|l| (l - top).exp()).collect();
        let total: f64 = w.iter().sum();
        let mut out = vec![0.0; x.len()];
        for (r, wj) in self.rows.iter().zip(&w) {
            for (o, v) in out.iter_mut().zip(r) {
                *o += wj / total * v;
            }
        }
        out
    }

    /// `μ + A(AᵀA + σ²I)⁻¹Aᵀ(x − μ)` with `A`'s columns `(xⱼ − μ)/√k`, so `Σ = AAᵀ`.
    fn linear(&self, x: &[f64], s2: f64) -> Vec<f64> {
        let k = self.rows.len();
        let n = x.len();
        let mu: Vec<f64> = (0..n)
            .map(|i| self.rows.iter().map(|r| r[i]).sum::<f64>() / k as f64)
            .collect();
        let scale = 1.0 / (k as f64).sqrt();
        let a: Vec<Vec<f64>> = self
            .rows
            .iter()
            .map(|r| r.iter().zip(&mu).map(|(v, m)| (v - m) * scale).collect())
            .collect();
        let dot = |p: &[f64], q: &[f64]| p.iter().zip(q).map(|(u, v)| u * v).sum::<f64>();
        let dx: Vec<f64> = x.iter().zip(&mu).map(|(v, m)| v - m).collect();
        let mut gram: Vec<Vec<f64>> = (0..k)
            .map(|i| (0..k).map(|j| dot(&a[i], &a[j])).collect())
            .collect();
        for (i, row) in gram.iter_mut().enumerate() {
            row[i] += s2;
        }
        let c = solve(gram, a.iter().map(|col| dot(col, &dx)).collect());
        let mut out = mu;
        for (col, cj) in a.iter().zip(&c) {
            for (o, v) in out.iter_mut().zip(col) {
                *o += cj * v;
            }
        }
        out
    }
}

impl Instances {
    /// [`Self::linear`] on each token (a run of the last axis) on its own.
    fn token_linear(&self, x: &[f64], s2: f64) -> Vec<f64> {
        let d = self.shape.last().copied().unwrap_or(x.len()).max(1);
        let mut out = Vec::with_capacity(x.len());
        for (t, xt) in x.chunks(d).enumerate() {
            let rows = self
                .rows
                .iter()
                .map(|r| r[t * d..t * d + xt.len()].to_vec())
                .collect();
            let token = Self {
                rows,
                shape: vec![xt.len()],
            };
            out.extend(token.linear(xt, s2));
        }
        out
    }
}

/// `M⁻¹b` for a small symmetric positive-definite `M` (Gaussian elimination with partial
/// pivoting).
fn solve(mut m: Vec<Vec<f64>>, mut b: Vec<f64>) -> Vec<f64> {
    let k = b.len();
    for col in 0..k {
        let pivot = (col..k)
            .max_by(|&p, &q| m[p][col].abs().total_cmp(&m[q][col].abs()))
            .unwrap_or(col);
        m.swap(col, pivot);
        b.swap(col, pivot);
        for row in col + 1..k {
            let (top, bottom) = m.split_at_mut(row);
            let (pivot, target) = (&top[col], &mut bottom[0]);
            let f = target[col] / pivot[col];
            for (t, p) in target[col..].iter_mut().zip(&pivot[col..]) {
                *t -= f * p;
            }
            b[row] -= f * b[col];
        }
    }
    let mut x = vec![0.0; k];
    for row in (0..k).rev() {
        let tail: f64 = (row + 1..k).map(|j| m[row][j] * x[j]).sum();
        x[row] = (b[row] - tail) / m[row][row];
    }
    x
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    fn two_points() -> Result<Instances> {
        Instances::new(&Tensor::new(
            &[[1f32, 0.0, 0.0], [-1.0, 0.0, 0.0]],
            &Device::Cpu,
        )?)
    }

    /// At low noise the memoriser returns the nearest instance; at high noise their mean.
    #[test]
    fn memoriser_snaps_at_low_noise_and_averages_at_high() -> Result<()> {
        let inst = two_points()?;
        let x = Tensor::new(&[[0.3f32, 2.0, 0.0]], &Device::Cpu)?;
        let low = inst.x0(Reference::Memoriser, &x, 0.05)?.to_vec2::<f32>()?;
        assert!((low[0][0] - 1.0).abs() < 1e-5 && low[0][1].abs() < 1e-6);
        let high = inst.x0(Reference::Memoriser, &x, 100.0)?.to_vec2::<f32>()?;
        assert!(high[0][0].abs() < 1e-3);
        Ok(())
    }

    /// Two points ±e₁ have variance 1 along e₁ and none elsewhere: the linear denoiser keeps
    /// `1 / (1 + σ²)` of a deviation along e₁ and drops the rest.
    #[test]
    fn linear_keeps_v_over_v_plus_sigma_squared() -> Result<()> {
        let inst = two_points()?;
        let x = Tensor::new(&[[0.8f32, 2.0, -1.0]], &Device::Cpu)?;
        let sigma = 0.5f32;
        let out = inst.x0(Reference::Linear, &x, sigma)?.to_vec2::<f32>()?;
        let keep = 1.0 / (1.0 + sigma * sigma);
        assert!((out[0][0] - 0.8 * keep).abs() < 1e-6, "{out:?}");
        assert!(out[0][1].abs() < 1e-6 && out[0][2].abs() < 1e-6);
        Ok(())
    }

    /// Two instances ±(1, 1) over two tokens of one number: along (1, −1), which they never
    /// vary in, the linear denoiser keeps nothing; the token-wise one, which sees each token vary
    /// with variance 1, keeps `1 / (1 + σ²)` of it in each token.
    #[test]
    fn token_wise_linear_cannot_tell_correlated_deviations_from_noise() -> Result<()> {
        let inst = Instances::new(&Tensor::new(
            &[[[1f32], [1.0]], [[-1.0], [-1.0]]],
            &Device::Cpu,
        )?)?;
        let x = Tensor::new(&[[[0.6f32], [-0.6]]], &Device::Cpu)?;
        let sigma = 0.5f32;
        let global = inst.x0(Reference::Linear, &x, sigma)?.flatten_all()?;
        let token = inst.x0(Reference::TokenLinear, &x, sigma)?.flatten_all()?;
        let (global, token) = (global.to_vec1::<f32>()?, token.to_vec1::<f32>()?);
        assert!(global.iter().all(|v| v.abs() < 1e-6), "{global:?}");
        let keep = 0.6 / (1.0 + sigma * sigma);
        assert!(
            (token[0] - keep).abs() < 1e-6 && (token[1] + keep).abs() < 1e-6,
            "{token:?}"
        );
        // Along (1, 1), which the instances do vary in, the two agree on the direction.
        let along = Tensor::new(&[[[0.6f32], [0.6]]], &Device::Cpu)?;
        let g = inst.x0(Reference::Linear, &along, sigma)?.flatten_all()?;
        assert!(g.to_vec1::<f32>()?[0] > keep);
        Ok(())
    }

    #[test]
    fn solve_inverts_a_small_system() {
        let x = solve(vec![vec![4.0, 1.0], vec![1.0, 3.0]], vec![1.0, 2.0]);
        assert!((4.0 * x[0] + x[1] - 1.0).abs() < 1e-12 && (x[0] + 3.0 * x[1] - 2.0).abs() < 1e-12);
    }
}
