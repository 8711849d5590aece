//! Guided sampling through the prior: CLIP guidance inside the Heun/Karras sampler.
//!
//! At every Heun step whose σ lies in the guided window, the prior's classifier-free-guided x0
//! prediction `D(x; σ)` is computed *with a graph* (both branches as one batch, the prior's
//! blocks under a checkpoint policy), rendered and scored by the view loss, and the loss is
//! backpropagated through the prior to the sampler state `x`, giving `g = ∇ₓ L(D(x; σ))`. The
//! unguided Heun step is then taken, and the state moved against the gradient by a fixed share
//! `η` of the step's own displacement (the split form of FreeDoM's step-size rule):
//!
//! `x_{i+1} ← x_{i+1} − η · (1 − σ_{i+1}/σ_i) · rms(x_i − D) · g / rms(g)`.
//!
//! The later denoising steps pull the edited state back toward what the prior produces, so the
//! result stays an output of the prior. The loss sees the clipped prediction (what the decoder
//! would receive) with the gradient passed straight through the clip. Random draws (cameras,
//! backgrounds, crops) come from a stream forked per step, outside any recomputed segment.
//! `η = 0` reproduces the unguided sampler bit for bit.
//!
//! **Self-recurrence** (Universal Guidance's "time travel"): inside a second σ window, a guided
//! step σᵢ → σᵢ₊₁ is taken `K` times. After each but the last, the finished state is re-noised
//! back to σᵢ, `x ← x + sqrt(σᵢ² − σᵢ₊₁²)·ε` with fresh noise, and the step is redone with fresh
//! views. The guidance then acts `K` times at that noise level while the prior's denoising pulls
//! each edit back toward what it produces. `K = 1` is the sampler above, bit for bit.
//!
//! **The prediction's gradient** ([`SamplingGradient::Prediction`]): the control arm that
//! isolates what the prior's Jacobian adds. `g` is replaced by `∇_D L(D)`, the gradient at the
//! x0 prediction itself (manifold-preserving guidance's update without a projection): `D` is
//! computed without a graph and nothing is backpropagated through the prior. The push above is
//! then the same as moving `D` by `−η · rms(x_i − D) · g / rms(g)` before the Euler step.

use std::fmt;
use std::str::FromStr;

use candle_core::{Result, Tensor, Var};

use super::end_to_end::ChainTrace;
use super::error::GuideError;
use super::keep::Kept;
use super::latent_loss::{rms, LatentLoss};
use crate::autodiff::checkpoint::Policy;
use crate::autodiff::rng::Rng;
use crate::shap_e::{Denoiser, HeunDiscreteScheduler};

/// How the sampler is guided.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct SamplingGuidance {
    /// `η`: each guided step moves the state by this share of the Heun step's displacement.
    pub scale: f64,
    /// The largest σ of a guided step (steps at higher noise see an x0 prediction close to the
    /// prior's mean and are not guided).
    pub sigma_max: f32,
    /// The smallest σ of a guided step (the last steps only sharpen details).
    pub sigma_min: f32,
    /// Checkpoint policy of the prior's transformer blocks in the guided evaluations.
    pub prior_policy: Policy,
    /// Consecutive guided steps with a non-finite loss or gradient after which the run stops.
    pub max_bad_steps: usize,
    /// How often each guided step inside its σ window is taken (see the module docs).
    pub recurrence: Recurrence,
    /// Which gradient moves the state (see the module docs).
    pub gradient: SamplingGradient,
}

/// The gradient that guided sampling follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SamplingGradient {
    /// `∇ₓ L(D(x; σ))`: through the prior's transformer to the sampler state.
    Prior,
    /// `∇_D L(D)`: at the x0 prediction, with no backward through the prior.
    Prediction,
}

impl FromStr for SamplingGradient {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "prior" => Ok(Self::Prior),
            "prediction" => Ok(Self::Prediction),
            _ => Err(format!("unknown gradient {s:?} (prior, prediction)")),
        }
    }
}

impl fmt::Display for SamplingGradient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Prior => "prior",
            Self::Prediction => "prediction",
        })
    }
}

/// Self-recurrence: how many times a guided step is taken, and at which noise levels.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct Recurrence {
    /// `K ≥ 1`: times each step in the window is taken (1: no recurrence).
    pub times: usize,
    /// The largest σ of a recurrent step.
    pub sigma_max: f32,
    /// The smallest σ of a recurrent step.
    pub sigma_min: f32,
}

impl Default for Recurrence {
    fn default() -> Self {
        Self {
            times: 1,
            sigma_max: 12.0,
            sigma_min: 2.0,
        }
    }
}

impl Default for SamplingGuidance {
    fn default() -> Self {
        Self {
            scale: 2.0,
            sigma_max: 20.0,
            sigma_min: 0.2,
            prior_policy: Policy::BLOCKS,
            max_bad_steps: 5,
            recurrence: Recurrence::default(),
            gradient: SamplingGradient::Prior,
        }
    }
}

impl SamplingGuidance {
    /// Whether the Heun step from `sigma` to `sigma_next` is guided.
    pub fn guides(&self, sigma: f32, sigma_next: f32) -> bool {
        self.scale > 0.0 && sigma_next > 0.0 && (self.sigma_min..=self.sigma_max).contains(&sigma)
    }

    /// How many times the guided step from `sigma` to `sigma_next` is taken.
    pub(crate) fn times(&self, sigma: f32, sigma_next: f32) -> usize {
        let r = &self.recurrence;
        if self.guides(sigma, sigma_next) && (r.sigma_min..=r.sigma_max).contains(&sigma) {
            r.times.max(1)
        } else {
            1
        }
    }
}

/// One guided sampler step, as `report.json` records it.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct GuidedStep {
    /// The Heun step (0-based).
    pub step: usize,
    /// Which take of the step this is (0-based; above 0 only under self-recurrence).
    pub take: usize,
    /// Its σ.
    pub sigma: f32,
    /// Mean CLIP cosine of the views of the x0 prediction.
    pub cosine: f32,
    /// The view loss.
    pub loss: f32,
    /// Share of the x0 prediction's elements outside [−1, 1] (clipped before decoding).
    pub clipped: f32,
    /// RMS of the guidance displacement of the state.
    pub push_rms: f32,
}

/// What guided sampling measured.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct SamplingTrace {
    /// Every guided step, in order (skipped ones excluded).
    pub steps: Vec<GuidedStep>,
    /// Guided steps skipped for a non-finite loss or gradient.
    pub skipped: usize,
    /// Times the state was re-noised to redo a step (self-recurrence).
    pub renoised: usize,
    /// End-to-end guidance through the last sampler steps, when the run used it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub end_to_end: Option<ChainTrace>,
    /// The keep guard's comparison of the guided sample with the unguided one, when it ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub keep: Option<Kept>,
}

/// Where a guided sampling run left the unguided one: the state and the schedule at the start of
/// the first guided step. [`Denoiser::finish`] from there gives the unguided sample from the
/// same noise, bit for bit, without repeating the steps the two runs share.
#[derive(Debug, Clone)]
pub(crate) struct Fork {
    pub x: Tensor,
    pub sched: HeunDiscreteScheduler,
}

/// Samples a latent `(1, rows, d)` from the sampler `state` at `sched`'s position (the start:
/// [`Denoiser::initial_state`] of standard-normal noise) with the remaining Heun steps of
/// `denoiser`, guided by `loss` as `g` says (see the module docs). `rng` gives each guided step
/// its own stream; `on_step(step, cosine)` reports progress. Also returns the [`Fork`] from the
/// unguided run, when a step was guided.
pub(crate) fn guided_sample(
    denoiser: &Denoiser,
    sched: &mut HeunDiscreteScheduler,
    state: Tensor,
    g: &SamplingGuidance,
    loss: &dyn LatentLoss,
    rng: &Rng,
    mut on_step: impl FnMut(usize, f32),
) -> std::result::Result<(Tensor, SamplingTrace, Option<Fork>), GuideError> {
    let wrap = |step| move |source| GuideError::Step { step, source };
    let mut x = state;
    let mut trace = SamplingTrace::default();
    let (mut pending, mut bad_run, mut take) = (None::<Tensor>, 0usize, 0usize);
    let mut fork = None;
    while !sched.done() {
        let step = sched.step_number();
        let (sigma, sigma_next) = sched.step_sigmas();
        let out = if sched.starts_step() && g.guides(sigma, sigma_next) {
            fork.get_or_insert_with(|| Fork {
                x: x.clone(),
                sched: sched.clone(),
            });
            let guided = guide_step(denoiser, sched, &x, g, loss, &mut take_rng(rng, step, take))
                .map_err(wrap(step))?;
            match guided.push {
                Some((push, record)) => {
                    bad_run = 0;
                    pending = Some(push);
                    trace.steps.push(GuidedStep {
                        step,
                        take,
                        ..record
                    });
                    on_step(step, record.cosine);
                }
                None => {
                    trace.skipped += 1;
                    bad_run += 1;
                    tracing::warn!("sampler step {step}: non-finite loss or gradient, skipped");
                    if bad_run >= g.max_bad_steps {
                        return Err(GuideError::NonFinite {
                            count: bad_run,
                            step,
                            last_finite: trace.steps.last().map(|s| s.loss),
                        });
                    }
                }
            }
            guided.x0
        } else {
            denoiser.x0(sched, &x, &Policy::None).map_err(wrap(step))?
        };
        x = sched.step(&out, &x).map_err(wrap(step))?;
        if sched.starts_step() {
            if let Some(push) = pending.take() {
                x = (x - push).map_err(wrap(step))?;
            }
            if take + 1 < g.times(sigma, sigma_next) {
                take += 1;
                let mut noise = take_rng(rng, step, take).fork(1);
                x = rewind(sched, &x, step, &mut noise).map_err(wrap(step))?;
                trace.renoised += 1;
            } else {
                take = 0;
            }
        }
    }
    Ok((x, trace, fork))
}

/// The random stream of take `take` of guided step `step`: take 0 uses the step's own stream,
/// so that a sampler without recurrence draws what it always drew.
fn take_rng(rng: &Rng, step: usize, take: usize) -> Rng {
    let r = rng.fork(step as u64);
    if take == 0 {
        r
    } else {
        r.fork(take as u64)
    }
}

/// Rewinds `sched`, which has just completed Heun step `step`, to that step's start, and returns
/// the finished state `x` re-noised back to the step's σ.
fn rewind(
    sched: &mut HeunDiscreteScheduler,
    x: &Tensor,
    step: usize,
    rng: &mut Rng,
) -> Result<Tensor> {
    *sched = sched.at_step(step)?;
    let (sigma, sigma_next) = sched.step_sigmas();
    renoise(x, sigma, sigma_next, rng)
}

/// `x` at `sigma_next` moved back to `sigma` with fresh noise: `x + sqrt(σ² − σ_next²)·ε`.
fn renoise(x: &Tensor, sigma: f32, sigma_next: f32, rng: &mut Rng) -> Result<Tensor> {
    let std = ((sigma as f64).powi(2) - (sigma_next as f64).powi(2))
        .max(0.0)
        .sqrt();
    let eps = rng
        .normal_tensor(x.dims(), x.device())?
        .to_dtype(x.dtype())?;
    x + (eps * std)?
}

/// The x0 prediction of one guided evaluation (no graph) and, when the loss and gradient are
/// finite, the displacement to subtract once the Heun step is complete, with its record.
pub struct Guided {
    pub(crate) x0: Tensor,
    pub push: Option<(Tensor, GuidedStep)>,
}

/// One guided evaluation at the state `x` (see the module docs).
pub fn guide_step(
    denoiser: &Denoiser,
    sched: &HeunDiscreteScheduler,
    x: &Tensor,
    g: &SamplingGuidance,
    loss: &dyn LatentLoss,
    rng: &mut Rng,
) -> Result<Guided> {
    let (sigma, sigma_next) = sched.step_sigmas();
    // The gradient is taken with respect to `wrt`: the state, or the prediction itself.
    let (wrt, d) = match g.gradient {
        SamplingGradient::Prior => {
            let state = Var::from_tensor(x)?;
            let d = denoiser.x0(sched, state.as_tensor(), &g.prior_policy)?;
            (state, d)
        }
        SamplingGradient::Prediction => {
            let d = Var::from_tensor(&denoiser.x0(sched, x, &Policy::None)?)?;
            let t = d.as_tensor().clone();
            (d, t)
        }
    };
    let clipped = d.clamp(-1f32, 1f32)?;
    let outside = d.abs()?.gt(1f64)?.to_dtype(candle_core::DType::F32)?;
    let clipped_share = outside.mean_all()?.to_scalar::<f32>()?;
    // The clipped prediction, with the gradient passed straight through the clip.
    let seen = (&d + (&clipped - &d)?.detach())?;
    let (l, cosine) = loss.loss(&seen, sched.step_number(), rng)?;
    let (l_value, cosine) = (l.to_scalar::<f32>()?, cosine.to_scalar::<f32>()?);
    let grads = l.backward()?;
    let x0 = d.detach();
    let Some(grad) = grads.get(&wrt) else {
        candle_core::bail!("the view loss does not depend on the sampler state (bug)");
    };
    let grad_rms = rms(grad)?;
    if !l_value.is_finite() || !grad_rms.is_finite() || grad_rms == 0.0 {
        return Ok(Guided { x0, push: None });
    }
    let step_rms = (1.0 - sigma_next as f64 / sigma as f64) * rms(&(x - &clipped)?)?;
    let push = (grad * (g.scale * step_rms / grad_rms))?;
    let record = GuidedStep {
        step: 0,
        take: 0,
        sigma,
        cosine,
        loss: l_value,
        clipped: clipped_share,
        push_rms: (g.scale * step_rms) as f32,
    };
    Ok(Guided {
        x0,
        push: Some((push, record)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// Re-noising adds independent noise of variance σ² − σ_next², so the state's noise level
    /// goes from σ_next back to σ.
    #[test]
    fn renoise_adds_the_missing_variance() {
        let x = Tensor::zeros((1, 200, 100), candle_core::DType::F32, &Device::Cpu).unwrap();
        let y = renoise(&x, 5.0, 3.0, &mut Rng::new(1)).unwrap();
        let std = rms(&y).unwrap();
        assert!((std - 4.0).abs() < 0.05, "std {std}, expected 4");
        let again = renoise(&x, 5.0, 3.0, &mut Rng::new(1)).unwrap();
        let values = |t: &Tensor| t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
        assert_eq!(values(&y), values(&again), "re-noising is not reproducible");
    }

    /// Only guided steps inside the recurrence window are taken more than once.
    #[test]
    fn recurrence_acts_only_on_guided_steps_in_its_window() {
        let mut g = SamplingGuidance {
            recurrence: Recurrence {
                times: 3,
                ..Recurrence::default()
            },
            ..SamplingGuidance::default()
        };
        assert_eq!(g.times(5.0, 4.0), 3);
        assert_eq!(
            g.times(15.0, 13.0),
            1,
            "guided, outside the recurrence window"
        );
        assert_eq!(g.times(0.15, 0.1), 1, "outside the guided window");
        g.scale = 0.0;
        assert_eq!(g.times(5.0, 4.0), 1, "unguided steps are taken once");
    }
}
