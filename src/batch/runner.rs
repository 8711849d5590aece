//! Runs the items of one shard: skips finished ones, runs the others one at a time into a
//! private work folder that is renamed into place only when complete, and records each outcome.
//! A failing item is recorded and the batch goes on.

use std::fs;
use std::path::Path;
use std::time::Instant;

use super::manifest::{Manifest, Record, Status};
use super::prompts::{BatchError, PromptItem};
use super::shard::Shard;

/// Counts of a batch run.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchSummary {
    /// Items run to completion now.
    pub(crate) done: usize,
    /// Items skipped because an earlier run finished them.
    pub(crate) skipped: usize,
    /// Items that failed now.
    pub(crate) failed: usize,
    /// Items that belong to other shards.
    pub(crate) other_shards: usize,
}

/// The error type of one item's job.
pub(crate) type JobError = Box<dyn std::error::Error + Send + Sync>;

/// Runs `job(item, work_dir)` for every item of `shard` not yet done, in file order. `job` writes
/// the item's outputs into `work_dir`; on success the folder becomes `out_dir/<id>`.
pub(crate) fn run_batch(
    items: &[PromptItem],
    shard: Shard,
    out_dir: &Path,
    seed: u64,
    mut job: impl FnMut(&PromptItem, &Path) -> Result<(), JobError>,
) -> Result<BatchSummary, BatchError> {
    let io = |path: &Path, e: std::io::Error| BatchError::Manifest {
        path: path.to_path_buf(),
        message: format!("{e}; check that the output folder is writable"),
    };
    fs::create_dir_all(out_dir).map_err(|e| io(out_dir, e))?;
    let mut manifest = Manifest::open(out_dir, shard)?;
    let mut summary = BatchSummary::default();
    for (k, item) in items.iter().enumerate() {
        if !shard.owns(k) {
            summary.other_shards += 1;
            continue;
        }
        let id = item.id(seed);
        let final_dir = out_dir.join(&id);
        remove_partials(out_dir, &id);
        if manifest.is_done(&id) {
            summary.skipped += 1;
            continue;
        }
        let record = |status, seconds, error| Record {
            id: id.clone(),
            line: item.line,
            prompt: item.prompt.clone(),
            status,
            seconds,
            error,
            blender_preview: (status == Status::Done
                && final_dir.join(crate::blender::PREVIEW_FILE).is_file())
            .then(|| format!("{id}/{}", crate::blender::PREVIEW_FILE)),
        };
        if final_dir.is_dir() {
            // Renamed into place, then interrupted before the manifest line: it is complete.
            manifest.append(&record(Status::Done, 0.0, None))?;
            summary.skipped += 1;
            continue;
        }
        let work = out_dir.join(format!(".{id}.partial-{}", std::process::id()));
        fs::create_dir_all(&work).map_err(|e| io(&work, e))?;
        let start = Instant::now();
        tracing::info!("item {} (line {}): {}", id, item.line, item.prompt);
        match job(item, &work) {
            Ok(()) => {
                fs::rename(&work, &final_dir).map_err(|e| io(&final_dir, e))?;
                manifest.append(&record(Status::Done, start.elapsed().as_secs_f64(), None))?;
                summary.done += 1;
            }
            Err(e) => {
                let _ = fs::remove_dir_all(&work);
                tracing::error!("item {id} (line {}) failed: {e}", item.line);
                manifest.append(&record(
                    Status::Failed,
                    start.elapsed().as_secs_f64(),
                    Some(e.to_string()),
                ))?;
                summary.failed += 1;
            }
        }
    }
    Ok(summary)
}

/// Removes work folders of `id` left by interrupted runs (only this item's, so other shards'
/// running items are never touched).
fn remove_partials(out_dir: &Path, id: &str) {
    let prefix = format!(".{id}.partial-");
    if let Ok(entries) = fs::read_dir(out_dir) {
        for e in entries.flatten() {
            if e.file_name().to_string_lossy().starts_with(&prefix) {
                let _ = fs::remove_dir_all(e.path());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::parse_prompt_file;

    fn items(n: usize) -> Vec<PromptItem> {
        (0..n)
            .map(|i| PromptItem {
                line: i + 1,
                prompt: format!("object {i}"),
                seed: None,
                steps: None,
                name: None,
            })
            .collect()
    }

    fn write_job(item: &PromptItem, dir: &Path) -> Result<(), JobError> {
        fs::write(dir.join("mesh.txt"), &item.prompt)?;
        Ok(())
    }

    #[test]
    fn resume_skips_finished_and_retries_failed() {
        let d = tempfile::tempdir().unwrap();
        let its = items(5);
        // First run: item 2 fails, item 3 is "interrupted" (the job panics-free aborts by error
        // after writing a partial file).
        let s = run_batch(&its, Shard::default(), d.path(), 0, |it, dir| {
            if it.line == 3 {
                fs::write(dir.join("half"), "x")?;
                return Err("boom".into());
            }
            write_job(it, dir)
        })
        .unwrap();
        assert_eq!((s.done, s.failed), (4, 1));
        // Second run: only the failed item runs; no partial folders remain.
        let mut ran = Vec::new();
        let s = run_batch(&its, Shard::default(), d.path(), 0, |it, dir| {
            ran.push(it.line);
            write_job(it, dir)
        })
        .unwrap();
        assert_eq!(ran, vec![3]);
        assert_eq!((s.done, s.skipped), (1, 4));
        let names: Vec<String> = fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into())
            .collect();
        assert!(names.iter().all(|n| !n.contains("partial")), "{names:?}");
        assert_eq!(names.iter().filter(|n| n.starts_with("000")).count(), 5);
    }

    #[test]
    fn shards_split_a_file_with_no_overlap() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("p.txt");
        fs::write(
            &p,
            (0..10).map(|i| format!("thing {i}\n")).collect::<String>(),
        )
        .unwrap();
        let file = parse_prompt_file(&p).unwrap();
        let out = d.path().join("out");
        let mut all = Vec::new();
        for i in 0..3 {
            run_batch(
                &file.items,
                Shard::new(i, 3).unwrap(),
                &out,
                0,
                |it, dir| {
                    all.push(it.line);
                    write_job(it, dir)
                },
            )
            .unwrap();
        }
        all.sort_unstable();
        assert_eq!(all, (1..=10).collect::<Vec<_>>());
        // A rerun of any shard finds everything done (manifests of all shards are read).
        let s = run_batch(&file.items, Shard::default(), &out, 0, |_, _| {
            Err("must not run".into())
        })
        .unwrap();
        assert_eq!(s.skipped, 10);
    }
}
