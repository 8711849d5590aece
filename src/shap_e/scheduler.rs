//! Heun's second-order sampler over discrete sigmas (diffusers `HeunDiscreteScheduler`,
//! `schedulers/scheduling_heun_discrete.py`; spec `shap-e.md` §4), with Karras sigmas, the "exp"
//! beta schedule, fractional timesteps, c_in scaling and x0 prediction with clipping. Pure
//! arithmetic on sigmas and tensors; [`super::sampler`] owns the loop that calls the prior.
//!
//! Precision follows diffusers: training betas/sigmas in f32 (cumprod accumulated in f64),
//! Karras sigmas and timestep interpolation in f64, stored schedules in f32.

use candle_core::{Result, Tensor};

use super::config::{BetaSchedule, PredictionType, SchedulerConfig};

/// Training betas of `cfg` as f32 (length `num_train_timesteps`).
pub fn training_betas(cfg: &SchedulerConfig) -> Vec<f32> {
    let n = cfg.num_train_timesteps;
    let capped = |abar: &dyn Fn(f64) -> f64| -> Vec<f32> {
        (0..n)
            .map(|i| {
                let (t1, t2) = (i as f64 / n as f64, (i + 1) as f64 / n as f64);
                (1.0 - abar(t2) / abar(t1)).min(0.999) as f32
            })
            .collect()
    };
    let lin = |a: f64, b: f64| -> Vec<f64> {
        (0..n)
            .map(|i| a + (b - a) * i as f64 / (n - 1) as f64)
            .collect()
    };
    match cfg.beta_schedule {
        BetaSchedule::Exp => capped(&|t| (t * -12.0).exp()),
        BetaSchedule::SquaredCos => capped(&|t| {
            ((t + 0.008) / 1.008 * std::f64::consts::FRAC_PI_2)
                .cos()
                .powi(2)
        }),
        BetaSchedule::Linear => lin(cfg.beta_start, cfg.beta_end)
            .into_iter()
            .map(|b| b as f32)
            .collect(),
        BetaSchedule::ScaledLinear => lin(cfg.beta_start.sqrt(), cfg.beta_end.sqrt())
            .into_iter()
            .map(|b| (b as f32).powi(2))
            .collect(),
    }
}

/// Training sigmas `σ_i = sqrt((1 − ᾱ_i)/ᾱ_i)` (f32; increasing in i).
pub fn training_sigmas(cfg: &SchedulerConfig) -> Vec<f32> {
    let mut acc = 1.0f64;
    training_betas(cfg)
        .into_iter()
        .map(|b| {
            acc *= (1.0f32 - b) as f64;
            let abar = acc as f32;
            ((1.0 - abar) / abar).sqrt()
        })
        .collect()
}

/// numpy's `interp(x, 0..n, fp)` for `x` within `[0, n − 1]`.
fn interp(x: f64, fp: &[f32]) -> f64 {
    let last = fp.len() - 1;
    if x >= last as f64 {
        return fp[last] as f64;
    }
    let j = (x.floor().max(0.0)) as usize;
    let slope = (fp[j + 1] as f64 - fp[j] as f64) / 1.0;
    slope * (x - j as f64) + fp[j] as f64
}

/// numpy `linspace(a, b, n)` in f64 (the last value is exactly `b`).
fn linspace(a: f64, b: f64, n: usize) -> Vec<f64> {
    if n == 1 {
        return vec![a];
    }
    let step = (b - a) / (n - 1) as f64;
    (0..n)
        .map(|i| if i == n - 1 { b } else { a + i as f64 * step })
        .collect()
}

/// The fractional training timestep of `sigma` by log-sigma interpolation (diffusers `_sigma_to_t`).
pub fn sigma_to_t(sigma: f64, log_sigmas: &[f32]) -> f64 {
    let l = sigma.max(1e-10).ln();
    let count = log_sigmas
        .iter()
        .filter(|&&ls| l - ls as f64 >= 0.0)
        .count();
    let lo = count.saturating_sub(1).min(log_sigmas.len() - 2);
    let (a, b) = (log_sigmas[lo] as f64, log_sigmas[lo + 1] as f64);
    let w = ((a - l) / (a - b)).clamp(0.0, 1.0);
    (1.0 - w) * lo as f64 + w * (lo + 1) as f64
}

/// Karras et al. (2022) sigmas with ρ = 7 from `sigma_max` down to `sigma_min` (f64).
pub fn karras_sigmas(sigma_min: f64, sigma_max: f64, n: usize) -> Vec<f64> {
    let rho = 7.0;
    let (lo, hi) = (sigma_min.powf(1.0 / rho), sigma_max.powf(1.0 / rho));
    linspace(0.0, 1.0, n)
        .into_iter()
        .map(|r| (hi + r * (lo - hi)).powf(rho))
        .collect()
}

/// The per-step schedule of `steps` inference steps: `sigmas` `s_0 … s_{N−1}, 0` (length N+1,
/// f32) and `timesteps` `t_0 … t_{N−1}` (f32, fractional).
pub fn step_schedule(cfg: &SchedulerConfig, steps: usize) -> (Vec<f32>, Vec<f32>) {
    let train = training_sigmas(cfg);
    let log_sigmas: Vec<f32> = train.iter().map(|s| s.ln()).collect();
    let last = (cfg.num_train_timesteps - 1) as f64;
    let ts: Vec<f32> = linspace(0.0, last, steps)
        .into_iter()
        .rev()
        .map(|t| t as f32)
        .collect();
    let interp_sigmas: Vec<f64> = ts.iter().map(|&t| interp(t as f64, &train)).collect();
    let (sigmas, timesteps): (Vec<f64>, Vec<f32>) = if cfg.use_karras_sigmas {
        let (smin, smax) = (interp_sigmas[steps - 1], interp_sigmas[0]);
        let s = karras_sigmas(smin, smax, steps);
        let t = s
            .iter()
            .map(|&s| sigma_to_t(s, &log_sigmas) as f32)
            .collect();
        (s, t)
    } else {
        (interp_sigmas, ts)
    };
    let mut sig: Vec<f32> = sigmas.into_iter().map(|s| s as f32).collect();
    sig.push(0.0);
    (sig, timesteps)
}

/// `x / v` as a true division (candle's `tensor / f64` multiplies by the reciprocal, which
/// differs in the last bit; the sampler's cancellations at |x| ≈ 10³ make that visible).
fn div(x: &Tensor, v: f32) -> Result<Tensor> {
    x.broadcast_div(&Tensor::new(v, x.device())?.to_dtype(x.dtype())?)
}

/// Heun's method over a discrete schedule; one [`Self::step`] per model evaluation.
#[derive(Debug, Clone)]
pub struct HeunDiscreteScheduler {
    cfg: SchedulerConfig,
    /// `[s_0, s_1, s_1, …, s_{N−1}, s_{N−1}, 0]` (length 2N).
    sigmas: Vec<f32>,
    /// `[t_0, t_1, t_1, …, t_{N−1}, t_{N−1}]` (length 2N − 1): one per model evaluation.
    timesteps: Vec<f32>,
    step_index: usize,
    prev_derivative: Option<Tensor>,
    dt: Option<f32>,
    sample: Option<Tensor>,
}

impl HeunDiscreteScheduler {
    /// A scheduler for `steps ≥ 1` inference steps.
    pub fn new(cfg: &SchedulerConfig, steps: usize) -> Result<Self> {
        cfg.validate().map_err(candle_core::Error::Msg)?;
        if steps == 0 {
            candle_core::bail!("the number of sampling steps must be at least 1");
        }
        let (s, t) = step_schedule(cfg, steps);
        let mut sigmas = vec![s[0]];
        for &v in &s[1..steps] {
            sigmas.extend([v, v]);
        }
        sigmas.push(s[steps]);
        let mut timesteps = vec![t[0]];
        for &v in &t[1..] {
            timesteps.extend([v, v]);
        }
        Ok(Self {
            cfg: cfg.clone(),
            sigmas,
            timesteps,
            step_index: 0,
            prev_derivative: None,
            dt: None,
            sample: None,
        })
    }

    /// The timesteps, one per model evaluation (2N − 1).
    pub fn timesteps(&self) -> &[f32] {
        &self.timesteps
    }

    /// The interleaved sigmas (2N).
    pub fn sigmas(&self) -> &[f32] {
        &self.sigmas
    }

    /// Scale of the initial noise (`max σ`, "linspace" spacing).
    pub fn init_noise_sigma(&self) -> f32 {
        self.sigmas.iter().copied().fold(0.0, f32::max)
    }

    /// The timestep of the next model evaluation.
    pub fn current_timestep(&self) -> Result<f32> {
        self.timesteps.get(self.step_index).copied().ok_or_else(|| {
            candle_core::Error::Msg("scheduler stepped past its last timestep".into())
        })
    }

    /// `x / sqrt(σ² + 1)` with the current σ (c_in), in f32 like diffusers.
    pub fn scale_model_input(&self, x: &Tensor) -> Result<Tensor> {
        let s = self.sigmas[self.step_index.min(self.sigmas.len() - 1)];
        div(x, (s * s + 1.0).sqrt())
    }

    fn first_order(&self) -> bool {
        self.dt.is_none()
    }

    /// Advances by one model evaluation: `model_output` is the (guided) model output at the
    /// current timestep, `sample` the current latent. Returns the next latent.
    pub fn step(&mut self, model_output: &Tensor, sample: &Tensor) -> Result<Tensor> {
        let i = self.step_index;
        if i + 1 >= self.sigmas.len() {
            candle_core::bail!("scheduler stepped past its last timestep");
        }
        let (sigma, sigma_next) = if self.first_order() {
            (self.sigmas[i], self.sigmas[i + 1])
        } else {
            (self.sigmas[i - 1], self.sigmas[i])
        };
        let sigma_in = if self.first_order() {
            sigma
        } else {
            sigma_next
        } as f64;
        let mut x0 = match self.cfg.prediction_type {
            PredictionType::Sample => model_output.clone(),
            PredictionType::Epsilon => (sample - (model_output * sigma_in)?)?,
            PredictionType::VPrediction => {
                let c = sigma_in * sigma_in + 1.0;
                ((model_output * (-sigma_in / c.sqrt()))? + (sample / c)?)?
            }
        };
        if self.cfg.clip_sample {
            let r = self.cfg.clip_sample_range;
            x0 = x0.clamp(-r, r)?;
        }
        let next = if self.first_order() {
            let derivative = div(&(sample - &x0)?, sigma)?;
            let dt = sigma_next - sigma;
            let next = (sample + (&derivative * dt as f64)?)?;
            self.prev_derivative = Some(derivative);
            self.dt = Some(dt);
            self.sample = Some(sample.clone());
            next
        } else {
            let d2 = div(&(sample - &x0)?, sigma_next)?;
            let (Some(d1), Some(dt), Some(start)) = (
                self.prev_derivative.take(),
                self.dt.take(),
                self.sample.take(),
            ) else {
                candle_core::bail!("heun corrector without a predictor state (bug)");
            };
            let derivative = ((d1 + d2)? / 2.0)?;
            (start + (derivative * dt as f64)?)?
        };
        self.step_index += 1;
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Shap-E schedule's constants (spec §4.1, pitfall 15): f32 betas give
    /// σ_min = 0.10857096 and σ_max = 403.4215.
    #[test]
    fn shap_e_training_sigma_range() {
        let s = training_sigmas(&SchedulerConfig::shap_e());
        assert!((s[0] - 0.108_570_96).abs() < 1e-7, "{}", s[0]);
        assert!((s[1023] - 403.4215).abs() < 1e-3, "{}", s[1023]);
    }

    /// N = 1 (diffusers' fast test): σ = [σ_min, 0], t = [0].
    #[test]
    fn one_step_schedule() {
        let h = HeunDiscreteScheduler::new(&SchedulerConfig::shap_e(), 1).unwrap();
        assert_eq!(h.timesteps(), &[0.0]);
        assert!((h.sigmas()[0] - 0.108_570_96).abs() < 1e-7);
        assert_eq!(h.sigmas()[1], 0.0);
        assert!((h.init_noise_sigma() - 0.108_570_96).abs() < 1e-7);
    }

    /// Karras sigmas start at σ_max, end at σ_min and decrease.
    #[test]
    fn karras_endpoints() {
        let s = karras_sigmas(0.1, 400.0, 10);
        assert!((s[0] - 400.0).abs() < 1e-9 && (s[9] - 0.1).abs() < 1e-12);
        assert!(s.windows(2).all(|w| w[0] > w[1]));
    }
}
