//! Progress bars, hidden in quiet mode.

use indicatif::{ProgressBar, ProgressStyle};

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
