//! Runs the items of one shard: skips finished ones, runs the others one at a time into a
//! private work folder that is renamed into place only when complete, and records each outcome.
//! A failing item is recorded and the batch goes on; whatever it wrote (its latents, previews, report) is kept in
//! `<id>.failed/`, so that nothing is lost (a latent with no surface can still be meshed by `export --level`).
//! After each item the folder's gallery (`index.html`, [`crate::gallery`]) is rewritten, so an interrupted batch
//! has a page of the items it finished.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Instant;

use super::manifest::{Manifest, Record, Status};
use super::prompts::{BatchError, PromptItem};
use super::shard::Shard;
use crate::atomic::{relocate_report, DirLock, LockError};

/// Counts of a batch run.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct BatchSummary {
    /// Items run to completion now.
    pub done: usize,
    /// Items skipped because an earlier run finished them.
    pub skipped: usize,
    /// Items that failed now.
    pub failed: usize,
    /// Items that belong to other shards.
    pub other_shards: usize,
    /// Items skipped because another process was running them.
    pub running_elsewhere: usize,
}

/// The error type of one item's job.
pub(crate) type JobError = Box<dyn std::error::Error + Send + Sync>;

/// Runs `job(item, work_dir)` for every item of `shard` not yet done, in file order. `job` writes
/// the item's outputs into `work_dir`; on success the folder becomes `out_dir/<id>`.
pub fn run_batch(
    items: &[PromptItem],
    shard: Shard,
    out_dir: &Path,
    seed: u64,
    mut job: impl FnMut(&PromptItem, &Path) -> Result<(), JobError>,
) -> Result<BatchSummary, BatchError> {
    fs::create_dir_all(out_dir).map_err(folder_error(out_dir))?;
    let mut manifest = Manifest::open(out_dir, shard)?;
    let mut summary = BatchSummary::default();
    for (k, item) in items.iter().enumerate() {
        if !shard.owns(k) {
            summary.other_shards += 1;
            continue;
        }
        let id = item.id(seed);
        if manifest.is_done(&id) {
            summary.skipped += 1;
            continue;
        }
        // Held while the item runs: another process on the same folder (an overlapping shard
        // split) leaves the item to its holder.
        let Some(_lock) = lock_item(out_dir, &id)? else {
            tracing::warn!("item {id} is being run by another process; skipping it");
            summary.running_elsewhere += 1;
            continue;
        };
        remove_partials(out_dir, &id);
        let item = Item {
            item,
            final_dir: out_dir.join(&id),
            id,
        };
        match item.run(out_dir, &mut manifest, &mut job)? {
            Outcome::Done => summary.done += 1,
            Outcome::AlreadyDone => summary.skipped += 1,
            Outcome::Failed => summary.failed += 1,
        }
        rewrite_gallery(out_dir);
    }
    rewrite_gallery(out_dir);
    Ok(summary)
}

/// Rewrites the batch's gallery; a page that cannot be written is a warning, not a failed batch.
fn rewrite_gallery(out_dir: &Path) {
    use crate::gallery::{write_gallery, GalleryError};
    match write_gallery(out_dir) {
        Ok(_) | Err(GalleryError::Empty(_)) => {}
        Err(e) => tracing::warn!(
            "{e}; `clipsculpt gallery {}` writes it again",
            out_dir.display()
        ),
    }
}

/// How one item ended.
enum Outcome {
    Done,
    AlreadyDone,
    Failed,
}

/// One item to run, with its id and final folder.
struct Item<'a> {
    item: &'a PromptItem,
    id: String,
    final_dir: PathBuf,
}

impl Item<'_> {
    /// Runs the job into a private folder, renames it into place and records the outcome.
    fn run(
        &self,
        out_dir: &Path,
        manifest: &mut Manifest,
        job: &mut impl FnMut(&PromptItem, &Path) -> Result<(), JobError>,
    ) -> Result<Outcome, BatchError> {
        if self.final_dir.is_dir() {
            // Renamed into place, then interrupted before the manifest line: it is complete.
            manifest.append(&self.record(Status::Done, 0.0, None))?;
            return Ok(Outcome::AlreadyDone);
        }
        let work = out_dir.join(format!(".{}.partial-{}", self.id, std::process::id()));
        fs::create_dir_all(&work).map_err(folder_error(&work))?;
        let start = Instant::now();
        tracing::info!(
            "item {} (line {}): {}",
            self.id,
            self.item.line,
            self.item.prompt
        );
        let result = job(self.item, &work);
        let seconds = start.elapsed().as_secs_f64();
        match result {
            Ok(()) => {
                relocate_report(&work, &self.final_dir);
                fs::rename(&work, &self.final_dir).map_err(folder_error(&self.final_dir))?;
                let _ = fs::remove_dir_all(self.failed_dir());
                manifest.append(&self.record(Status::Done, seconds, None))?;
                Ok(Outcome::Done)
            }
            Err(e) => {
                let mut error = e.to_string();
                if let Some(kept) = self.keep_failed(&work) {
                    error = format!("{error} (the folder: {kept}/)");
                }
                tracing::error!("item {} (line {}) failed: {error}", self.id, self.item.line);
                manifest.append(&self.record(Status::Failed, seconds, Some(error)))?;
                Ok(Outcome::Failed)
            }
        }
    }

    /// The folder that keeps the outputs of the item's last failed run.
    fn failed_dir(&self) -> PathBuf {
        self.final_dir.with_file_name(format!("{}.failed", self.id))
    }

    /// Moves what a failed run wrote into [`Self::failed_dir`] (replacing an earlier one) and returns the folder's
    /// name; an empty work folder is removed and `None` returned, as is any folder that could not be moved.
    fn keep_failed(&self, work: &Path) -> Option<String> {
        let wrote = fs::read_dir(work).is_ok_and(|mut d| d.next().is_some());
        let kept = self.failed_dir();
        if wrote {
            relocate_report(work, &kept);
        }
        let moved = wrote
            && (!kept.exists() || fs::remove_dir_all(&kept).is_ok())
            && fs::rename(work, &kept).is_ok();
        if !moved {
            let _ = fs::remove_dir_all(work);
        }
        moved.then(|| format!("{}.failed", self.id))
    }

    fn record(&self, status: Status, seconds: f64, error: Option<String>) -> Record {
        let preview = self.final_dir.join(crate::blender::PREVIEW_FILE);
        Record {
            id: self.id.clone(),
            line: self.item.line,
            prompt: self.item.prompt.clone(),
            status,
            seconds,
            error,
            blender_preview: (status == Status::Done && preview.is_file())
                .then(|| format!("{}/{}", self.id, crate::blender::PREVIEW_FILE)),
        }
    }
}

/// An I/O error on the batch folder: the batch stops (nothing more could be recorded).
fn folder_error(path: &Path) -> impl FnOnce(std::io::Error) -> BatchError {
    let path = path.to_path_buf();
    move |e| BatchError::Folder {
        path,
        message: format!(
            "{e}; make the batch folder writable (and free some space), then rerun to resume"
        ),
    }
}

/// The lock of item `id` (`.<id>.lock`); `None` when another process holds it.
fn lock_item(out_dir: &Path, id: &str) -> Result<Option<DirLock>, BatchError> {
    let path = out_dir.join(format!(".{id}.lock"));
    match DirLock::try_acquire(&path, &format!("batch item {id}")) {
        Ok(l) => Ok(Some(l)),
        Err(LockError::Busy { .. }) => Ok(None),
        Err(LockError::Io { source, .. }) => Err(folder_error(&path)(source)),
    }
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
    fn a_failed_item_keeps_its_outputs_until_it_succeeds() -> anyhow::Result<()> {
        let d = tempfile::tempdir()?;
        let its = items(2);
        let kept = d.path().join(format!("{}.failed", its[0].id(0)));
        // Item 1 writes a latent, then fails; item 2 fails before writing anything.
        let s = run_batch(&its, Shard::default(), d.path(), 0, |it, dir| {
            if it.line == 1 {
                fs::write(dir.join("latent.safetensors"), "z")?;
            }
            Err("no mesh".into())
        })?;
        assert_eq!(s.failed, 2);
        assert_eq!(fs::read_to_string(kept.join("latent.safetensors"))?, "z");
        let other = d.path().join(format!("{}.failed", its[1].id(0)));
        assert!(
            !other.exists(),
            "an item that wrote nothing keeps no folder"
        );
        let manifest = fs::read_to_string(d.path().join("manifest.jsonl"))?;
        assert!(manifest.contains(".failed/"), "{manifest}");
        // A second failure replaces the kept folder; a success removes it.
        run_batch(&its[..1], Shard::default(), d.path(), 0, |_, dir| {
            fs::write(dir.join("latent.safetensors"), "z2")?;
            Err("no mesh".into())
        })?;
        assert_eq!(fs::read_to_string(kept.join("latent.safetensors"))?, "z2");
        run_batch(&its[..1], Shard::default(), d.path(), 0, write_job)?;
        assert!(!kept.exists());
        assert!(d.path().join(its[0].id(0)).join("mesh.txt").is_file());
        Ok(())
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
