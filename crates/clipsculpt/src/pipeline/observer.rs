//! The stage hook: what a run tells its caller while it runs, without the caller orchestrating it.

use super::stages::StageRecord;

/// Progress of a run, for bars and logs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Progress {
    /// A stage begins: its name and its number of steps (0 when it has none to count).
    Stage(&'static str, usize),
    /// An optimization step ended with this mean CLIP cosine.
    Step(usize, f32),
}

/// Watches a run without orchestrating it: its progress, and each stage as it ends. A closure
/// `FnMut(Progress)` is an observer of progress only.
pub trait Observer {
    /// Progress, for bars and logs.
    fn progress(&mut self, _progress: Progress) {}
    /// Stage `name` ([`stage`](super::stage)) ended a run of it; `record` is its totals so far
    /// (a stage can run more than once, e.g. scoring before and after guidance).
    fn stage(&mut self, _name: &'static str, _record: &StageRecord) {}
}

impl<F: FnMut(Progress)> Observer for F {
    fn progress(&mut self, progress: Progress) {
        self(progress)
    }
}
