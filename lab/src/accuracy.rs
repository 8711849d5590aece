//! `clipsculpt eval`: the toy world's accuracy per guidance mode, over prompts and seeds, judged
//! on the exported meshes by [`classify`] (no CLIP involved), with the attribution of every guided
//! run: the verdict on the latent its guided stage started from and on the one it exported.
//!
//! Modes ([`EvalMode`]): `prior` (the unguided sample), `latent` (latent optimization from it),
//! `explore` (the same with exploration by latent analogies), `sampling` (guided sampling through
//! the prior from the same noise), `both` (guided sampling, then latent optimization) and
//! `end-to-end` (the state before the sampler's last steps optimized through them). Every
//! mode of one prompt and seed shares the prior's noise, so `prior` is each mode's unguided twin.

use std::fmt;
use std::str::FromStr;
use std::time::Instant;

use anyhow::Result;
use candle_core::{Device, Tensor};

use crate::eval::{classify, EvalError};
use crate::fitted::Fitted;
use crate::report::{Attribution, EvalRecord, EvalTable, ScorerCheck, Verdict};
use crate::world::{Colour, Shape};
use clipsculpt::autodiff::rng::Rng;
use clipsculpt::guide::error::GuideError;
use clipsculpt::guide::{self, Explore, GuideMode, Score, Target};
use clipsculpt::pipeline::{extract_mesh, same_values, Guided, Models, RunSettings};

/// A mode the evaluation compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EvalMode {
    /// The prior's unguided sample.
    Prior,
    /// Latent optimization from the prior's sample (no exploration).
    Latent,
    /// Latent optimization from the start exploration chooses (latent analogies).
    Explore,
    /// Guided sampling through the prior.
    Sampling,
    /// Guided sampling, then latent optimization.
    Both,
    /// End-to-end guidance through the sampler's last steps.
    EndToEnd,
}

impl EvalMode {
    /// Every mode, in table order.
    pub const ALL: [EvalMode; 6] = [
        Self::Prior,
        Self::Latent,
        Self::Explore,
        Self::Sampling,
        Self::Both,
        Self::EndToEnd,
    ];

    /// The run settings of this mode from the common settings `s`.
    fn settings(self, s: &RunSettings) -> RunSettings {
        let mut run = s.clone();
        (run.mode, run.guide.explore) = match self {
            Self::Prior => (GuideMode::Off, Explore::Off),
            Self::Latent => (GuideMode::Latent, Explore::Off),
            Self::Explore => (GuideMode::Latent, Explore::Analogies),
            Self::Sampling => (GuideMode::Sampling, Explore::Off),
            Self::Both => (GuideMode::Both, Explore::Off),
            Self::EndToEnd => (GuideMode::EndToEnd, Explore::Off),
        };
        run
    }
}

impl FromStr for EvalMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|m| m.to_string() == s)
            .ok_or_else(|| {
                format!("unknown mode {s:?} (prior, latent, explore, sampling, both, end-to-end)")
            })
    }
}

impl fmt::Display for EvalMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Prior => "prior",
            Self::Latent => "latent",
            Self::Explore => "explore",
            Self::Sampling => "sampling",
            Self::Both => "both",
            Self::EndToEnd => "end-to-end",
        })
    }
}

/// What an evaluation covers: prompts (toy captions), seeds, modes, and the prior's held-out
/// combinations (which split a record counts in).
pub struct EvalPlan<'a> {
    /// The prompts.
    pub prompts: &'a [String],
    /// The seeds of every prompt.
    pub seeds: &'a [u64],
    /// The modes, in table order.
    pub modes: &'a [EvalMode],
    /// The combinations the prior did not train on ([`crate::split::held_out_split`]).
    pub held_out: &'a [(Shape, Colour)],
    /// The world's fitted latents, to score every export beside the right object ([`ScorerCheck`]).
    pub fitted: Option<&'a Fitted>,
    /// Records of an earlier, stopped evaluation with the same settings: the prompts and seeds that hold every mode
    /// are taken from it instead of run again.
    pub done: Option<&'a EvalTable>,
}

/// Evaluates every prompt of `plan` at every seed in every mode, with the common settings `s`;
/// `on_item(prompt, seed, table)` reports progress before each prompt and seed, with the records so far.
pub fn evaluate(
    models: &Models,
    plan: &EvalPlan<'_>,
    s: &RunSettings,
    device: &Device,
    mut on_item: impl FnMut(&str, u64, &EvalTable),
) -> Result<EvalTable> {
    let mut table = EvalTable::new();
    let modes: Vec<String> = plan.modes.iter().map(|m| m.to_string()).collect();
    for prompt in plan.prompts {
        let Ok(expected) = EvalTable::expected(prompt) else {
            tracing::warn!("{prompt:?} names no toy shape and colour; skipped");
            continue;
        };
        let held_out = plan.held_out.contains(&expected);
        let mut run = None;
        for &seed in plan.seeds {
            on_item(prompt, seed, &table);
            if let Some(done) = plan.done.and_then(|d| d.runs_of(prompt, seed, &modes)) {
                table.records.extend(done);
                continue;
            }
            let run = match &mut run {
                Some(run) => run,
                None => run.insert(PromptRun::new(
                    models,
                    prompt,
                    (expected, held_out),
                    (s, plan.fitted),
                    device,
                )?),
            };
            run.seed(seed, plan.modes, &mut table)?;
        }
    }
    Ok(table)
}

/// What every run of one prompt shares.
struct PromptRun<'a> {
    models: &'a Models,
    prompt: &'a str,
    expected: (Shape, Colour),
    held_out: bool,
    target: Target,
    /// The held-aside score of the right object's best fitted instance, when known.
    right_object: Option<f32>,
    s: &'a RunSettings,
    device: &'a Device,
}

/// A guided run's result, or the failed verdict of a run whose guidance stopped on a non-finite
/// loss and the seconds it ran: one diverging run counts as wrong instead of ending the eval.
type Stoppable<T> = std::result::Result<T, (Verdict, f64)>;

/// `result` with a stop on a non-finite loss ([`GuideError::NonFinite`]) turned into a
/// failed verdict (warned about); every other error stays an error.
fn stopped<T>(result: Result<T>, prompt: &str, t: Instant) -> Result<Stoppable<T>> {
    match result {
        Ok(v) => Ok(Ok(v)),
        Err(e)
            if matches!(
                e.downcast_ref::<GuideError>(),
                Some(GuideError::NonFinite { .. })
            ) =>
        {
            tracing::warn!("{prompt:?}: {e:#}; counted as a failed run");
            let verdict = Verdict::of(Err(&EvalError::GuidanceStopped(format!("{e:#}"))));
            Ok(Err((verdict, t.elapsed().as_secs_f64())))
        }
        Err(e) => Err(e),
    }
}

/// The evaluator's verdict on the mesh of latent `z` (1, rows, d), extracted on a `grid`³ grid;
/// no surface counts as an empty mesh, with a warning naming `prompt`.
pub fn judge(models: &Models, z: &Tensor, grid: usize, device: &Device, prompt: &str) -> Verdict {
    match extract_mesh(&models.shap_e.decoder, z, grid, device) {
        Ok(m) => Verdict::of(classify(&m).as_ref()),
        Err(e) => {
            tracing::warn!("{prompt:?}: no mesh ({e:#})");
            Verdict::of(Err(&EvalError::Empty))
        }
    }
}

/// A latent with the verdict on its mesh and the seconds it took to make.
struct Judged {
    latent: Tensor,
    verdict: Verdict,
    seconds: f64,
}

impl<'a> PromptRun<'a> {
    /// The runs of `prompt`, with the settings `s`; with the world's `fitted` latents, the right object's best
    /// held-aside score is computed once here.
    fn new(
        models: &'a Models,
        prompt: &'a str,
        (expected, held_out): ((Shape, Colour), bool),
        (s, fitted): (&'a RunSettings, Option<&Fitted>),
        device: &'a Device,
    ) -> Result<Self> {
        let target = Target::new(&models.scorer, prompt, &models.negatives, s.guide.contrast)?;
        let mut run = Self {
            models,
            prompt,
            expected,
            held_out,
            target,
            right_object: None,
            s,
            device,
        };
        if let Some(fitted) = fitted {
            run.right_object = Some(run.best_score(&fitted.instances(expected.0, expected.1)?)?);
        }
        Ok(run)
    }

    /// The best held-aside score among `latents` `(n, rows, d)`.
    fn best_score(&self, latents: &Tensor) -> Result<f32> {
        let mut best = f32::NEG_INFINITY;
        for i in 0..latents.dim(0)? {
            best = best.max(self.score(&latents.narrow(0, i, 1)?)?.score);
        }
        Ok(best)
    }

    /// The verdict on `z`'s mesh ([`judge`]).
    fn judge(&self, z: &Tensor) -> Verdict {
        judge(self.models, z, self.s.grid, self.device, self.prompt)
    }

    /// The held-aside score of `z`.
    fn score(&self, z: &Tensor) -> Result<Score> {
        let m = self.models;
        let side = self.s.guide.eval_side(m.scorer.image_size());
        Ok(guide::score(
            &m.shap_e.decoder,
            &m.scorer,
            &self.target,
            z,
            side,
        )?)
    }

    /// Every mode at `seed`, pushed onto `table`. The prior mode is the seed's own unguided
    /// sample; the guided modes start from the best of `s.candidates` noises (the seed's own
    /// with one), their seconds including the choice.
    fn seed(&self, seed: u64, modes: &[EvalMode], table: &mut EvalTable) -> Result<()> {
        let root = Rng::new(seed);
        let t = Instant::now();
        let z0 = self
            .models
            .run_sample(self.prompt, self.s, &root, self.device)?;
        let prior = Judged {
            verdict: self.judge(&z0),
            latent: z0,
            seconds: t.elapsed().as_secs_f64(),
        };
        let prior_score = self.score(&prior.latent)?;
        let chosen = self.chosen_noise(&root)?;
        let (rng, start, start_score, choice_seconds) = match &chosen {
            Some((rng, judged, score)) => (rng, judged, *score, judged.seconds),
            None => (&root, &prior, prior_score, 0.0),
        };
        let guides = |m: &EvalMode| matches!(m, EvalMode::Sampling | EvalMode::Both);
        let sampled = match modes.iter().any(guides) {
            true => {
                let unguided = chosen.as_ref().map(|(_, j, score)| (&j.latent, *score));
                Some(self.sampling_run((rng, unguided), choice_seconds)?)
            }
            false => None,
        };
        // A run whose guidance stopped: its failed verdict, attributed to its start.
        let stopped = |mode, (name, from): (&str, &Judged), (verdict, seconds): (Verdict, f64)| {
            let attribution = Attribution {
                start: name.into(),
                start_verdict: from.verdict.clone(),
                scores: None,
                export_step: None,
                moved: false,
            };
            self.record(mode, seed, verdict, Some(attribution), seconds)
        };
        let (from_prior, unguided) = (("prior sample", start), ("unguided sample", start));
        for &mode in modes {
            let record = match mode {
                EvalMode::Prior => {
                    let record =
                        self.record(mode, seed, prior.verdict.clone(), None, prior.seconds);
                    self.checked(record, prior_score.score)
                }
                EvalMode::Latent | EvalMode::Explore => {
                    let run = self.latent_run(mode, seed, rng, start, start_score, from_prior.0);
                    run?.unwrap_or_else(|f| stopped(mode, from_prior, f))
                }
                EvalMode::EndToEnd => self
                    .end_to_end_run(seed, rng, (start, start_score), choice_seconds)?
                    .unwrap_or_else(|f| stopped(mode, unguided, f)),
                EvalMode::Sampling | EvalMode::Both => {
                    let guided = match sampled.as_ref() {
                        Some(Ok(guided)) => guided,
                        Some(Err(failed)) => {
                            table.push(stopped(mode, unguided, failed.clone()));
                            continue;
                        }
                        None => anyhow::bail!("no guided sample for {mode} (bug)"),
                    };
                    if mode == EvalMode::Sampling {
                        let score = self.score(&guided.latent)?;
                        let attribution = Attribution {
                            start: unguided.0.into(),
                            start_verdict: start.verdict.clone(),
                            scores: Some([start_score.score, score.score]),
                            export_step: None,
                            moved: !same_values(&start.latent, &guided.latent)?,
                        };
                        let v = guided.verdict.clone();
                        let record = self.record(mode, seed, v, Some(attribution), guided.seconds);
                        self.checked(record, score.score)
                    } else {
                        let start_score = self.score(&guided.latent)?;
                        let from_guided = ("guided sample", guided);
                        self.latent_run(mode, seed, rng, guided, start_score, from_guided.0)?
                            .unwrap_or_else(|f| stopped(mode, from_guided, f))
                    }
                }
            };
            table.push(record);
        }
        Ok(())
    }

    /// With more than one candidate, the best noise of the run with root generator `root`
    /// ([`Models::best_noise`]): its root generator, its judged unguided sample (the seconds of
    /// the whole choice) and that sample's held-aside score.
    fn chosen_noise(&self, root: &Rng) -> Result<Option<(Rng, Judged, Score)>> {
        if self.s.candidates <= 1 {
            return Ok(None);
        }
        let t = Instant::now();
        let c = self
            .models
            .best_noise(&self.target, self.s, root, self.device, |_, _| {})?;
        let judged = Judged {
            verdict: self.judge(&c.sample),
            latent: c.sample,
            seconds: t.elapsed().as_secs_f64(),
        };
        Ok(Some((c.rng, judged, c.score)))
    }

    /// The guided sample of this prompt at the root generator `rng`, judged; or, when guidance
    /// stopped on a non-finite loss, the failed verdict and the seconds it ran. `unguided` is the
    /// chosen noise's unguided sample and score when there was a choice (as `generate` reuses it).
    fn sampling_run(
        &self,
        (rng, unguided): (&Rng, Option<(&Tensor, Score)>),
        seconds_before: f64,
    ) -> Result<Stoppable<Judged>> {
        let t = Instant::now();
        let s = EvalMode::Sampling.settings(self.s);
        let guided =
            self.models
                .guided_sample(&self.target, &s, (rng, unguided), self.device, |_, _| {});
        Ok(stopped(guided, self.prompt, t)?
            .map(|(z, ..)| Judged {
                verdict: self.judge(&z),
                latent: z,
                seconds: seconds_before + t.elapsed().as_secs_f64(),
            })
            .map_err(|(verdict, seconds)| (verdict, seconds_before + seconds)))
    }

    /// End-to-end guidance of this prompt at the root generator `rng`, judged, attributed to the
    /// unguided sample `prior` (held-aside score `prior_score`) from the same noise; its seconds
    /// include `seconds_before` (the choice of that noise).
    fn end_to_end_run(
        &self,
        seed: u64,
        rng: &Rng,
        (prior, prior_score): (&Judged, Score),
        seconds_before: f64,
    ) -> Result<Stoppable<EvalRecord>> {
        let t = Instant::now();
        let s = EvalMode::EndToEnd.settings(self.s);
        let guided = self
            .models
            .end_to_end_sample(&self.target, &s, rng, self.device, |_, _| {});
        let (z, scored) = match stopped(guided, self.prompt, t)? {
            Ok((z, _, scored)) => (z, scored),
            Err((verdict, seconds)) => return Ok(Err((verdict, seconds_before + seconds))),
        };
        let seconds = seconds_before + t.elapsed().as_secs_f64();
        let score = match scored {
            Some(score) => score,
            None => self.score(&z)?,
        };
        let attribution = Attribution {
            start: "unguided sample".into(),
            start_verdict: prior.verdict.clone(),
            scores: Some([prior_score.score, score.score]),
            export_step: None,
            moved: !same_values(&prior.latent, &z)?,
        };
        let verdict = self.judge(&z);
        let record = self.record(
            EvalMode::EndToEnd,
            seed,
            verdict,
            Some(attribution),
            seconds,
        );
        Ok(Ok(self.checked(record, score.score)))
    }

    /// The latent optimization of `mode` from `from` (held-aside score `from_score`), judged with
    /// its attribution.
    fn latent_run(
        &self,
        mode: EvalMode,
        seed: u64,
        rng: &Rng,
        from: &Judged,
        from_score: Score,
        from_name: &str,
    ) -> Result<Stoppable<EvalRecord>> {
        let t = Instant::now();
        let s = mode.settings(self.s);
        let start = guide::Start {
            latent: &from.latent,
            score: Some(from_score.score),
        };
        let guided = self
            .models
            .guide(&self.target, start, &s, rng, self.device, |_, _| {});
        let guided = match stopped(guided, self.prompt, t)? {
            Ok(guided) => guided,
            Err(failed) => return Ok(Err(failed)),
        };
        let seconds = from.seconds + t.elapsed().as_secs_f64();
        let export = self.judge(&guided.latent);
        let attribution = self.latent_attribution(&guided, from, from_name)?;
        let record = self.record(mode, seed, export, Some(attribution), seconds);
        match self.right_object {
            Some(_) => Ok(Ok(self.checked(record, self.score(&guided.latent)?.score))),
            None => Ok(Ok(record)),
        }
    }

    /// Where the latent stage of `guided` started (the sampler's output `from`, or an
    /// exploration candidate) and what it exported.
    fn latent_attribution(
        &self,
        guided: &Guided,
        from: &Judged,
        from_name: &str,
    ) -> Result<Attribution> {
        let (start, start_verdict) = match guided.start.candidate {
            None => (from_name.to_string(), from.verdict.clone()),
            Some(i) if i < guided.start.bank_size => {
                (format!("bank {i}"), self.judge(&guided.start_latent))
            }
            Some(i) => (
                format!("completion {}", i - guided.start.bank_size),
                self.judge(&guided.start_latent),
            ),
        };
        let trace = &guided.trace;
        let score_at = |step: usize| trace.evals.iter().find(|e| e.0 == step).map(|e| e.1);
        let scores = score_at(0)
            .zip(score_at(trace.best_step))
            .map(|(a, b)| [a, b]);
        Ok(Attribution {
            start,
            start_verdict,
            scores,
            export_step: Some(trace.best_step),
            moved: !same_values(&guided.start_latent, &guided.latent)?,
        })
    }

    /// `record` with the scorer's check of its export (held-aside score `export`), when the right
    /// object's score is known.
    fn checked(&self, mut record: EvalRecord, export: f32) -> EvalRecord {
        record.scorer = self.right_object.map(|right_object| ScorerCheck {
            export,
            right_object,
        });
        record
    }

    fn record(
        &self,
        mode: EvalMode,
        seed: u64,
        export: Verdict,
        attribution: Option<Attribution>,
        seconds: f64,
    ) -> EvalRecord {
        let (expected_shape, expected_colour) = self.expected;
        EvalRecord {
            prompt: self.prompt.to_string(),
            mode: mode.to_string(),
            seed,
            expected_shape,
            expected_colour,
            held_out: self.held_out,
            export,
            attribution,
            scorer: None,
            seconds,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A guidance stop on a non-finite loss becomes a failed verdict that names it; any other
    /// error stays an error, and a result passes through.
    #[test]
    fn only_a_non_finite_stop_becomes_a_failed_run() {
        let t = Instant::now();
        let diverged: Result<()> = Err(GuideError::NonFinite {
            count: 5,
            step: 59,
            last_finite: Some(-0.6),
        }
        .into());
        match stopped(diverged, "a red cube", t) {
            Ok(Err((verdict, _))) => {
                let error = verdict.error.unwrap_or_default();
                assert!(error.contains("guidance stopped"), "{error}");
                assert!(error.contains("5 consecutive steps"), "{error}");
                assert_eq!(verdict.shape, None);
            }
            other => panic!("expected a failed verdict, got {other:?}"),
        }
        let broken: Result<()> = Err(anyhow::anyhow!("shape mismatch"));
        assert!(stopped(broken, "a red cube", t).is_err());
        assert!(matches!(stopped(Ok(7), "a red cube", t), Ok(Ok(7))));
    }
}
