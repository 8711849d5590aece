//! Best of N noises: the prior is sampled, unguided, from `s.candidates` noises, and the run goes
//! on from the noise whose sample the scoring CLIP rates highest on the held-aside views. The
//! choice reads only the prompt and the scorer (no negatives, no reference objects), so it runs
//! the same on published weights. Candidate 0 is the seed's own noise: one candidate is a run
//! without a choice, bit for bit.

use anyhow::Result;
use candle_core::{Device, Tensor};
use serde::Serialize;

use super::{stream, Models, RunSettings};
use crate::autodiff::rng::Rng;
use crate::guide::{self, Score, Target};

/// How the run's noise was chosen (`report.json`'s `noise`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct NoiseChoice {
    /// Held-aside score of each candidate's unguided sample, candidate 0 first.
    pub scores: Vec<f32>,
    /// The chosen candidate (the first of equal best scores).
    pub chosen: usize,
}

/// The chosen candidate: the root generator the run goes on with, its unguided sample and that
/// sample's held-aside score.
pub struct Chosen {
    pub rng: Rng,
    pub sample: Tensor,
    pub score: Score,
    pub choice: NoiseChoice,
}

/// The root generator of candidate `k` of a run whose root is `rng` (`rng` itself for 0).
pub fn candidate_rng(rng: &Rng, k: usize) -> Rng {
    match k {
        0 => rng.clone(),
        k => rng.fork(stream::CANDIDATES).fork(k as u64),
    }
}

impl Models {
    /// The best of `s.candidates` (at least one) unguided samples of `target`'s prompt by
    /// held-aside score; candidate `k` is the run with root generator [`candidate_rng`]`(rng, k)`.
    /// `on_candidate(k, cosine)` reports each candidate once scored.
    pub fn best_noise(
        &self,
        target: &Target,
        s: &RunSettings,
        rng: &Rng,
        device: &Device,
        mut on_candidate: impl FnMut(usize, f32),
    ) -> Result<Chosen> {
        let side = s.guide.eval_side(self.scorer.image_size());
        let mut best: Option<(usize, Rng, Tensor, Score)> = None;
        let mut scores = Vec::with_capacity(s.candidates);
        for k in 0..s.candidates.max(1) {
            let rng = candidate_rng(rng, k);
            let sample = self.run_sample(target.prompt(), s, &rng, device)?;
            let score = guide::score(&self.shap_e.decoder, &self.scorer, target, &sample, side)?;
            scores.push(score.score);
            on_candidate(k, score.cosine);
            if best.as_ref().is_none_or(|b| score.score > b.3.score) {
                best = Some((k, rng, sample, score));
            }
        }
        let (chosen, rng, sample, score) =
            best.ok_or_else(|| anyhow::anyhow!("no candidate noise (bug)"))?;
        Ok(Chosen {
            rng,
            sample,
            score,
            choice: NoiseChoice { scores, chosen },
        })
    }
}
