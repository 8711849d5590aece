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
use clipsculpt::guide::error::GuideError;
use clipsculpt::guide::{self, Explore, GuideMode, Score, Target};
use clipsculpt::pipeline::{
    self, extract_mesh, same_values, stage, Guided, Models, Observer, Outcome, RunContext,
    RunSettings, StageRecord,
};

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

/// The stage hook of an eval run: the seconds of its sampling and optimizing stages.
#[derive(Default)]
struct StageSeconds {
    sampling: f64,
    optimizing: f64,
}

impl StageSeconds {
    fn total(&self) -> f64 {
        self.sampling + self.optimizing
    }
}

impl Observer for StageSeconds {
    fn stage(&mut self, name: &'static str, record: &StageRecord) {
        match name {
            stage::SAMPLING => self.sampling = record.seconds,
            stage::OPTIMIZING => self.optimizing = record.seconds,
            _ => {}
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

    /// Every mode at `seed`, pushed onto `table`, each a run of [`pipeline::run`] (the stages of
    /// `generate`, without its files). The prior mode is the seed's own unguided sample; the
    /// guided modes start from the best of `s.candidates` noises (the seed's own with one).
    fn seed(&self, seed: u64, modes: &[EvalMode], table: &mut EvalTable) -> Result<()> {
        let mut s = EvalMode::Prior.settings(self.s);
        (s.seed, s.candidates) = (seed, 1);
        let (out, seconds) = self.run(&s)?;
        let prior = Judged {
            verdict: self.judge(out.latent()),
            latent: out.latent().clone(),
            seconds,
        };
        let prior_score = out.before;
        for &mode in modes {
            let record = match mode {
                EvalMode::Prior => {
                    let record =
                        self.record(mode, seed, prior.verdict.clone(), None, prior.seconds);
                    self.checked(record, prior_score.score)
                }
                mode => {
                    let mut s = mode.settings(self.s);
                    s.seed = seed;
                    let t = Instant::now();
                    match stopped(self.run(&s), self.prompt, t)? {
                        Ok((out, seconds)) => {
                            self.guided_record(mode, seed, &out, seconds, (&prior, prior_score))?
                        }
                        Err(failed) => self.stopped_record(mode, seed, &prior, failed),
                    }
                }
            };
            table.push(record);
        }
        Ok(())
    }

    /// One run of `generate`'s stages with settings `s`, and the seconds of its sampling and
    /// optimizing stages (as its stage hook reports them; scoring not included).
    fn run<'s>(&'s self, s: &'s RunSettings) -> Result<(Outcome<'s>, f64)> {
        let ctx = RunContext::new(self.models, s, self.device);
        let mut seconds = StageSeconds::default();
        let out = pipeline::run(&ctx, self.prompt, &mut seconds)?;
        Ok((out, seconds.total()))
    }

    /// The record of guided `mode` at `seed`: the verdict on its export, attributed to its
    /// start. `prior` (held-aside score `prior_score`) is the seed's unguided sample, the start
    /// when no candidate noise was chosen.
    fn guided_record(
        &self,
        mode: EvalMode,
        seed: u64,
        out: &Outcome<'_>,
        seconds: f64,
        (prior, prior_score): (&Judged, Score),
    ) -> Result<EvalRecord> {
        let chosen = out.noise.as_ref().map(|c| Judged {
            verdict: self.judge(&c.sample),
            latent: c.sample.clone(),
            seconds: 0.0,
        });
        let (unguided, unguided_score) = match (&chosen, &out.noise) {
            (Some(j), Some(c)) => (j, c.score),
            _ => (prior, prior_score),
        };
        let export = out.after.score.score;
        let attribution = match mode {
            EvalMode::Latent | EvalMode::Explore => {
                self.latent_attribution(&out.guided, unguided, "prior sample")?
            }
            EvalMode::Both => {
                let sample = Judged {
                    verdict: self.judge(&out.prior),
                    latent: out.prior.clone(),
                    seconds: 0.0,
                };
                self.latent_attribution(&out.guided, &sample, "guided sample")?
            }
            _ => Attribution {
                start: "unguided sample".into(),
                start_verdict: unguided.verdict.clone(),
                scores: Some([unguided_score.score, export]),
                export_step: None,
                moved: !same_values(&unguided.latent, out.latent())?,
            },
        };
        let verdict = self.judge(out.latent());
        let record = self.record(mode, seed, verdict, Some(attribution), seconds);
        Ok(self.checked(record, export))
    }

    /// The failed record of `mode` at `seed`, whose guidance stopped: attributed to the seed's
    /// unguided sample `prior`.
    fn stopped_record(
        &self,
        mode: EvalMode,
        seed: u64,
        prior: &Judged,
        (verdict, seconds): (Verdict, f64),
    ) -> EvalRecord {
        let start = match mode {
            EvalMode::Latent | EvalMode::Explore => "prior sample",
            _ => "unguided sample",
        };
        let attribution = Attribution {
            start: start.into(),
            start_verdict: prior.verdict.clone(),
            scores: None,
            export_step: None,
            moved: false,
        };
        self.record(mode, seed, verdict, Some(attribution), seconds)
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
