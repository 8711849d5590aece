//! Gradient checkpointing for candle: segments keep only their inputs in the forward pass and are
//! recomputed once during backward.
//!
//! - [`plan`]: a [`Plan`], the chain cut into [`Segment`]s, each kept or recomputed;
//! - [`policy`]: *what* to keep — none, every block, every k, √N, last N, or a byte budget — and
//!   the [`Plan`] it yields for a chain.
//! - [`segment`]: the mechanism — a checkpointed segment (several inputs, differentiable or not)
//!   and its width-split form for deferred backpropagation over chunks.
//! - [`chain`]: a chain of blocks run under a plan.
//! - [`budget`]: the least-recomputation plan for a byte budget (dynamic programming).
//!
//! Segments are ordinary nodes of candle's graph, so `loss.backward()` drives everything.

pub(crate) mod budget;
pub(crate) mod chain;
pub(crate) mod plan;
pub(crate) mod policy;
pub(crate) mod residual_mlp;
pub(crate) mod segment;

pub use budget::{predicted_peak, BlockCost};
pub use chain::{measure_costs, run_chain, Block, KeptVjp};
pub use plan::{Plan, PlanError, Segment};
pub use policy::Policy;
pub use residual_mlp::ResidualMlp;
pub(crate) use segment::chunked;

#[cfg(test)]
mod tests;
