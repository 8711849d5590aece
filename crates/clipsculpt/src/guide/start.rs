//! Where the optimization starts: the prior's sample for the prompt, or a better candidate.
//!
//! Gradient steps on the latent move it only locally: a wrong shape sits behind a barrier of
//! worse-looking intermediate shapes (measured on the toy: `docs/experiments.md`, "Guidance and
//! the toy world"), so the loop alone keeps the prior's shape. Exploration gives it other
//! starting points: the caller supplies a bank of candidate latents (the prior sampled for
//! related prompts, for example the negatives), and [`Explore::Analogies`] adds the bank's
//! consensus completions ([`super::analogy`]), latents of objects the prior does not produce.
//! Every candidate is scored on the held-aside views without a graph, first at a cheap side
//! ([`SCREEN_SIDE`]) and the best few again at the full one; optionally those and the prior's
//! own sample are first refined for a few steps. A candidate replaces the prior's sample only
//! when it beats it by [`GuideSettings::switch_margin`].

use candle_core::Tensor;

use super::analogy;
use super::error::GuideError;
use super::explore::Explore;
use super::held_aside::{score, Start};
use super::optimize::optimize;
use super::settings::GuideSettings;
use super::target::Target;
use crate::autodiff::rng::Rng;
use crate::clip::ClipScorer;
use crate::shap_e::Decoder;

/// Largest side at which every candidate is screened; only the best [`FINALISTS`] are scored at
/// the held-aside views' full side.
pub(crate) const SCREEN_SIDE: usize = 32;

/// Candidates rescored at the full side after screening (at least the number refined).
pub(crate) const FINALISTS: usize = 3;

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
    pub(crate) start_score: Option<f32>,
    /// Wall seconds of the exploration, the bank's sampling included (set by the caller that
    /// samples the bank).
    pub(crate) seconds: f64,
}

/// What [`choose_start`] returns.
#[derive(Debug, Clone)]
pub(crate) struct ChosenStart {
    /// The latent the loop starts from `(1, rows, d)`.
    pub(crate) latent: Tensor,
    /// How it was chosen ([`StartChoice::start_score`]: its score, when known).
    pub(crate) choice: StartChoice,
}

/// Chooses the latent to optimize from the prior's sample `prior (1, rows, d)` (with its
/// held-aside score when the caller has it) and `bank` `(n, rows, d)` (may be empty): gathers the
/// candidates, screens them, then picks the best finalist by its score or by refinement probes.
pub(crate) fn choose_start(
    decoder: &Decoder,
    scorer: &ClipScorer,
    target: &Target,
    prior: Start<'_>,
    bank: Option<&Tensor>,
    s: &GuideSettings,
    rng: &Rng,
) -> Result<ChosenStart, GuideError> {
    let Some(bank) = bank.filter(|_| s.explore != Explore::Off) else {
        let choice = StartChoice {
            start_score: prior.score,
            ..StartChoice::default()
        };
        return Ok(ChosenStart {
            latent: prior.latent.clone(),
            choice,
        });
    };
    let explorer = Explorer {
        decoder,
        scorer,
        target,
        settings: s,
        side: s.eval_side(scorer.image_size()),
    };
    let candidates = Candidates::gather(prior.latent, bank, s.explore)?;
    let screening = explorer.screen(&candidates.latents)?;
    let prior_score = match prior.score {
        Some(score) => score,
        None => explorer.held_aside(prior.latent, explorer.side)?,
    };
    let (pick, probes) = if s.explore_refine == 0 {
        (explorer.pick_by_score(&screening, prior_score), Vec::new())
    } else {
        let refined = explorer.refine(prior.latent, &candidates, &screening, prior_score, rng)?;
        (refined.pick, refined.probes)
    };
    let choice = StartChoice {
        candidate: pick.candidate,
        prior_score: Some(prior_score),
        screen_side: screening.side,
        screen_scores: screening.scores,
        finalists: screening
            .finalists
            .iter()
            .map(|f| (f.candidate, f.score))
            .collect(),
        bank_size: candidates.bank_size,
        completion_support: candidates.completion_support,
        probes: probes.iter().map(|p| (p.candidate, p.score)).collect(),
        start_score: pick.score,
        seconds: 0.0,
    };
    let latent = match (pick.latent, pick.candidate) {
        (Some(refined), _) => refined,
        (None, Some(i)) => candidates.latents[i].clone(),
        (None, None) => prior.latent.clone(),
    };
    Ok(ChosenStart { latent, choice })
}

/// The latents exploration considers besides the prior's sample: the bank's, then (with
/// [`Explore::Analogies`]) the bank's consensus completions.
struct Candidates {
    /// Each `(1, rows, d)`.
    latents: Vec<Tensor>,
    /// How many of them are the bank's.
    bank_size: usize,
    /// Support (agreeing triples) of each completion.
    completion_support: Vec<usize>,
}

impl Candidates {
    fn gather(prior: &Tensor, bank: &Tensor, explore: Explore) -> Result<Self, GuideError> {
        let wrap = GuideError::at(0);
        let mut latents: Vec<Tensor> = (0..bank.dim(0).map_err(&wrap)?)
            .map(|i| bank.get(i)?.unsqueeze(0))
            .collect::<candle_core::Result<_>>()
            .map_err(&wrap)?;
        let bank_size = latents.len();
        let mut completion_support = Vec::new();
        if explore == Explore::Analogies {
            let flat = |z: &Tensor| z.flatten_all()?.to_vec1::<f32>();
            let flats: Vec<Vec<f32>> = std::iter::once(prior)
                .chain(&latents)
                .map(flat)
                .collect::<candle_core::Result<_>>()
                .map_err(&wrap)?;
            for c in analogy::completions(&flats) {
                completion_support.push(c.support);
                let z = Tensor::from_vec(c.latent, prior.shape(), prior.device())
                    .and_then(|z| z.to_dtype(prior.dtype()))
                    .map_err(&wrap)?;
                latents.push(z);
            }
        }
        Ok(Self {
            latents,
            bank_size,
            completion_support,
        })
    }
}

/// A candidate and its held-aside score at the full side.
#[derive(Debug, Clone, Copy)]
struct Finalist {
    candidate: usize,
    score: f32,
}

/// Every candidate scored at the screening side, and the best few at the full side.
struct Screening {
    /// The screening side.
    side: usize,
    /// Each candidate's score at it.
    scores: Vec<f32>,
    /// The best-screened candidates at the full side, best first.
    finalists: Vec<Finalist>,
}

/// A chosen start: a candidate or the prior's sample (`candidate: None`).
struct Pick {
    candidate: Option<usize>,
    /// The refined latent, when a probe moved it; `None`: the candidate (or prior) as it is.
    latent: Option<Tensor>,
    /// Its held-aside score at the full side, when known.
    score: Option<f32>,
}

/// One refinement probe: which start it refined and its best held-aside score.
struct Probe {
    candidate: Option<usize>,
    score: f32,
}

/// What the refinement probes chose.
struct Refined {
    pick: Pick,
    probes: Vec<Probe>,
}

/// What screening and refinement share: the models, the prompt, the settings and the full
/// held-aside side.
struct Explorer<'a> {
    decoder: &'a Decoder,
    scorer: &'a ClipScorer,
    target: &'a Target,
    settings: &'a GuideSettings,
    side: usize,
}

impl Explorer<'_> {
    /// The held-aside score of `z` at `side`.
    fn held_aside(&self, z: &Tensor, side: usize) -> Result<f32, GuideError> {
        score(self.decoder, self.scorer, self.target, z, side)
            .map(|sc| sc.score)
            .map_err(GuideError::at(0))
    }

    /// Screening: every candidate at a cheap side, then the best few at the full side.
    fn screen(&self, candidates: &[Tensor]) -> Result<Screening, GuideError> {
        let side = self.side.min(SCREEN_SIDE);
        let scores = candidates
            .iter()
            .map(|z| self.held_aside(z, side))
            .collect::<Result<Vec<f32>, _>>()?;
        let mut order: Vec<usize> = (0..candidates.len()).collect();
        order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]));
        order.truncate(FINALISTS.max(self.settings.explore_refine));
        let mut finalists = Vec::with_capacity(order.len());
        for &candidate in &order {
            let score = if side == self.side {
                scores[candidate]
            } else {
                self.held_aside(&candidates[candidate], self.side)?
            };
            finalists.push(Finalist { candidate, score });
        }
        finalists.sort_by(|a, b| b.score.total_cmp(&a.score));
        Ok(Screening {
            side,
            scores,
            finalists,
        })
    }

    /// The best finalist if it beats the prior's sample by the switch margin, else the prior's.
    fn pick_by_score(&self, screening: &Screening, prior_score: f32) -> Pick {
        match screening.finalists.first() {
            Some(f) if f.score >= prior_score + self.settings.switch_margin => Pick {
                candidate: Some(f.candidate),
                latent: None,
                score: Some(f.score),
            },
            _ => Pick {
                candidate: None,
                latent: None,
                score: Some(prior_score),
            },
        }
    }

    /// Refines the prior's sample and the best [`GuideSettings::explore_refine`] finalists for
    /// [`GuideSettings::explore_steps`] each; a finalist wins when its best score beats the
    /// refined prior's by the switch margin.
    fn refine(
        &self,
        prior: &Tensor,
        candidates: &Candidates,
        screening: &Screening,
        prior_score: f32,
        rng: &Rng,
    ) -> Result<Refined, GuideError> {
        let s = self.settings;
        let probe = GuideSettings {
            steps: s.explore_steps,
            ..s.clone()
        };
        let finalists = screening.finalists.iter().take(s.explore_refine);
        let starts = std::iter::once((None, Some(prior_score)))
            .chain(finalists.map(|f| (Some(f.candidate), Some(f.score))));
        let (mut best, mut best_score): (Option<Pick>, f32) = (None, f32::NEG_INFINITY);
        let mut probes = Vec::new();
        let mut refined_prior = f32::NEG_INFINITY;
        for (k, (candidate, score)) in starts.enumerate() {
            let start = Start {
                latent: candidate.map_or(prior, |i| &candidates.latents[i]),
                score,
            };
            let run = optimize(
                self.decoder,
                self.scorer,
                self.target,
                start,
                &probe,
                &mut rng.fork(k as u64),
                |_, _| {},
            )?;
            let sc = run
                .trace
                .evals
                .iter()
                .map(|e| e.1)
                .fold(f32::NEG_INFINITY, f32::max);
            probes.push(Probe {
                candidate,
                score: sc,
            });
            if candidate.is_none() {
                refined_prior = sc;
            }
            let margin = if candidate.is_none() {
                0.0
            } else {
                s.switch_margin
            };
            if (best.is_none() || sc > best_score) && sc >= refined_prior + margin {
                best_score = sc;
                best = Some(Pick {
                    candidate,
                    latent: Some(run.latent),
                    score: None,
                });
            }
        }
        let pick = best.unwrap_or(Pick {
            candidate: None,
            latent: None,
            score: None,
        });
        Ok(Refined { pick, probes })
    }
}
