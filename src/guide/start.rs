//! Where the optimization starts: the prior's sample for the prompt, or a better candidate.
//!
//! Gradient steps on the latent move it only locally: a wrong shape sits behind a barrier of
//! worse-looking intermediate shapes (see the README's diagnosis), so the loop alone keeps the
//! prior's shape. Exploration gives it other starting points: the caller supplies a bank of
//! candidate latents (the prior sampled for related prompts, for example the negatives), and
//! [`Explore::Analogies`] adds the bank's consensus completions ([`super::analogy`]), latents of
//! objects the prior does not produce. Every candidate is scored on the held-aside views without
//! a graph, first at a cheap side ([`SCREEN_SIDE`]) and the best few again at the full one;
//! optionally those and the prior's own sample are first refined for a few steps.
//! A candidate replaces the prior's sample only when it beats it by
//! [`GuideSettings::switch_margin`].

use candle_core::Tensor;

use super::analogy;
use super::explore::Explore;
use super::optimize::{optimize, score, GuideError, GuideSettings, Start};
use super::target::Target;
use crate::autodiff::rng::Rng;
use crate::clip::ClipScorer;
use crate::shap_e::Decoder;

/// Largest side at which every candidate is screened; only the best [`FINALISTS`] are scored at
/// the held-aside views' full side.
pub const SCREEN_SIDE: usize = 32;

/// Candidates rescored at the full side after screening (at least the number refined).
pub const FINALISTS: usize = 3;

/// How a start was chosen, for the report.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct StartChoice {
    /// Index of the chosen candidate (the bank's latents, then the completions), `None` for the
    /// prior's own sample.
    pub candidate: Option<usize>,
    /// Held-aside score of the prior's sample (before any refinement).
    pub prior_score: Option<f32>,
    /// Side of the screening views.
    pub screen_side: usize,
    /// Held-aside score at the screening side of every candidate before refinement: the bank's,
    /// then the completions'.
    pub screen_scores: Vec<f32>,
    /// `(candidate, held-aside score at the full side)` of the best-screened candidates, best
    /// first.
    pub finalists: Vec<(usize, f32)>,
    /// Number of bank latents among the candidates.
    pub bank_size: usize,
    /// Support (agreeing triples) of each completion.
    pub completion_support: Vec<usize>,
    /// `(candidate index or None for the prior's sample, score after the probe steps)` of each
    /// refinement probe.
    pub probes: Vec<(Option<usize>, f32)>,
    /// Held-aside score of the returned start at the full side, when known (not after
    /// refinement probes): the loop starts from it without rendering again.
    pub start_score: Option<f32>,
    /// Wall seconds of the exploration, the bank's sampling included (set by the caller that
    /// samples the bank).
    pub seconds: f64,
}

/// Chooses the latent to optimize from the prior's sample `prior (1, rows, d)` (with its
/// held-aside score when the caller has it) and `bank` `(n, rows, d)` (may be empty). Returns the
/// start and how it was chosen ([`StartChoice::start_score`]: the start's score, when known).
pub fn choose_start(
    decoder: &Decoder,
    scorer: &ClipScorer,
    target: &Target,
    prior: Start<'_>,
    bank: Option<&Tensor>,
    s: &GuideSettings,
    rng: &Rng,
) -> Result<(Tensor, StartChoice), GuideError> {
    let wrap = |source| GuideError::Step { step: 0, source };
    let z0 = prior.latent;
    let mut choice = StartChoice::default();
    let Some(bank) = bank.filter(|_| s.explore != Explore::Off) else {
        choice.start_score = prior.score;
        return Ok((z0.clone(), choice));
    };
    let mut candidates: Vec<Tensor> = (0..bank.dim(0).map_err(wrap)?)
        .map(|i| bank.get(i)?.unsqueeze(0))
        .collect::<candle_core::Result<_>>()
        .map_err(wrap)?;
    choice.bank_size = candidates.len();
    if s.explore == Explore::Analogies {
        let flat = |z: &Tensor| z.flatten_all()?.to_vec1::<f32>();
        let latents: Vec<Vec<f32>> = std::iter::once(z0)
            .chain(&candidates)
            .map(flat)
            .collect::<candle_core::Result<_>>()
            .map_err(wrap)?;
        for c in analogy::completions(&latents) {
            choice.completion_support.push(c.support);
            let z = Tensor::from_vec(c.latent, z0.shape(), z0.device())
                .and_then(|z| z.to_dtype(z0.dtype()))
                .map_err(wrap)?;
            candidates.push(z);
        }
    }
    let side = s.eval_side(scorer.image_size());
    let held_aside = |z: &Tensor, side| score(decoder, scorer, target, z, side).map(|sc| sc.score);
    // Screening: every candidate at a cheap side, then the best few at the full side.
    choice.screen_side = side.min(SCREEN_SIDE);
    for z in &candidates {
        choice
            .screen_scores
            .push(held_aside(z, choice.screen_side).map_err(wrap)?);
    }
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    order.sort_by(|&a, &b| choice.screen_scores[b].total_cmp(&choice.screen_scores[a]));
    order.truncate(FINALISTS.max(s.explore_refine));
    for &i in &order {
        let sc = if choice.screen_side == side {
            choice.screen_scores[i]
        } else {
            held_aside(&candidates[i], side).map_err(wrap)?
        };
        choice.finalists.push((i, sc));
    }
    choice.finalists.sort_by(|a, b| b.1.total_cmp(&a.1));
    let prior_score = match prior.score {
        Some(score) => score,
        None => held_aside(z0, side).map_err(wrap)?,
    };
    choice.prior_score = Some(prior_score);
    if s.explore_refine == 0 {
        return Ok(match choice.finalists.first() {
            Some(&(i, sc)) if sc >= prior_score + s.switch_margin => {
                choice.candidate = Some(i);
                choice.start_score = Some(sc);
                (candidates[i].clone(), choice)
            }
            _ => {
                choice.start_score = Some(prior_score);
                (z0.clone(), choice)
            }
        });
    }
    let order: Vec<usize> = choice.finalists.iter().map(|f| f.0).collect();
    let probe = GuideSettings {
        steps: s.explore_steps,
        ..s.clone()
    };
    let mut best: Option<(Option<usize>, Tensor, f32)> = None;
    let mut refined_prior = f32::NEG_INFINITY;
    let starts = std::iter::once(None).chain(order.into_iter().take(s.explore_refine).map(Some));
    for (k, which) in starts.enumerate() {
        let start = Start {
            latent: which.map_or(z0, |i| &candidates[i]),
            score: match which {
                None => Some(prior_score),
                Some(i) => choice.finalists.iter().find(|f| f.0 == i).map(|f| f.1),
            },
        };
        let (z, trace) = optimize(
            decoder,
            scorer,
            target,
            start,
            &probe,
            &mut rng.fork(k as u64),
            |_, _| {},
        )?;
        let sc = trace
            .evals
            .iter()
            .map(|e| e.1)
            .fold(f32::NEG_INFINITY, f32::max);
        choice.probes.push((which, sc));
        if which.is_none() {
            refined_prior = sc;
        }
        let margin = if which.is_none() {
            0.0
        } else {
            s.switch_margin
        };
        if best.as_ref().is_none_or(|b| sc > b.2) && sc >= refined_prior + margin {
            best = Some((which, z, sc));
        }
    }
    match best {
        Some((which, z, _)) => {
            choice.candidate = which;
            Ok((z, choice))
        }
        None => Ok((z0.clone(), choice)),
    }
}
