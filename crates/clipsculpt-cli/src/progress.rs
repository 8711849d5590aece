//! Progress bars, hidden in quiet mode.

use std::cell::RefCell;

use indicatif::{ProgressBar, ProgressStyle};

use clipsculpt::pipeline::Progress;

/// One bar per stage of a run: a spinner while sampling and exporting, a bar with ETA and the
/// current CLIP cosine while optimizing.
pub(super) struct StageBar {
    bar: RefCell<Option<ProgressBar>>,
    quiet: bool,
}

impl StageBar {
    pub(crate) fn new(quiet: bool) -> Self {
        Self {
            bar: RefCell::new(None),
            quiet,
        }
    }

    pub(crate) fn update(&self, p: Progress) {
        match p {
            Progress::Stage(name, steps) => {
                tracing::debug!("stage: {name}");
                let bar = if steps > 0 {
                    progress(steps as u64, self.quiet)
                } else {
                    spinner(self.quiet)
                };
                bar.set_prefix(name);
                if let Some(old) = self.bar.replace(Some(bar)) {
                    old.finish_and_clear();
                }
            }
            Progress::Step(_, c) => {
                if let Some(b) = self.bar.borrow().as_ref() {
                    b.set_message(format!("CLIP cosine {c:.3}"));
                    b.inc(1);
                }
            }
        }
    }

    pub(crate) fn finish(&self) {
        if let Some(b) = self.bar.take() {
            b.finish_and_clear();
        }
    }
}

/// A spinner for a stage without countable steps.
pub(super) fn spinner(quiet: bool) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new_spinner();
    if let Ok(style) = ProgressStyle::with_template("{spinner} {prefix} {elapsed}") {
        bar.set_style(style);
    }
    bar.enable_steady_tick(std::time::Duration::from_millis(120));
    bar
}

/// A progress bar with ETA.
pub(super) fn progress(len: u64, quiet: bool) -> ProgressBar {
    if quiet {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    if let Ok(style) =
        ProgressStyle::with_template("{prefix} [{bar:30}] {pos}/{len} ETA {eta} {msg}")
    {
        bar.set_style(style);
    }
    bar
}
