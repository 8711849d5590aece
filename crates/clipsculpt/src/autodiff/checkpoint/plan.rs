//! A checkpoint plan: how a chain of blocks is cut into segments, and which are recomputed.

use std::ops::Range;

/// A run of consecutive blocks, recomputed in backward if `checkpointed`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// Block indices.
    pub blocks: Range<usize>,
    /// Keep only the input and recompute in backward (else keep the activations: see
    /// [`super::Block::forward_kept`]).
    pub checkpointed: bool,
}

/// A partition of a chain into segments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Segments in chain order, covering every block once.
    pub segments: Vec<Segment>,
}

impl Plan {
    /// Segments of `k` blocks (the last may be shorter).
    pub(crate) fn uniform(n: usize, k: usize, checkpointed: bool) -> Plan {
        let segments = (0..n)
            .step_by(k)
            .map(|s| Segment {
                blocks: s..(s + k).min(n),
                checkpointed,
            })
            .collect();
        Plan { segments }
    }

    /// Blocks forwarded a second time during backward (the extra work over no checkpointing).
    pub fn recomputed_blocks(&self) -> usize {
        self.segments
            .iter()
            .filter(|s| s.checkpointed)
            .map(|s| s.blocks.len())
            .sum()
    }

    /// Number of kept segment inputs.
    pub fn checkpoints(&self) -> usize {
        self.segments.iter().filter(|s| s.checkpointed).count()
    }
}

/// Why a plan could not be made.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// The budget policy was used without per-block costs.
    #[error("the budget checkpoint policy needs per-block memory costs")]
    CostsNeeded,
    /// Costs were given for a different number of blocks.
    #[error("{costs} block costs given for a chain of {blocks} blocks (bug)")]
    CostsMismatch { blocks: usize, costs: usize },
    /// Even checkpointing every block does not fit.
    #[error("memory budget of {budget} bytes is too small: checkpointing every block still needs {needed} bytes; raise the budget or lower the batch/chunk size")]
    BudgetTooSmall { budget: usize, needed: usize },
}
