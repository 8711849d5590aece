//! Where the optimization starts: the prior's sample for the prompt, or a better candidate.
//!
//! Gradient steps on the latent move it only locally: a wrong shape sits behind a barrier of
//! worse-looking intermediate shapes (see the README's diagnosis), so the loop alone keeps the
//! prior's shape. Exploration gives it other starting points: the caller supplies a bank of
//! candidate latents (the prior sampled for related prompts, for example the negatives); each is
//! scored on the held-aside views without a graph, the best few and the prior's own sample are
//! each refined for a few steps, and a candidate replaces the prior's sample only when its refined
//! score beats the refined prior sample by a margin.

use candle_core::Tensor;

use super::optimize::{optimize, score, GuideError, GuideSettings};
use super::target::Target;
use crate::autodiff::rng::Rng;
use crate::clip::ClipScorer;
use crate::shap_e::Decoder;

/// How a start was chosen, for the report.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct StartChoice {
    /// Index of the chosen candidate in the bank, `None` for the prior's own sample.
    pub candidate: Option<usize>,
    /// Held-aside score of every bank candidate before refinement.
    pub bank_scores: Vec<f32>,
    /// `(bank index or None for the prior's sample, score after the probe steps)` of each probe.
    pub probes: Vec<(Option<usize>, f32)>,
}

/// Chooses the latent to optimize from the prior's sample `z0 (1, rows, d)` and `bank`
/// `(n, rows, d)` (may be empty). Returns the refined start and how it was chosen.
pub fn choose_start(
    decoder: &Decoder,
    scorer: &ClipScorer,
    target: &Target,
    z0: &Tensor,
    bank: Option<&Tensor>,
    s: &GuideSettings,
    rng: &Rng,
) -> Result<(Tensor, StartChoice), GuideError> {
    let wrap = |source| GuideError::Step { step: 0, source };
    let mut choice = StartChoice::default();
    let Some(bank) = bank.filter(|_| s.explore_top > 0) else {
        return Ok((z0.clone(), choice));
    };
    let side = s.eval_side(scorer.image_size());
    let n = bank.dim(0).map_err(wrap)?;
    for i in 0..n {
        let z = bank.get(i).and_then(|z| z.unsqueeze(0)).map_err(wrap)?;
        choice.bank_scores.push(
            score(decoder, scorer, target, &z, side)
                .map_err(wrap)?
                .score,
        );
    }
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| choice.bank_scores[b].total_cmp(&choice.bank_scores[a]));
    let probe = GuideSettings {
        steps: s.explore_steps,
        ..s.clone()
    };
    let mut best: Option<(Option<usize>, Tensor, f32)> = None;
    let mut prior_score = f32::NEG_INFINITY;
    let starts = std::iter::once(None).chain(order.into_iter().take(s.explore_top).map(Some));
    for (k, which) in starts.enumerate() {
        let start = match which {
            None => z0.clone(),
            Some(i) => bank.get(i).and_then(|z| z.unsqueeze(0)).map_err(wrap)?,
        };
        let (z, trace) = optimize(
            decoder,
            scorer,
            target,
            &start,
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
            prior_score = sc;
        }
        let margin = if which.is_none() {
            0.0
        } else {
            s.switch_margin
        };
        if best.as_ref().is_none_or(|b| sc > b.2) && sc >= prior_score + margin {
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
