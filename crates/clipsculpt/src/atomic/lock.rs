//! Advisory locks: one lock file per output (a run's `--out`, a batch shard's manifest, a batch
//! item), held with `flock` for the life of the writer, so a second process writing the same
//! output refuses instead of interleaving. The kernel drops the lock when its holder dies, so a
//! killed run never blocks the next one.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

/// Why a lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process holds the lock.
    #[error("{what} is in use by another clipsculpt process (lock {lock}); wait for it to finish, or choose another output folder")]
    Busy {
        /// The output the lock protects, in words.
        what: String,
        /// The lock file.
        lock: PathBuf,
    },
    /// The lock file could not be created or locked.
    #[error("cannot lock {}: {source}; check that its folder is writable", lock.display())]
    Io {
        /// The lock file.
        lock: PathBuf,
        /// The OS error.
        source: io::Error,
    },
}

/// An exclusive advisory lock on `path`, released (and the lock file removed) on drop.
#[derive(Debug)]
pub(crate) struct DirLock {
    path: PathBuf,
    file: File,
}

impl DirLock {
    /// Takes the lock at `path` without waiting; `what` names the protected output in the
    /// refusal message.
    pub(crate) fn try_acquire(path: &Path, what: &str) -> Result<DirLock, LockError> {
        let io_err = |source| LockError::Io {
            lock: path.to_path_buf(),
            source,
        };
        // The holder deletes the file on release: a lock taken on a file that was deleted
        // meanwhile protects nothing, so retry until the locked file is the one at `path`.
        for _ in 0..16 {
            // Created, then held open read-only: an open writer would keep the folder's
            // filesystem from being remounted read-only, and `flock` needs no write access.
            drop(
                OpenOptions::new()
                    .create(true)
                    .truncate(false)
                    .write(true)
                    .open(path)
                    .map_err(io_err)?,
            );
            let file = match File::open(path) {
                Ok(f) => f,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(io_err(e)),
            };
            match file.try_lock() {
                Ok(()) => {}
                Err(fs::TryLockError::WouldBlock) => {
                    return Err(LockError::Busy {
                        what: what.to_string(),
                        lock: path.to_path_buf(),
                    })
                }
                Err(fs::TryLockError::Error(e)) => return Err(io_err(e)),
            }
            if same_file(&file, path) {
                return Ok(DirLock {
                    path: path.to_path_buf(),
                    file,
                });
            }
        }
        Err(io_err(io::Error::other(
            "the lock file keeps being replaced",
        )))
    }

    /// The lock file.
    #[cfg(test)]
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for DirLock {
    fn drop(&mut self) {
        // Removed while still locked, so no other process can lock this inode and believe it
        // holds the lock at `path`.
        let _ = fs::remove_file(&self.path);
        let _ = self.file.unlock();
    }
}

/// Whether the open `file` is the file now at `path` (same device and inode).
fn same_file(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn second_holder_is_refused_until_the_first_drops() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join(".out.lock");
        let first = DirLock::try_acquire(&p, "out").unwrap();
        let err = DirLock::try_acquire(&p, "out").unwrap_err();
        assert!(matches!(err, LockError::Busy { .. }), "{err}");
        assert!(err.to_string().contains("in use by another"), "{err}");
        drop(first);
        assert!(!p.exists(), "the lock file is removed on release");
        let again = DirLock::try_acquire(&p, "out").unwrap();
        assert_eq!(again.path(), p);
    }
}
