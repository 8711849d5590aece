//! `clipsculpt gallery`: (re)writes the `index.html` of a folder of runs.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args as ClapArgs;

use crate::context::Context;
use crate::EXIT_OK;
use clipsculpt::gallery::write_gallery;

/// Write `index.html` for a folder of runs (a batch, the runs of `vary`, or one run).
#[derive(Debug, ClapArgs)]
pub(super) struct Gallery {
    /// The folder: a run folder, or a folder of run folders (a batch's `--out`).
    dir: PathBuf,
}

impl Gallery {
    pub(crate) fn run(self, cx: &Context) -> anyhow::Result<ExitCode> {
        let summary = write_gallery(&self.dir)?;
        if !cx.quiet {
            println!(
                "{}: {} run(s), {} failed",
                summary.index.display(),
                summary.runs,
                summary.failed
            );
        }
        Ok(ExitCode::from(EXIT_OK))
    }
}
