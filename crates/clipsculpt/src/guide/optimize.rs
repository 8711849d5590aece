//! The CLIP-guided latent optimization loop: per step, an Adam step on
//! `loss = view loss + λ_z·mean((z − z₀)²)` (the view loss is [`ViewLoss`]: random views, the
//! CLIP term and the transmittance term; the pull toward the start `z₀` is the loop's own),
//! keeping the latent in [−1, 1]. Non-finite steps are skipped and counted.
//!
//! **Never worse than the start.** Every `eval_every` steps the latent is scored on fixed,
//! held-aside views ([`score`]: four cameras and draws that the optimization never renders), and
//! the best-scoring latent is the one returned; the start stays unless a latent beats it by
//! [`GuideSettings::keep_margin`].

use candle_core::{Tensor, Var};
use candle_nn::{AdamW, Optimizer, ParamsAdamW};

use super::error::GuideError;
use super::held_aside::{score, Start};
use super::objective::ViewLoss;
use super::schedule::LrSchedule;
use super::settings::GuideSettings;
use super::target::Target;
use crate::autodiff::rng::Rng;
use crate::clip::ClipScorer;
use crate::shap_e::Decoder;

/// What the loop measured.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct GuideTrace {
    /// Mean CLIP cosine of the step's views (before the update), per step.
    pub cosine: Vec<f32>,
    /// Total loss per step.
    pub(crate) loss: Vec<f32>,
    /// Steps skipped for a non-finite loss or gradient.
    pub skipped: usize,
    /// `(steps taken, held-aside score)` of every evaluation, the start (0 steps) first.
    pub evals: Vec<(usize, f32)>,
    /// Steps taken by the returned latent (0: the start was best).
    pub best_step: usize,
}

/// What [`optimize`] returns.
#[derive(Debug, Clone)]
pub(crate) struct Optimized {
    /// The best latent by the held-aside score (plain tensor, no graph).
    pub(crate) latent: Tensor,
    /// What the loop measured.
    pub(crate) trace: GuideTrace,
}

/// Optimizes the start's latent `(1, rows, d)` toward `target`; returns the best latent by the
/// held-aside score and the trace. `on_step(step, cosine)` reports progress.
pub(crate) fn optimize(
    decoder: &Decoder,
    scorer: &ClipScorer,
    target: &Target,
    start: Start<'_>,
    s: &GuideSettings,
    rng: &mut Rng,
    mut on_step: impl FnMut(usize, f32),
) -> Result<Optimized, GuideError> {
    let view_loss = ViewLoss {
        decoder,
        scorer,
        target,
        settings: s,
    };
    let mut adam = Adam::new(view_loss, start.latent.detach())?;
    let eval_res = s.eval_side(scorer.image_size());
    let held_aside = |latent: &Tensor| score(decoder, scorer, target, latent, eval_res);
    let start_score = match start.score {
        Some(score) => score,
        None => held_aside(&adam.z0).map_err(GuideError::at(0))?.score,
    };
    let mut trace = GuideTrace::default();
    trace.evals.push((0, start_score));
    // The start stays unless a later evaluation beats it by the keep margin.
    let (mut best, mut best_score) = (adam.z0.clone(), start_score + s.keep_margin.max(0.0));
    let mut bad = BadRun::default();
    for step in 0..s.steps {
        let Some(cosine) = adam.step(step, rng, &mut bad, &mut trace)? else {
            continue;
        };
        on_step(step, cosine);
        let taken = step + 1;
        if taken == s.steps || (s.eval_every > 0 && taken % s.eval_every == 0) {
            let wrap = GuideError::at(step);
            let now = adam.z.as_tensor().detach();
            let sc = held_aside(&now).map_err(&wrap)?.score;
            trace.evals.push((taken, sc));
            if sc > best_score {
                (best, best_score, trace.best_step) = (now.copy().map_err(&wrap)?, sc, taken);
            }
        }
    }
    Ok(Optimized {
        latent: best,
        trace,
    })
}

/// The run of consecutive non-finite steps, and the last finite loss.
#[derive(Debug, Default)]
struct BadRun {
    count: usize,
    last_finite: Option<f32>,
}

/// The Adam state of one run: the latent `z` (a `Var`), its start `z0` and the schedule.
struct Adam<'a> {
    view_loss: ViewLoss<'a>,
    z0: Tensor,
    z: Var,
    opt: AdamW,
    schedule: LrSchedule,
}

impl<'a> Adam<'a> {
    fn new(view_loss: ViewLoss<'a>, z0: Tensor) -> Result<Self, GuideError> {
        let s = view_loss.settings;
        let wrap = GuideError::at(0);
        let z = Var::from_tensor(&z0).map_err(&wrap)?;
        let schedule = LrSchedule::warmup_cosine(s.lr, s.steps, 0.1);
        let params = ParamsAdamW {
            lr: s.lr,
            beta1: 0.9,
            beta2: 0.99,
            eps: 1e-8,
            weight_decay: 0.0,
        };
        let opt = AdamW::new(vec![z.clone()], params).map_err(&wrap)?;
        Ok(Self {
            view_loss,
            z0,
            z,
            opt,
            schedule,
        })
    }

    /// Step `step`: the loss (view loss plus the pull toward `z0`) and its gradient; a finite one
    /// updates `z` (clamped to [−1, 1]), is traced and returns its views' mean cosine, a
    /// non-finite one is skipped (`None`) and counted in `bad`, which fails the run after
    /// [`GuideSettings::max_bad_steps`] in a row.
    fn step(
        &mut self,
        step: usize,
        rng: &Rng,
        bad: &mut BadRun,
        trace: &mut GuideTrace,
    ) -> Result<Option<f32>, GuideError> {
        let s = self.view_loss.settings;
        let wrap = GuideError::at(step);
        self.opt.set_learning_rate(self.schedule.at(step));
        let progress = step as f64 / s.steps.max(1) as f64;
        let mut step_rng = rng.fork(step as u64);
        let z = self.z.as_tensor();
        let parts = self
            .view_loss
            .loss(z, progress, &mut step_rng)
            .map_err(&wrap)?;
        let pull = (z - &self.z0)
            .and_then(|d| d.sqr())
            .and_then(|d| d.mean_all())
            .and_then(|d| d.affine(s.prior_weight, 0.0))
            .map_err(&wrap)?;
        let loss = (parts.loss + pull).map_err(&wrap)?;
        let (l, c) = (
            loss.to_scalar::<f32>().map_err(&wrap)?,
            parts.cosine.to_scalar::<f32>().map_err(&wrap)?,
        );
        let grads = loss.backward().map_err(&wrap)?;
        let finite_grad = match grads.get(&self.z) {
            Some(g) => g
                .sqr()
                .and_then(|g| g.sum_all())
                .and_then(|g| g.to_scalar::<f32>())
                .map_err(&wrap)?
                .is_finite(),
            None => false,
        };
        if !l.is_finite() || !finite_grad {
            trace.skipped += 1;
            bad.count += 1;
            tracing::warn!("step {step}: non-finite loss or gradient, skipped");
            if bad.count >= s.max_bad_steps {
                return Err(GuideError::NonFinite {
                    count: bad.count,
                    step,
                    last_finite: bad.last_finite,
                });
            }
            return Ok(None);
        }
        (bad.count, bad.last_finite) = (0, Some(l));
        self.opt.step(&grads).map_err(&wrap)?;
        let clamped = self.z.as_tensor().clamp(-1.0f32, 1.0f32).map_err(&wrap)?;
        self.z.set(&clamped).map_err(&wrap)?;
        trace.loss.push(l);
        trace.cosine.push(c);
        Ok(Some(c))
    }
}
