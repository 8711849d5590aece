//! The guide stage's error: the loop's non-finite run, or a failed tensor operation.

/// Errors of the optimization loop and the start choice.
#[derive(Debug, thiserror::Error)]
pub enum GuideError {
    /// The loss stayed non-finite.
    #[error("the loss was not finite for {count} consecutive steps (last at step {step}, last finite loss {last_finite:?}); lower the mode's step size (--lr, --sampling-scale or --e2e-lr) or --views")]
    NonFinite {
        /// Consecutive bad steps.
        count: usize,
        /// The step of the last bad one.
        step: usize,
        /// The last finite loss.
        last_finite: Option<f32>,
    },
    /// A tensor operation failed (for example out of memory).
    #[error("optimization step {step}: {source}; if memory ran out, lower --resolution, --views or set --memory-budget")]
    Step {
        /// Step index.
        step: usize,
        /// The error.
        source: candle_core::Error,
    },
}

impl GuideError {
    /// A closure that wraps a tensor error of `step`.
    pub(crate) fn at(step: usize) -> impl Fn(candle_core::Error) -> Self {
        move |source| Self::Step { step, source }
    }
}
