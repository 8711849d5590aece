//! The toy world's research probes, run as `cargo bench --bench diagnose` and `cargo bench
//! --bench guide_probe` (`benches/` holds only their `main`): they reach into the pipeline's
//! stages (the prior sample, the guided loop, the held-aside views, the evaluator), which stay
//! crate-internal.
//!
//! * [`diagnose`](diagnose()): why guidance does or does not fix the prior's held-out samples;
//! * [`guide_probe`](guide_probe()): the evaluator's verdict before and after guidance, per
//!   prompt, under settings from the environment.

mod diagnose;
mod guide;
mod reach;
mod reference;

pub use diagnose::diagnose;
pub use guide::guide_probe;
