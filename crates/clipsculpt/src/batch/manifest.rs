//! The manifest: one JSON record per finished or failed item, appended and synced as each item
//! ends. Each shard appends to its own file (`manifest.jsonl`, or `manifest.shard-I-of-N.jsonl`),
//! and resuming reads them all, so shards sharing an output folder never write the same file.

use std::collections::HashSet;
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::prompts::BatchError;
use super::shard::Shard;
use crate::atomic::DirLock;

/// How an item ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Status {
    /// Outputs complete in the item's folder.
    Done,
    /// The item failed; `error` says why. A rerun tries it again.
    Failed,
}

/// One manifest line.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Record {
    /// The item's id (its output folder name).
    pub(crate) id: String,
    /// Line in the prompt file.
    pub(crate) line: usize,
    /// The prompt.
    pub(crate) prompt: String,
    /// Outcome.
    pub(crate) status: Status,
    /// Wall-clock seconds spent on the item.
    pub(crate) seconds: f64,
    /// The error message of a failed item.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
    /// The item's Blender preview (`<id>/blender_preview.png`), when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) blender_preview: Option<String>,
}

/// The manifest of one shard, plus what every shard has finished. Holds the shard's lock
/// (`.<manifest>.lock`), so a second process running the same shard refuses.
#[derive(Debug)]
pub(crate) struct Manifest {
    path: PathBuf,
    done: HashSet<String>,
    _lock: DirLock,
}

/// What a manifest's bytes say: the ids of finished items, and the 1-based numbers of lines
/// that are not records (torn by a crash mid-append; those items simply run again).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct ManifestLines {
    /// Items recorded as done.
    pub done: HashSet<String>,
    /// Unreadable lines.
    pub bad_lines: Vec<usize>,
}

impl ManifestLines {
    /// Parses the bytes of a manifest file (invalid UTF-8 makes only its lines unreadable).
    pub fn parse(bytes: &[u8]) -> ManifestLines {
        let mut out = ManifestLines::default();
        for (i, line) in bytes.split(|&b| b == b'\n').enumerate() {
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice::<Record>(line) {
                Ok(r) if r.status == Status::Done => {
                    out.done.insert(r.id);
                }
                Ok(_) => {}
                Err(_) => out.bad_lines.push(i + 1),
            }
        }
        out
    }
}

impl Manifest {
    /// Opens the manifest for `shard` in `out_dir`, taking the shard's lock, and reads which
    /// items are done (all shards).
    pub(crate) fn open(out_dir: &Path, shard: Shard) -> Result<Manifest, BatchError> {
        let name = if shard.count == 1 {
            "manifest.jsonl".to_string()
        } else {
            format!("manifest.shard-{}-of-{}.jsonl", shard.index, shard.count)
        };
        let lock = DirLock::try_acquire(
            &out_dir.join(format!(".{name}.lock")),
            &format!("shard {shard} of the batch in {}", out_dir.display()),
        )?;
        let path = out_dir.join(name);
        let mut done = HashSet::new();
        let entries = fs::read_dir(out_dir).map_err(|e| BatchError::Manifest {
            path: out_dir.to_path_buf(),
            message: format!("cannot list the output folder: {e}"),
        })?;
        for entry in entries.flatten() {
            let p = entry.path();
            let is_manifest = p
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("manifest") && n.ends_with(".jsonl"));
            if !is_manifest {
                continue;
            }
            let bytes = fs::read(&p).map_err(|e| BatchError::Manifest {
                path: p.clone(),
                message: format!("unreadable ({e}); fix its permissions, or move it away to start the batch over"),
            })?;
            let lines = ManifestLines::parse(&bytes);
            for l in lines.bad_lines {
                tracing::warn!("{}:{l}: ignoring an unreadable manifest line", p.display());
            }
            done.extend(lines.done);
        }
        Ok(Manifest {
            path,
            done,
            _lock: lock,
        })
    }

    /// Whether item `id` is finished (by any shard).
    pub(crate) fn is_done(&self, id: &str) -> bool {
        self.done.contains(id)
    }

    /// Appends a record and syncs it to disk.
    pub(crate) fn append(&mut self, record: &Record) -> Result<(), BatchError> {
        let err = |e: std::io::Error| {
            BatchError::Manifest {
            path: self.path.clone(),
            message: format!("cannot append ({e}); make the batch folder writable (and free some space), then rerun to resume"),
        }
        };
        let mut line = serde_json::to_string(record).map_err(|e| BatchError::Manifest {
            path: self.path.clone(),
            message: format!("cannot encode a record: {e}"),
        })?;
        line.push('\n');
        let mut f = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.path)
            .map_err(err)?;
        f.write_all(line.as_bytes()).map_err(err)?;
        f.sync_data().map_err(err)?;
        if record.status == Status::Done {
            self.done.insert(record.id.clone());
        }
        Ok(())
    }
}
