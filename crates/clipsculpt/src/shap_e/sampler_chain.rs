//! The sampler's last Heun steps as a differentiable chain: each step is one checkpointable
//! [`Block`] (`x_i → x_{i+1}`, the predictor and, except for the last step, the corrector), so a
//! gradient can run from the finished latent back to the state N steps before the end, or to the
//! text conditioning, with nested checkpointing: a checkpointed step keeps only its input state,
//! and when backward recomputes it, the prior's blocks inside are checkpointed again under their
//! own policy. The steps draw no random numbers (Heun without churn), so a recompute is exact.

use std::sync::Arc;

use candle_core::{Result, Tensor};

use super::prior::PriorTransformer;
use super::sampler::Denoiser;
use super::scheduler::HeunDiscreteScheduler;
use crate::autodiff::checkpoint::{run_chain, Block, Policy};

/// One Heun step of a sampling run as a block: `forward(x, [text_embeds])` is the state after
/// the step, with the classifier-free-guided prior conditioned on the raw CLIP `text_embeds
/// (B, dim)` (the context, so that it can receive a gradient).
#[derive(Clone)]
pub(crate) struct HeunStep {
    prior: Arc<PriorTransformer>,
    /// The schedule positioned at this step's start.
    sched: HeunDiscreteScheduler,
    guidance_scale: f32,
    /// Checkpoint policy of the prior's blocks inside the step.
    prior_policy: Policy,
}

impl Block for HeunStep {
    fn forward(&self, x: &Tensor, context: &[Tensor]) -> Result<Tensor> {
        let Some(embeds) = context.first() else {
            candle_core::bail!("a Heun step needs the text embeddings as its context (bug)");
        };
        let denoiser = Denoiser::new(&self.prior, embeds, self.guidance_scale)?;
        let mut sched = self.sched.clone();
        let x0 = denoiser.x0(&sched, x, &self.prior_policy)?;
        let mut x = sched.step(&x0, x)?;
        if !sched.done() && !sched.starts_step() {
            let x0 = denoiser.x0(&sched, &x, &self.prior_policy)?;
            x = sched.step(&x0, &x)?;
        }
        Ok(x)
    }
}

/// The last Heun steps of a schedule, from step `first` to the end, as a chain of [`HeunStep`]s.
pub struct SamplerChain {
    steps: Vec<HeunStep>,
    /// σ at the chain's input state.
    sigma: f32,
}

impl SamplerChain {
    /// The steps `first..` of `sched` (a fresh schedule) with `prior` at classifier-free
    /// `guidance_scale`, the prior's blocks under `prior_policy`.
    pub fn new(
        prior: &PriorTransformer,
        sched: &HeunDiscreteScheduler,
        first: usize,
        guidance_scale: f32,
        prior_policy: Policy,
    ) -> Result<Self> {
        let prior = Arc::new(prior.clone());
        let start = sched.at_step(first)?;
        let steps = (first..sched.num_steps())
            .map(|i| {
                Ok(HeunStep {
                    prior: prior.clone(),
                    sched: sched.at_step(i)?,
                    guidance_scale,
                    prior_policy,
                })
            })
            .collect::<Result<_>>()?;
        Ok(Self {
            steps,
            sigma: start.step_sigmas().0,
        })
    }

    /// Heun steps in the chain.
    pub fn len(&self) -> usize {
        self.steps.len()
    }

    /// Whether the chain has no steps (never: a chain holds at least the last step).
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// σ of the state the chain starts from.
    pub fn sigma(&self) -> f32 {
        self.sigma
    }

    /// The finished latent from the state `x (B, rows, d)` at the chain's first step and the raw
    /// CLIP `text_embeds (B, dim)`, the steps checkpointed as `step_policy` says (a step is a
    /// block of that policy). Differentiable in `x` and `text_embeds` when they track.
    pub fn run(&self, x: &Tensor, text_embeds: &Tensor, step_policy: &Policy) -> Result<Tensor> {
        let plan = step_policy
            .plan(self.steps.len(), None)
            .map_err(|e| candle_core::Error::Msg(format!("sampler-step checkpoint plan: {e}")))?;
        run_chain(&self.steps, x, std::slice::from_ref(text_embeds), &plan)
    }
}
