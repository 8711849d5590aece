//! Atomic outputs. Every output file goes through [`write_atomic`] (temp file in the same folder,
//! fsync, rename), so an interrupted run never leaves a half-written file under the final name;
//! a whole run goes through an [`OutputDir`] (a private folder renamed into place when complete,
//! under a [`DirLock`]), so a folder under its final name is always a finished run.

mod lock;
mod out_dir;

use std::fs;
use std::io::{self, Write};
use std::path::Path;

pub(crate) use lock::DirLock;
pub use lock::LockError;
pub use out_dir::{relocate_report, RunSummary};
pub use out_dir::{OutDirError, OutputDir};

/// Writes `bytes` to `path` atomically: a reader sees either the old file or the complete new one.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    write_atomic_with(path, |w| w.write_all(bytes))
}

/// Like [`write_atomic`], with the content produced by a writer callback (for large streamed outputs).
///
/// The error is the bare I/O error: callers name the path once, in their own context.
pub(crate) fn write_atomic_with(
    path: &Path,
    fill: impl FnOnce(&mut io::BufWriter<fs::File>) -> io::Result<()>,
) -> io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let tmp = dir.join(format!(
        ".{}.tmp-{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    let result = (|| {
        let mut w = io::BufWriter::new(fs::File::create(&tmp)?);
        fill(&mut w)?;
        injected_fault(path)?;
        let file = w.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Debug and test builds only: `CLIPSCULPT_FAULT_ENOSPC=<file name>` makes writing a file of
/// that name fail as a full disk would (the fault-injection tests use it where no small tmpfs
/// can be mounted). Release builds ignore the variable.
fn injected_fault(path: &Path) -> io::Result<()> {
    if cfg!(debug_assertions) {
        if let Ok(name) = std::env::var("CLIPSCULPT_FAULT_ENOSPC") {
            if path
                .file_name()
                .is_some_and(|n| n.to_string_lossy() == name)
            {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_and_replaces_without_leftovers() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.txt");
        write_atomic(&p, b"one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(fs::read(&p).unwrap(), b"two");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn failed_fill_keeps_old_file_and_removes_temp() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.txt");
        write_atomic(&p, b"old").unwrap();
        let err = write_atomic_with(&p, |_| Err(io::Error::other("disk full"))).unwrap_err();
        // The bare error: the caller adds the path once.
        assert_eq!(err.to_string(), "disk full");
        assert_eq!(fs::read(&p).unwrap(), b"old");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
