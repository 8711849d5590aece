//! [`EvalTable`]: per-run verdicts of the toy evaluator, with the attribution of each run (the
//! verdict on the latent a guided stage started from and on the one it exported), aggregated per
//! mode into seen and held-out accuracy. Accuracy is counted over distinct objects (a combination
//! is right when most of its seeds are), with a 95 % Wilson interval, because the toy prior's
//! samples barely depend on the seed. Printable as markdown, serialisable to JSON.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::caption::parse_caption;
use crate::eval::{Classification, EvalError};
use crate::world::{Colour, Shape};

/// The evaluator's verdict on one latent's mesh.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// The evaluator's shape, `None` when the mesh could not be judged.
    pub shape: Option<Shape>,
    /// The evaluator's colour, `None` when the mesh could not be judged.
    pub colour: Option<Colour>,
    /// IoU of the predicted shape.
    pub shape_iou: Option<f32>,
    /// Connected components of the mesh, when there is one.
    pub components: Option<usize>,
    /// Euler characteristic of the mesh, when there is one.
    pub euler: Option<i64>,
    /// Why the mesh could not be judged (an empty surface counts as wrong).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Verdict {
    /// The verdict of a classification, or of the reason there is none.
    pub fn of(outcome: Result<&Classification, &EvalError>) -> Self {
        match outcome {
            Ok(c) => Self {
                shape: Some(c.shape),
                colour: Some(c.colour),
                shape_iou: Some(c.shape_iou),
                components: Some(c.components),
                euler: Some(c.euler),
                error: None,
            },
            Err(e) => Self {
                shape: None,
                colour: None,
                shape_iou: None,
                components: None,
                euler: None,
                error: Some(e.to_string()),
            },
        }
    }

    /// Whether both shape and colour are the expected ones.
    pub fn right(&self, shape: Shape, colour: Colour) -> bool {
        self.shape == Some(shape) && self.colour == Some(colour)
    }
}

/// Where a guided stage started and what it made of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Attribution {
    /// The start: `prior sample`, `unguided sample` (guided sampling's twin from the same
    /// noise), `bank N` or `completion N` (exploration).
    pub start: String,
    /// The verdict on the start's mesh.
    pub start_verdict: Verdict,
    /// Held-aside score of the start and of the export, when the stage scored them.
    pub scores: Option<[f32; 2]>,
    /// Optimization steps of the exported latent (0: the start was kept), for latent stages.
    pub export_step: Option<usize>,
    /// Whether the exported latent differs from the start.
    pub moved: bool,
}

/// The scorer's side of a run: its held-aside score of the export and of the right object (the
/// best of the world's fitted instances of the prompt's combination). A wrong export scored at or
/// above the right object is one the scorer cannot reject; one scored below it is one the search
/// did not get past.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ScorerCheck {
    /// Held-aside score of the export.
    pub export: f32,
    /// Held-aside score of the right object's best fitted instance.
    pub right_object: f32,
}

impl ScorerCheck {
    /// Whether the scorer ranks the export at or above the right object.
    pub fn prefers_export(&self) -> bool {
        self.export >= self.right_object
    }
}

/// One evaluated run: a prompt, a seed and a mode.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvalRecord {
    /// The prompt as given.
    pub prompt: String,
    /// The mode (`prior`, `latent`, `explore`, `sampling`, `both`).
    pub mode: String,
    /// The seed.
    pub seed: u64,
    /// The shape the prompt names.
    pub expected_shape: Shape,
    /// The colour the prompt names.
    pub expected_colour: Colour,
    /// Whether the combination is held out of the prior's training set.
    pub held_out: bool,
    /// The verdict on the exported latent.
    pub export: Verdict,
    /// The guided stage's start and what it did, for guided modes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attribution: Option<Attribution>,
    /// The export's score beside the right object's, when the world's fitted latents were given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scorer: Option<ScorerCheck>,
    /// Seconds this run took (the prior's sample included).
    pub seconds: f64,
}

impl EvalRecord {
    /// Whether the export's shape and colour are both right.
    pub fn right(&self) -> bool {
        self.export.right(self.expected_shape, self.expected_colour)
    }

    /// Whether the start's verdict was right, for guided modes.
    pub fn start_right(&self) -> Option<bool> {
        self.attribution.as_ref().map(|a| {
            a.start_verdict
                .right(self.expected_shape, self.expected_colour)
        })
    }
}

/// A prompt that names no toy combination, so it cannot be scored.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "prompt {0:?} does not name exactly one toy shape and one colour; use captions like \"a red cube\" \
     (see prompts/toy-eval.txt)"
)]
pub struct UnknownPrompt(pub String);

/// A proportion over distinct objects with its 95 % Wilson interval.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Share {
    /// Objects counted right.
    pub right: usize,
    /// Objects.
    pub of: usize,
    /// Lower and upper bounds of the 95 % Wilson score interval.
    pub interval: [f64; 2],
}

impl Share {
    /// `right` of `of`, with its interval.
    pub fn new(right: usize, of: usize) -> Self {
        Self {
            right,
            of,
            interval: wilson(right, of),
        }
    }

    fn markdown(&self) -> String {
        if self.of == 0 {
            return "–".into();
        }
        let [lo, hi] = self.interval.map(|v| 100.0 * v);
        format!("{}/{} ({lo:.0}–{hi:.0} %)", self.right, self.of)
    }
}

/// The 95 % Wilson score interval of `k` successes in `n` trials.
pub fn wilson(k: usize, n: usize) -> [f64; 2] {
    if n == 0 {
        return [0.0, 1.0];
    }
    let (z, n, p) = (1.959_964, n as f64, k as f64 / n as f64);
    let centre = (p + z * z / (2.0 * n)) / (1.0 + z * z / n);
    let half = z * (p * (1.0 - p) / n + z * z / (4.0 * n * n)).sqrt() / (1.0 + z * z / n);
    [(centre - half).max(0.0), (centre + half).min(1.0)]
}

/// One mode's results on one split.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct SplitSummary {
    /// Runs.
    pub runs: usize,
    /// Runs with shape and colour both right.
    pub runs_right: usize,
    /// Objects (combinations) right on most of their seeds.
    pub objects: Share,
    /// Mean IoU of the predicted shape over judged meshes.
    pub mean_iou: Option<f64>,
    /// Share of judged meshes in one connected piece.
    pub one_piece: Option<f64>,
    /// Runs whose mesh could not be judged.
    pub failed: usize,
    /// Guided runs whose start was wrong and whose export is right.
    pub wrong_to_right: usize,
    /// Guided runs whose start was right and whose export is wrong.
    pub right_to_wrong: usize,
    /// Guided runs whose exported latent differs from the start.
    pub moved: usize,
    /// Guided runs (with an attribution).
    pub guided: usize,
    /// Mean held-aside score gain of the export over the start, where both were scored.
    pub mean_gain: Option<f64>,
    /// Mean seconds per run.
    pub seconds_per_run: Option<f64>,
    /// Wrong runs with a [`ScorerCheck`].
    pub wrong_checked: usize,
    /// Of those, the runs whose export the scorer ranks at or above the right object.
    pub wrong_preferred: usize,
    /// Mean score of the export minus the right object's over the checked wrong runs.
    pub wrong_margin: Option<f64>,
}

/// Per-run records of every mode and their aggregates.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct EvalTable {
    /// The records, in the order pushed.
    pub records: Vec<EvalRecord>,
}

/// A mode's summary on the seen and the held-out split.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ModeSummary {
    /// Combinations the prior trained on.
    pub seen: SplitSummary,
    /// Held-out combinations.
    pub held_out: SplitSummary,
}

impl EvalTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// The expected shape and colour of `prompt`.
    pub fn expected(prompt: &str) -> Result<(Shape, Colour), UnknownPrompt> {
        parse_caption(prompt).ok_or_else(|| UnknownPrompt(prompt.to_string()))
    }

    /// Adds a record.
    pub fn push(&mut self, record: EvalRecord) {
        self.records.push(record);
    }

    /// The modes, in the order first seen.
    pub fn modes(&self) -> Vec<String> {
        let mut modes: Vec<String> = Vec::new();
        for r in &self.records {
            if !modes.contains(&r.mode) {
                modes.push(r.mode.clone());
            }
        }
        modes
    }

    /// Every mode's summary, by mode.
    pub fn summary(&self) -> BTreeMap<String, ModeSummary> {
        self.modes()
            .into_iter()
            .map(|m| {
                let of = |held: bool| {
                    summarise(
                        self.records
                            .iter()
                            .filter(|r| r.mode == m && r.held_out == held)
                            .collect(),
                    )
                };
                let s = ModeSummary {
                    seen: of(false),
                    held_out: of(true),
                };
                (m, s)
            })
            .collect()
    }

    /// One markdown table: a row per mode, both splits, attribution columns.
    pub fn to_markdown(&self) -> String {
        let summary = self.summary();
        let mut out = String::from(
            "| mode | held-out both right (objects, 95 % CI) | seen both right (objects, 95 % CI) | held-out runs right | seen runs right | mean IoU held-out / seen | one piece | wrong → right | right → wrong | export ≠ start | gain over start | s/run |\n\
             |---|---|---|---|---|---|---|---|---|---|---|---|\n",
        );
        for mode in self.modes() {
            let ModeSummary { seen, held_out } = summary[&mode];
            out.push_str(&format!(
                "| {mode} | {} | {} | {}/{} | {}/{} | {} / {} | {} | {} | {} | {} | {} | {} |\n",
                held_out.objects.markdown(),
                seen.objects.markdown(),
                held_out.runs_right,
                held_out.runs,
                seen.runs_right,
                seen.runs,
                num(held_out.mean_iou, 3),
                num(seen.mean_iou, 3),
                pct(both_mean(
                    held_out.one_piece,
                    seen.one_piece,
                    held_out.runs,
                    seen.runs
                )),
                guided(
                    held_out.wrong_to_right + seen.wrong_to_right,
                    &held_out,
                    &seen
                ),
                guided(
                    held_out.right_to_wrong + seen.right_to_wrong,
                    &held_out,
                    &seen
                ),
                guided(held_out.moved + seen.moved, &held_out, &seen),
                num(both_mean(held_out.mean_gain, seen.mean_gain, 1, 1), 3),
                num(
                    both_mean(
                        held_out.seconds_per_run,
                        seen.seconds_per_run,
                        held_out.runs,
                        seen.runs
                    ),
                    2
                ),
            ));
        }
        out
    }

    /// Where the wrong runs stand with the scorer, a row per mode (`None` without scorer checks).
    pub fn scorer_markdown(&self) -> Option<String> {
        if self.records.iter().all(|r| r.scorer.is_none()) {
            return None;
        }
        let summary = self.summary();
        let mut out = String::from(
            "| mode | held-out wrong runs scored ≥ right object | mean margin | seen wrong runs scored ≥ right object | mean margin |\n\
             |---|---|---|---|---|\n",
        );
        for mode in self.modes() {
            let ModeSummary { seen, held_out } = summary[&mode];
            out.push_str(&format!(
                "| {mode} | {}/{} | {} | {}/{} | {} |\n",
                held_out.wrong_preferred,
                held_out.wrong_checked,
                num(held_out.wrong_margin, 3),
                seen.wrong_preferred,
                seen.wrong_checked,
                num(seen.wrong_margin, 3),
            ));
        }
        Some(out)
    }

    /// The records of `prompt` at `seed`, one per mode of `modes` in that order, when the table holds all of them.
    pub fn runs_of(&self, prompt: &str, seed: u64, modes: &[String]) -> Option<Vec<EvalRecord>> {
        modes
            .iter()
            .map(|m| {
                self.records
                    .iter()
                    .find(|r| r.prompt == prompt && r.seed == seed && &r.mode == m)
                    .cloned()
            })
            .collect()
    }
}

fn pct(v: Option<f64>) -> String {
    v.map_or("–".to_string(), |v| format!("{:.0} %", 100.0 * v))
}

fn num(v: Option<f64>, digits: usize) -> String {
    v.map_or("–".to_string(), |v| format!("{v:.digits$}"))
}

/// A count over the guided runs of both splits (`–` for unguided modes).
fn guided(count: usize, a: &SplitSummary, b: &SplitSummary) -> String {
    match a.guided + b.guided {
        0 => "–".into(),
        n => format!("{count}/{n}"),
    }
}

/// The weighted mean of two splits' means (`None` where both are `None`).
fn both_mean(a: Option<f64>, b: Option<f64>, wa: usize, wb: usize) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some((a * wa as f64 + b * wb as f64) / (wa + wb).max(1) as f64),
        (a, b) => a.or(b),
    }
}

fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values.fold((0.0, 0usize), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / n as f64)
}

fn summarise(records: Vec<&EvalRecord>) -> SplitSummary {
    let count = |f: &dyn Fn(&EvalRecord) -> bool| records.iter().filter(|r| f(r)).count();
    let judged = || records.iter().filter(|r| r.export.components.is_some());
    let wrong_checks = || {
        records
            .iter()
            .filter(|r| !r.right())
            .filter_map(|r| r.scorer)
    };
    let mut by_object: BTreeMap<(Shape, Colour), (usize, usize)> = BTreeMap::new();
    for r in &records {
        let e = by_object
            .entry((r.expected_shape, r.expected_colour))
            .or_default();
        *e = (e.0 + usize::from(r.right()), e.1 + 1);
    }
    let objects_right = by_object.values().filter(|(k, n)| 2 * k > *n).count();
    SplitSummary {
        runs: records.len(),
        runs_right: count(&|r| r.right()),
        objects: Share::new(objects_right, by_object.len()),
        mean_iou: mean(
            records
                .iter()
                .filter_map(|r| r.export.shape_iou.map(f64::from)),
        ),
        one_piece: mean(judged().map(|r| f64::from(u8::from(r.export.components == Some(1))))),
        failed: count(&|r| r.export.error.is_some()),
        wrong_to_right: count(&|r| r.start_right() == Some(false) && r.right()),
        right_to_wrong: count(&|r| r.start_right() == Some(true) && !r.right()),
        moved: count(&|r| r.attribution.as_ref().is_some_and(|a| a.moved)),
        guided: count(&|r| r.attribution.is_some()),
        mean_gain: mean(records.iter().filter_map(|r| {
            let [start, export] = r.attribution.as_ref()?.scores?;
            Some(f64::from(export - start))
        })),
        seconds_per_run: mean(records.iter().map(|r| r.seconds)),
        wrong_checked: wrong_checks().count(),
        wrong_preferred: wrong_checks().filter(|c| c.prefers_export()).count(),
        wrong_margin: mean(wrong_checks().map(|c| f64::from(c.export - c.right_object))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eval::ShapeScore;

    fn verdict(shape: Shape, colour: Colour) -> Verdict {
        Verdict::of(Ok(&Classification {
            shape,
            shape_iou: 0.9,
            ranking: vec![ShapeScore {
                shape,
                iou: 0.9,
                yaw: 0.0,
            }],
            colour,
            colour_distance: 1.0,
            mean_colour: colour.linear(),
            components: 1,
            euler: 2,
        }))
    }

    fn record(
        prompt: &str,
        mode: &str,
        seed: u64,
        export: Verdict,
        start: Option<Verdict>,
    ) -> EvalRecord {
        let (expected_shape, expected_colour) = EvalTable::expected(prompt).unwrap();
        EvalRecord {
            prompt: prompt.into(),
            mode: mode.into(),
            seed,
            expected_shape,
            expected_colour,
            held_out: crate::is_held_out(expected_shape, expected_colour),
            attribution: start.map(|v| Attribution {
                start: "prior sample".into(),
                moved: v != export,
                start_verdict: v,
                scores: Some([0.5, 0.6]),
                export_step: Some(5),
            }),
            export,
            scorer: None,
            seconds: 2.0,
        }
    }

    #[test]
    fn counts_objects_attribution_and_splits() {
        let mut t = EvalTable::new();
        let (cube, cone) = (
            verdict(Shape::Cube, Colour::Red),
            verdict(Shape::Cone, Colour::Red),
        );
        // Seen "a red cube": right on both seeds in both modes.
        for seed in [0, 1] {
            t.push(record("a red cube", "prior", seed, cube.clone(), None));
            t.push(record(
                "a red cube",
                "latent",
                seed,
                cube.clone(),
                Some(cube.clone()),
            ));
        }
        // Held-out "a green sphere": the prior is wrong; guidance fixes seed 0 only, so the object
        // is not right on most seeds.
        let sphere = verdict(Shape::Sphere, Colour::Green);
        for seed in [0, 1] {
            t.push(record("a green sphere", "prior", seed, cone.clone(), None));
            let export = if seed == 0 {
                sphere.clone()
            } else {
                cone.clone()
            };
            t.push(record(
                "a green sphere",
                "latent",
                seed,
                export,
                Some(cone.clone()),
            ));
        }
        let s = t.summary();
        assert_eq!(t.modes(), vec!["prior", "latent"]);
        let latent = s["latent"];
        assert_eq!((latent.seen.objects.right, latent.seen.objects.of), (1, 1));
        assert_eq!((latent.held_out.runs_right, latent.held_out.runs), (1, 2));
        assert_eq!(latent.held_out.objects.right, 0);
        assert_eq!(
            (
                latent.held_out.wrong_to_right,
                latent.held_out.right_to_wrong
            ),
            (1, 0)
        );
        assert_eq!((latent.held_out.moved, latent.held_out.guided), (1, 2));
        assert_eq!(s["prior"].held_out.guided, 0);
        let md = t.to_markdown();
        assert!(
            md.contains("| latent | 0/1 (0–79 %) | 1/1 (21–100 %) | 1/2 | 2/2 |"),
            "{md}"
        );
        assert!(md.contains("| 1/4 | 0/4 | 1/4 |"), "{md}");
        let json: serde_json::Value = serde_json::from_str(
            &crate::records::to_json(&t, &serde_json::Value::Null, true).unwrap(),
        )
        .unwrap();
        assert_eq!(
            json["records"][1]["attribution"]["start_verdict"]["shape"],
            "cube"
        );
        assert!(EvalTable::expected("a wooden chair").is_err());
    }

    /// Only wrong runs with a check count; an export scored at the right object's score counts as
    /// preferred; the table appears only with checks.
    #[test]
    fn counts_wrong_runs_the_scorer_prefers() {
        let mut t = EvalTable::new();
        let sphere = verdict(Shape::Sphere, Colour::Green);
        let cone = verdict(Shape::Cone, Colour::Green);
        t.push(record("a green sphere", "sampling", 0, cone.clone(), None));
        assert!(t.scorer_markdown().is_none());
        t.records[0].scorer = Some(ScorerCheck {
            export: 0.7,
            right_object: 0.7,
        });
        let checks = [
            (cone.clone(), 0.5, 0.8),
            (sphere, 0.9, 0.8),
            (cone, 0.6, 0.8),
        ];
        for (seed, (export, e, r)) in (1..).zip(checks) {
            let mut rec = record("a green sphere", "sampling", seed, export, None);
            rec.scorer = Some(ScorerCheck {
                export: e,
                right_object: r,
            });
            t.push(rec);
        }
        t.push(record(
            "a green sphere",
            "sampling",
            9,
            verdict(Shape::Cube, Colour::Green),
            None,
        ));
        let s = t.summary()["sampling"].held_out;
        assert_eq!((s.wrong_preferred, s.wrong_checked), (1, 3));
        let margin = s.wrong_margin.unwrap();
        assert!((margin - (-0.5 / 3.0)).abs() < 1e-6, "{margin}");
        let md = t.scorer_markdown().unwrap();
        assert!(md.contains("| sampling | 1/3 | -0.167 | 0/0 | – |"), "{md}");
    }

    /// Wilson's interval for 6 of 6 has the lower bound near 61 % and for 0 of 1 the upper near 79 %.
    #[test]
    fn wilson_bounds() {
        let [lo, hi] = wilson(6, 6);
        assert!((lo - 0.610).abs() < 0.005 && hi == 1.0, "{lo} {hi}");
        let [lo, hi] = wilson(0, 1);
        assert!(lo == 0.0 && (hi - 0.793).abs() < 0.005, "{lo} {hi}");
    }
}
