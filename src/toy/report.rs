//! [`EvalTable`]: per-prompt verdicts of the toy evaluator aggregated into shape, colour and both-correct
//! accuracy, split into combinations the toy prior trained on ("seen") and [`super::world::HELD_OUT`] ones.
//! Printable as a markdown table, serialisable to JSON.

use serde::{Deserialize, Serialize};

use super::caption::parse_caption;
use super::eval::{Classification, EvalError};
use super::world::{is_held_out, Colour, Shape};

/// One evaluated prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct EvalRecord {
    /// The prompt as given.
    pub(crate) prompt: String,
    /// The shape the prompt names.
    pub(crate) expected_shape: Shape,
    /// The colour the prompt names.
    pub(crate) expected_colour: Colour,
    /// Whether the combination is held out of the prior's training set.
    pub(crate) held_out: bool,
    /// The evaluator's shape, `None` when the mesh could not be judged.
    pub(crate) shape: Option<Shape>,
    /// The evaluator's colour, `None` when the mesh could not be judged.
    pub(crate) colour: Option<Colour>,
    /// IoU of the predicted shape.
    pub(crate) shape_iou: Option<f32>,
    /// Connected components of the mesh, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) components: Option<usize>,
    /// Euler characteristic of the mesh, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) euler: Option<i64>,
    /// Held-aside guidance score of the start and of the exported latent (guided runs only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) scores: Option<[f32; 2]>,
    /// Why the mesh could not be judged (an empty surface counts as wrong).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
    /// Seconds spent generating this prompt's mesh.
    pub(crate) seconds: f64,
}

impl EvalRecord {
    /// Whether the shape is right.
    pub(crate) fn shape_correct(&self) -> bool {
        self.shape == Some(self.expected_shape)
    }

    /// Whether the colour is right.
    pub(crate) fn colour_correct(&self) -> bool {
        self.colour == Some(self.expected_colour)
    }
}

/// Accuracies over a set of records; `None` for an empty set.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct SplitSummary {
    /// Records in the split.
    pub(crate) prompts: usize,
    /// Fraction with the right shape.
    pub(crate) shape_accuracy: Option<f64>,
    /// Fraction with the right colour.
    pub(crate) colour_accuracy: Option<f64>,
    /// Fraction with both right.
    pub(crate) both_accuracy: Option<f64>,
    /// Mean IoU of the predicted shape over judged meshes.
    pub(crate) mean_iou: Option<f64>,
    /// Meshes that could not be judged.
    pub(crate) failed: usize,
    /// Fraction of judged meshes in one connected piece.
    pub(crate) one_piece: Option<f64>,
    /// Mean Euler characteristic over judged meshes.
    pub(crate) mean_euler: Option<f64>,
    /// Guided records whose exported latent scored below the start (should be 0).
    pub(crate) score_drops: usize,
    /// Mean seconds per prompt.
    pub(crate) seconds_per_prompt: Option<f64>,
}

/// The three splits.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(crate) struct EvalSummary {
    /// Every record.
    pub(crate) all: SplitSummary,
    /// Combinations the prior trained on.
    pub(crate) seen: SplitSummary,
    /// Held-out combinations.
    pub(crate) held_out: SplitSummary,
}

/// A prompt that names no toy combination, so it cannot be scored.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "prompt {0:?} does not name exactly one toy shape and one colour; use captions like \"a red cube\" \
     (see prompts/toy-eval.txt)"
)]
pub(crate) struct UnknownPrompt(pub String);

/// Per-prompt results and their aggregates.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct EvalTable {
    /// The records, in the order pushed.
    pub(crate) records: Vec<EvalRecord>,
}

#[derive(Serialize)]
struct Json<'a> {
    summary: EvalSummary,
    records: &'a [EvalRecord],
}

impl EvalTable {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the verdict on `prompt`'s mesh (or why there is none) and the seconds it took to generate.
    pub(crate) fn push(
        &mut self,
        prompt: &str,
        outcome: Result<&Classification, &EvalError>,
        seconds: f64,
    ) -> Result<(), UnknownPrompt> {
        let (expected_shape, expected_colour) =
            parse_caption(prompt).ok_or_else(|| UnknownPrompt(prompt.to_string()))?;
        let (shape, colour, shape_iou, error) = match outcome {
            Ok(c) => (Some(c.shape), Some(c.colour), Some(c.shape_iou), None),
            Err(e) => (None, None, None, Some(e.to_string())),
        };
        let (components, euler) = match outcome {
            Ok(c) => (Some(c.components), Some(c.euler)),
            Err(_) => (None, None),
        };
        self.records.push(EvalRecord {
            prompt: prompt.to_string(),
            expected_shape,
            expected_colour,
            held_out: is_held_out(expected_shape, expected_colour),
            shape,
            colour,
            shape_iou,
            components,
            euler,
            scores: None,
            error,
            seconds,
        });
        Ok(())
    }

    /// Records the held-aside guidance scores `[start, exported]` of the last record.
    pub(crate) fn set_last_scores(&mut self, scores: [f32; 2]) {
        if let Some(r) = self.records.last_mut() {
            r.scores = Some(scores);
        }
    }

    /// Accuracies over all, seen and held-out records.
    pub(crate) fn summary(&self) -> EvalSummary {
        let split = |keep: &dyn Fn(&EvalRecord) -> bool| {
            summarise(self.records.iter().filter(|r| keep(r)).collect())
        };
        EvalSummary {
            all: split(&|_| true),
            seen: split(&|r| !r.held_out),
            held_out: split(&|r| r.held_out),
        }
    }

    /// The summary as a markdown table, one row per split.
    pub(crate) fn to_markdown(&self) -> String {
        let s = self.summary();
        let pct = |v: Option<f64>| v.map_or("–".to_string(), |v| format!("{:.1} %", 100.0 * v));
        let num = |v: Option<f64>, digits: usize| {
            v.map_or("–".to_string(), |v| format!("{v:.digits$}"))
        };
        let mut out = String::from(
            "| split | prompts | shape | colour | both | mean IoU | one piece | mean χ | failed | s/prompt |\n\
             |---|---|---|---|---|---|---|---|---|---|\n",
        );
        for (name, x) in [("all", s.all), ("seen", s.seen), ("held-out", s.held_out)] {
            out.push_str(&format!(
                "| {name} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                x.prompts,
                pct(x.shape_accuracy),
                pct(x.colour_accuracy),
                pct(x.both_accuracy),
                num(x.mean_iou, 3),
                pct(x.one_piece),
                num(x.mean_euler, 2),
                x.failed,
                num(x.seconds_per_prompt, 2),
            ));
        }
        out
    }

    /// The summary and every record as pretty JSON.
    pub(crate) fn to_json(&self) -> serde_json::Result<String> {
        serde_json::to_string_pretty(&Json {
            summary: self.summary(),
            records: &self.records,
        })
    }
}

fn summarise(records: Vec<&EvalRecord>) -> SplitSummary {
    let n = records.len();
    let frac = |count: usize| (n > 0).then(|| count as f64 / n as f64);
    let count = |f: &dyn Fn(&EvalRecord) -> bool| records.iter().filter(|r| f(r)).count();
    let judged: Vec<&&EvalRecord> = records.iter().filter(|r| r.components.is_some()).collect();
    let over_judged = |f: &dyn Fn(&EvalRecord) -> f64| {
        (!judged.is_empty()).then(|| judged.iter().map(|r| f(r)).sum::<f64>() / judged.len() as f64)
    };
    let ious: Vec<f64> = records
        .iter()
        .filter_map(|r| r.shape_iou.map(f64::from))
        .collect();
    SplitSummary {
        prompts: n,
        shape_accuracy: frac(count(&|r| r.shape_correct())),
        colour_accuracy: frac(count(&|r| r.colour_correct())),
        both_accuracy: frac(count(&|r| r.shape_correct() && r.colour_correct())),
        mean_iou: (!ious.is_empty()).then(|| ious.iter().sum::<f64>() / ious.len() as f64),
        failed: count(&|r| r.error.is_some()),
        one_piece: over_judged(&|r| f64::from(u8::from(r.components == Some(1)))),
        mean_euler: over_judged(&|r| r.euler.unwrap_or(0) as f64),
        score_drops: count(&|r| r.scores.is_some_and(|[b, a]| a < b)),
        seconds_per_prompt: (n > 0)
            .then(|| records.iter().map(|r| r.seconds).sum::<f64>() / n as f64),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::toy::eval::ShapeScore;

    fn verdict(shape: Shape, colour: Colour) -> Classification {
        Classification {
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
        }
    }

    #[test]
    fn aggregates_split_by_held_out() {
        let mut t = EvalTable::new();
        // Seen: one fully right, one with the wrong colour. Held out (a green sphere): one failed mesh.
        t.push("a red cube", Ok(&verdict(Shape::Cube, Colour::Red)), 1.0)
            .unwrap();
        t.push("a blue cone", Ok(&verdict(Shape::Cone, Colour::Red)), 3.0)
            .unwrap();
        t.push("a green sphere", Err(&EvalError::Empty), 2.0)
            .unwrap();
        let s = t.summary();
        assert_eq!(s.all.prompts, 3);
        assert_eq!(s.seen.shape_accuracy, Some(1.0));
        assert_eq!(s.seen.colour_accuracy, Some(0.5));
        assert_eq!(s.seen.both_accuracy, Some(0.5));
        assert_eq!(s.seen.seconds_per_prompt, Some(2.0));
        assert_eq!((s.held_out.prompts, s.held_out.failed), (1, 1));
        assert_eq!(s.held_out.both_accuracy, Some(0.0));
        assert_eq!(s.held_out.mean_iou, None);
        let md = t.to_markdown();
        assert!(
            md.contains(
                "| seen | 2 | 100.0 % | 50.0 % | 50.0 % | 0.900 | 100.0 % | 2.00 | 0 | 2.00 |"
            ),
            "{md}"
        );
        assert!(md.contains("| held-out | 1 | 0.0 % |"), "{md}");
        let json: serde_json::Value = serde_json::from_str(&t.to_json().unwrap()).unwrap();
        assert_eq!(json["summary"]["all"]["prompts"], 3);
        assert_eq!(json["records"][0]["expected_shape"], "cube");
        assert!(t
            .push("a wooden chair", Err(&EvalError::Empty), 0.0)
            .is_err());
    }

    #[test]
    fn empty_table_prints_dashes() {
        let md = EvalTable::new().to_markdown();
        assert!(
            md.contains("| all | 0 | – | – | – | – | – | – | 0 | – |"),
            "{md}"
        );
    }
}
