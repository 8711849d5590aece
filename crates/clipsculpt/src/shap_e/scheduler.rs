//! Heun's second-order sampler over discrete sigmas (diffusers `HeunDiscreteScheduler`,
//! `schedulers/scheduling_heun_discrete.py`; `docs/shap-e.md`, "Scheduler"), with Karras sigmas, the "exp"
//! beta schedule, fractional timesteps, c_in scaling and x0 prediction with clipping. Pure
//! arithmetic on sigmas and tensors; [`super::sampler`] owns the loop that calls the prior.
//!
//! Precision follows diffusers: training betas/sigmas in f32 (cumprod accumulated in f64),
//! Karras sigmas and timestep interpolation in f64, stored schedules in f32.

use candle_core::{Result, Tensor};

use super::config::{BetaSchedule, PredictionType, SchedulerConfig};

/// Training betas of `cfg` as f32 (length `num_train_timesteps`).
pub(crate) fn training_betas(cfg: &SchedulerConfig) -> Vec<f32> {
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
pub(crate) fn sigma_to_t(sigma: f64, log_sigmas: &[f32]) -> f64 {
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
pub(crate) fn karras_sigmas(sigma_min: f64, sigma_max: f64, n: usize) -> Vec<f64> {
    let rho = 7.0;
    let (lo, hi) = (sigma_min.powf(1.0 / rho), sigma_max.powf(1.0 / rho));
    linspace(0.0, 1.0, n)
        .into_iter()
        .map(|r| (hi + r * (lo - hi)).powf(rho))
        .collect()
}

/// The per-step schedule of `steps` inference steps: `sigmas` `s_0 … s_{N−1}, 0` (length N+1,
/// f32) and `timesteps` `t_0 … t_{N−1}` (f32, fractional).
pub(crate) fn step_schedule(cfg: &SchedulerConfig, steps: usize) -> (Vec<f32>, Vec<f32>) {
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
    #[cfg(test)]
    pub(crate) fn timesteps(&self) -> &[f32] {
        &self.timesteps
    }

    /// The interleaved sigmas (2N).
    #[cfg(test)]
    pub(crate) fn sigmas(&self) -> &[f32] {
        &self.sigmas
    }

    /// Scale of the initial noise (`max σ`, "linspace" spacing).
    pub fn init_noise_sigma(&self) -> f32 {
        self.sigmas.iter().copied().fold(0.0, f32::max)
    }

    /// The timestep of the next model evaluation.
    pub(crate) fn current_timestep(&self) -> Result<f32> {
        self.timesteps.get(self.step_index).copied().ok_or_else(|| {
            candle_core::Error::Msg("scheduler stepped past its last timestep".into())
        })
    }

    /// The σ of the next model evaluation (the noise level of the state it is given).
    pub fn current_sigma(&self) -> f32 {
        self.sigmas[self.step_index.min(self.sigmas.len() - 1)]
    }

    /// `x / sqrt(σ² + 1)` with the current σ (c_in), in f32 like diffusers.
    pub(crate) fn scale_model_input(&self, x: &Tensor) -> Result<Tensor> {
        let s = self.current_sigma();
        div(x, (s * s + 1.0).sqrt())
    }

    fn first_order(&self) -> bool {
        self.dt.is_none()
    }

    /// Whether the next evaluation starts a Heun step (the predictor at its σ), as opposed to
    /// the corrector that completes the previous one.
    pub fn starts_step(&self) -> bool {
        self.first_order()
    }

    /// `(σ_i, σ_{i+1})` of the Heun step the next evaluation belongs to.
    pub fn step_sigmas(&self) -> (f32, f32) {
        let i = self.step_index.min(self.sigmas.len() - 2);
        if self.first_order() {
            (self.sigmas[i], self.sigmas[i + 1])
        } else {
            (self.sigmas[i - 1], self.sigmas[i])
        }
    }

    /// The Heun step (0-based, of the `steps` given to [`Self::new`]) the next evaluation belongs
    /// to.
    pub fn step_number(&self) -> usize {
        self.step_index / 2
    }

    /// Steps in the schedule (the `steps` given to [`Self::new`]).
    pub fn num_steps(&self) -> usize {
        self.sigmas.len() / 2
    }

    /// Whether every model evaluation has been taken.
    pub fn done(&self) -> bool {
        self.step_index >= self.timesteps.len()
    }

    /// This schedule positioned at the start of Heun step `i` (its predictor), with no step in
    /// progress: what [`Self::step`] reaches after the evaluations of steps `0..i`.
    pub fn at_step(&self, i: usize) -> Result<Self> {
        if i >= self.num_steps() {
            candle_core::bail!("Heun step {i} of a {}-step schedule", self.num_steps());
        }
        Ok(Self {
            step_index: 2 * i,
            prev_derivative: None,
            dt: None,
            sample: None,
            ..self.clone()
        })
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

    /// The Shap-E schedule's constants (`docs/shap-e.md`, "Scheduler"): f32 betas give
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

    /// The 64-step table (`docs/shap-e.md`, "Scheduler": computed by running diffusers'
    /// scheduler; printed to ~6 significant digits): step i's sigma and timestep, relative 1e-4.
    #[test]
    #[allow(clippy::excessive_precision)] // the table is copied verbatim
    fn matches_the_64_step_table() {
        #[rustfmt::skip]
        let table: [(f32, f32); 64] = [
        (403.422, 1023.0000),
        (373.449, 1009.8248),
        (345.407, 996.5026),
        (319.189, 983.0302),
        (294.695, 969.4041),
        (271.831, 955.6209),
        (250.504, 941.6769),
        (230.628, 927.5681),
        (212.119, 913.2908),
        (194.898, 898.8409),
        (178.89, 884.2141),
        (164.023, 869.4061),
        (150.227, 854.4123),
        (137.438, 839.2281),
        (125.594, 823.8485),
        (114.636, 808.2685),
        (104.507, 792.4828),
        (95.1558, 776.4860),
        (86.531, 760.2725),
        (78.5852, 743.8362),
        (71.2731, 727.1712),
        (64.5521, 710.2710),
        (58.3819, 693.1291),
        (52.7242, 675.7386),
        (47.5432, 658.0924),
        (42.8048, 640.1832),
        (38.4771, 622.0034),
        (34.53, 603.5452),
        (30.9352, 584.8006),
        (27.666, 565.7613),
        (24.6976, 546.4190),
        (22.0065, 526.7653),
        (19.5707, 506.7919),
        (17.3697, 486.4906),
        (15.3844, 465.8539),
        (13.5969, 444.8748),
        (11.9905, 423.5476),
        (10.5495, 401.8687),
        (9.25962, 379.8369),
        (8.10734, 357.4555),
        (7.08022, 334.7331),
        (6.16672, 311.6869),
        (5.35616, 288.3455),
        (4.63869, 264.7536),
        (4.00523, 240.9781),
        (3.44741, 217.1158),
        (2.95756, 193.3023),
        (2.52861, 169.7230),
        (2.15414, 146.6222),
        (1.82824, 124.3079),
        (1.54555, 103.1463),
        (1.30119, 83.5402),
        (1.09072, 65.8809),
        (0.910134, 50.4929),
        (0.755805, 37.5619),
        (0.624473, 27.1000),
        (0.513209, 18.9515),
        (0.419388, 12.8308),
        (0.340671, 8.3814),
        (0.274973, 5.2329),
        (0.220448, 3.0548),
        (0.175466, 1.6346),
        (0.138593, 0.6985),
        (0.108571, 0.0000),
        ];
        let (s, t) = step_schedule(&SchedulerConfig::shap_e(), 64);
        for (i, &(sigma, ts)) in table.iter().enumerate() {
            assert!(
                (s[i] - sigma).abs() <= 1e-4 * sigma,
                "sigma {i}: {} vs {sigma}",
                s[i]
            );
            assert!(
                (t[i] - ts).abs() <= 1e-4 * ts.max(1.0),
                "t {i}: {} vs {ts}",
                t[i]
            );
        }
        assert_eq!(s[64], 0.0);
    }
}
