//! End-to-end guidance through the sampler's last steps (`--guide end-to-end`).
//!
//! The sampler runs unguided until N Heun steps before the end. From there the finished latent is
//! a differentiable function of the state `x_N` (and of the text conditioning): the last N steps
//! as a [`SamplerChain`], each step a checkpointed segment whose prior blocks are checkpointed
//! again inside it. Each iteration renders and scores the finished latent, backpropagates the
//! view loss through the N steps to `x_N` (or to the conditioning), and moves it against the
//! gradient by a fixed share of its own scale:
//!
//! `x_N ← x_N − η · σ_N · g / rms(g)` (state), `e ← e − η · rms(e) · g / rms(g)` (conditioning).
//!
//! The result is the chain's output from the last iterate, so it is always a sample of the prior;
//! with no iterations it is the unguided sample, bit for bit. The caller exports it only if it beats
//! the unguided sample on the held-aside views by the keep margin. Random views come from a
//! stream forked per iteration, outside every recomputed segment.

use std::fmt;
use std::str::FromStr;

use candle_core::{Result, Tensor, Var};

use super::error::GuideError;
use super::latent_loss::{rms, LatentLoss};
use crate::autodiff::checkpoint::Policy;
use crate::autodiff::rng::Rng;
use crate::shap_e::{Denoiser, HeunDiscreteScheduler, PriorTransformer, SamplerChain};

/// What end-to-end guidance optimizes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChainTarget {
    /// The sampler state N steps before the end (the noise those steps start from).
    State,
    /// The text conditioning of those N steps (the earlier steps keep the prompt's).
    Conditioning,
}

impl FromStr for ChainTarget {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "state" | "noise" => Ok(Self::State),
            "conditioning" | "text" => Ok(Self::Conditioning),
            _ => Err(format!("unknown target {s:?} (state, conditioning)")),
        }
    }
}

impl fmt::Display for ChainTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::State => "state",
            Self::Conditioning => "conditioning",
        })
    }
}

/// Settings of end-to-end guidance. The defaults were tuned on the toy world B's held-out split
/// (`docs/guided-sampling.md`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct EndToEndGuidance {
    /// N: the last Heun steps the gradient runs through.
    pub steps: usize,
    /// Gradient iterations.
    pub iterations: usize,
    /// `η`: each iteration moves the optimized tensor by this share of its scale.
    pub lr: f64,
    /// What is optimized.
    pub target: ChainTarget,
    /// Checkpoint policy of the sampler steps (each step is one block of the chain).
    pub step_policy: Policy,
    /// Consecutive iterations with a non-finite loss or gradient after which the run stops.
    pub max_bad_steps: usize,
}

impl Default for EndToEndGuidance {
    fn default() -> Self {
        Self {
            steps: 16,
            iterations: 8,
            lr: 0.3,
            target: ChainTarget::Conditioning,
            step_policy: Policy::BLOCKS,
            max_bad_steps: 3,
        }
    }
}

/// One iteration, as `report.json` records it.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct ChainIteration {
    /// The iteration (0-based).
    pub iteration: usize,
    /// Mean CLIP cosine of the views of the finished latent before this iteration's update.
    pub cosine: f32,
    /// The view loss.
    pub loss: f32,
    /// RMS of the update.
    pub update_rms: f32,
}

/// What end-to-end guidance measured.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct ChainTrace {
    /// Heun steps in the chain.
    pub steps: usize,
    /// σ of the state the chain starts from.
    pub sigma: f32,
    /// Every iteration with a finite loss and gradient, in order.
    pub iterations: Vec<ChainIteration>,
    /// Iterations skipped for a non-finite loss or gradient.
    pub skipped: usize,
}

/// The prior and its sampling run that end-to-end guidance acts on.
pub struct SamplingRun<'a> {
    /// The prior.
    pub prior: &'a PriorTransformer,
    /// A fresh schedule of the run's steps.
    pub sched: HeunDiscreteScheduler,
    /// Raw CLIP text embeddings `(1, dim)` of the prompt.
    pub text_embeds: Tensor,
    /// Classifier-free guidance scale.
    pub guidance_scale: f32,
    /// Checkpoint policy of the prior's blocks.
    pub(crate) prior_policy: Policy,
}

/// Samples a latent `(1, rows, d)` from standard-normal `noise`, guided end to end by `loss` as
/// `e` says (see the module docs); `rng` gives each iteration its own stream and
/// `on_iteration(i, cosine)` reports progress.
pub fn end_to_end_sample(
    run: &SamplingRun<'_>,
    noise: &Tensor,
    e: &EndToEndGuidance,
    loss: &dyn LatentLoss,
    rng: &Rng,
    mut on_iteration: impl FnMut(usize, f32),
) -> std::result::Result<ChainResult, GuideError> {
    let first = run.sched.num_steps().saturating_sub(e.steps.max(1));
    let state = unguided_until(run, noise, first).map_err(GuideError::at(0))?;
    let chain = SamplerChain::new(
        run.prior,
        &run.sched,
        first,
        run.guidance_scale,
        run.prior_policy,
    )
    .map_err(GuideError::at(0))?;
    let mut trace = ChainTrace {
        steps: chain.len(),
        sigma: chain.sigma(),
        ..ChainTrace::default()
    };
    let mut inputs = [state, run.text_embeds.clone()];
    let (slot, scale) = match e.target {
        ChainTarget::State => (0, chain.sigma() as f64),
        ChainTarget::Conditioning => (1, rms(&inputs[1]).map_err(GuideError::at(0))?),
    };
    // The finished latent is scored as guided sampling scores its last step.
    let end = run.sched.num_steps();
    let (mut bad_run, mut unguided) = (0, None);
    for i in 0..e.iterations {
        let mut views = rng.fork(i as u64);
        let (z, step) = iterate(&chain, &inputs, slot, e, (loss, end), &mut views)
            .map_err(GuideError::at(i))?;
        unguided.get_or_insert(z);
        let Some((grad, record)) = step else {
            bad_run = skipped(&mut trace, bad_run, i, e.max_bad_steps)?;
            continue;
        };
        bad_run = 0;
        let update = (grad * (e.lr * scale)).map_err(GuideError::at(i))?;
        inputs[slot] = (&inputs[slot] - update).map_err(GuideError::at(i))?;
        let record = ChainIteration {
            iteration: i,
            update_rms: (e.lr * scale) as f32,
            ..record
        };
        on_iteration(i, record.cosine);
        trace.iterations.push(record);
    }
    let latent = chain
        .run(&inputs[0], &inputs[1], &Policy::None)
        .map_err(GuideError::at(e.iterations))?;
    Ok(ChainResult {
        unguided: unguided.unwrap_or_else(|| latent.clone()),
        latent,
        trace,
    })
}

/// Counts iteration `i` as skipped (non-finite) after `bad_run` skipped ones in a row; the new
/// count, or the error once `max_bad` are.
fn skipped(
    trace: &mut ChainTrace,
    bad_run: usize,
    i: usize,
    max_bad: usize,
) -> std::result::Result<usize, GuideError> {
    trace.skipped += 1;
    tracing::warn!("end-to-end iteration {i}: non-finite loss or gradient, skipped");
    if bad_run + 1 >= max_bad {
        return Err(GuideError::NonFinite {
            count: bad_run + 1,
            step: i,
            last_finite: trace.iterations.last().map(|r| r.loss),
        });
    }
    Ok(bad_run + 1)
}

/// What end-to-end guidance made.
pub struct ChainResult {
    /// The sampler's output from the last iterate.
    pub(crate) latent: Tensor,
    /// The unguided sample from the same noise (the chain's output before any update).
    pub(crate) unguided: Tensor,
    /// What it measured.
    pub(crate) trace: ChainTrace,
}

/// The unguided sampler state at the start of Heun step `first` from `noise`.
fn unguided_until(run: &SamplingRun<'_>, noise: &Tensor, first: usize) -> Result<Tensor> {
    let denoiser = Denoiser::new(run.prior, &run.text_embeds, run.guidance_scale)?;
    let mut sched = run.sched.clone();
    let mut x = denoiser.initial_state(&sched, noise)?;
    while !(sched.starts_step() && sched.step_number() >= first) {
        let x0 = denoiser.x0(&sched, &x, &Policy::None)?;
        x = sched.step(&x0, &x)?;
    }
    Ok(x)
}

/// One iteration: the finished latent (detached), and its loss (scored as sampler step `end`)
/// with the unit-RMS gradient of `inputs[slot]` (`None` when either is not finite).
fn iterate(
    chain: &SamplerChain,
    inputs: &[Tensor; 2],
    slot: usize,
    e: &EndToEndGuidance,
    (loss, end): (&dyn LatentLoss, usize),
    rng: &mut Rng,
) -> Result<(Tensor, Option<(Tensor, ChainIteration)>)> {
    let var = Var::from_tensor(&inputs[slot])?;
    let (x, embeds) = match slot {
        0 => (var.as_tensor(), &inputs[1]),
        _ => (&inputs[0], var.as_tensor()),
    };
    let z = chain.run(x, embeds, &e.step_policy)?;
    let (l, cosine) = loss.loss(&z, end, rng)?;
    let (l_value, cosine) = (l.to_scalar::<f32>()?, cosine.to_scalar::<f32>()?);
    let grads = l.backward()?;
    let Some(grad) = grads.get(&var) else {
        candle_core::bail!("the view loss does not depend on the optimized tensor (bug)");
    };
    let grad_rms = rms(grad)?;
    let z = z.detach();
    if !l_value.is_finite() || !grad_rms.is_finite() || grad_rms == 0.0 {
        return Ok((z, None));
    }
    let record = ChainIteration {
        iteration: 0,
        cosine,
        loss: l_value,
        update_rms: 0.0,
    };
    Ok((z, Some(((grad / grad_rms)?, record))))
}
