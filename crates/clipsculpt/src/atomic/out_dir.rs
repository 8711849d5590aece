//! A run's output folder, written atomically: the run writes into a private folder beside
//! `--out` (`.<name>.partial-<pid>`), which [`OutputDir::commit`] renames into place once every
//! file is written, so a folder under its final name is always complete. A lock beside it
//! (`.<name>.lock`) keeps a second process out; leftovers of killed runs are removed by the next
//! run into the same folder. An existing finished run is replaced only when asked (`--overwrite`),
//! by an atomic exchange.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::lock::{DirLock, LockError};

/// Files whose presence marks a folder as a clipsculpt run (`generate`, `sample`, `export`).
const RUN_FILES: [&str; 7] = [
    "report.json",
    "latent.safetensors",
    "views.png",
    "mesh.glb",
    "mesh.ply",
    "mesh.obj",
    "mesh_preview.png",
];

/// Why an output folder cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum OutDirError {
    /// `--out` names no folder (`/`, `.`, `..`).
    #[error("--out {} names no folder; give a folder such as outputs/run", .0.display())]
    NoName(PathBuf),
    /// Another process writes the same output.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// The folder holds a finished run and `--overwrite` was not given.
    #[error("{} already holds a finished run{}; pass --overwrite to replace it, or choose another --out", out.display(), summary.as_ref().map(|s| format!(" ({s})")).unwrap_or_default())]
    Finished {
        /// The output folder.
        out: PathBuf,
        /// What its report says, when it has a readable one.
        summary: Option<RunSummary>,
    },
    /// A file the run would write exists and `--overwrite` was not given.
    #[error("{} exists; pass --overwrite to replace it, or choose another --out", .0.display())]
    FileExists(PathBuf),
    /// The folder holds something other than a run.
    #[error("{} is not empty and holds no clipsculpt run; choose another --out (--overwrite only replaces run folders)", .0.display())]
    NotARun(PathBuf),
    /// `--out` is a file.
    #[error("{} is not a folder; choose another --out", .0.display())]
    NotAFolder(PathBuf),
    /// Creating, renaming or removing a folder failed.
    #[error("cannot {action} {}: {source}; check that the folder is writable and the disk is not full", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The folder.
        path: PathBuf,
        /// The OS error.
        source: io::Error,
    },
}

impl OutDirError {
    fn io(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> Self {
        let path = path.to_path_buf();
        move |source| Self::Io {
            action,
            path,
            source,
        }
    }
}

/// The few fields of a `report.json` that describe a finished run.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct RunSummary {
    /// The prompt.
    pub(crate) prompt: String,
    /// The clipsculpt version that wrote it.
    #[serde(default)]
    pub(crate) version: Option<String>,
}

impl RunSummary {
    /// Reads the summary from the bytes of a `report.json`; `None` when they do not parse.
    pub fn parse(bytes: &[u8]) -> Option<RunSummary> {
        serde_json::from_slice(bytes).ok()
    }

    /// The summary of the run in `dir`, from its `report.json`.
    pub(crate) fn read(dir: &Path) -> Option<RunSummary> {
        Self::parse(&fs::read(dir.join("report.json")).ok()?)
    }
}

impl std::fmt::Display for RunSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "prompt {:?}", self.prompt)?;
        if let Some(v) = &self.version {
            write!(f, ", clipsculpt {v}")?;
        }
        Ok(())
    }
}

/// What is at `--out` before a run.
enum Existing {
    /// Nothing, or an empty folder.
    Nothing,
    /// A folder holding a run.
    Run,
    /// A non-empty folder holding no run.
    Other,
}

/// How the private folder reaches `--out`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// The folder is the unit: renamed into place whole (`generate`, `sample`).
    Folder,
    /// Files added to a folder that may exist (`export` into a run's folder): each file is
    /// renamed into place.
    Files,
}

/// A private work folder that becomes `--out` on [`commit`](OutputDir::commit), and is removed
/// if the run ends without committing.
#[derive(Debug)]
pub struct OutputDir {
    target: PathBuf,
    work: PathBuf,
    mode: Mode,
    overwrite: bool,
    committed: bool,
    _lock: DirLock,
}

impl OutputDir {
    /// Prepares a run into the folder `out` (`generate`, `sample`): takes the lock, removes
    /// leftovers of killed runs, refuses an existing run unless `overwrite`, creates the private
    /// folder.
    pub fn folder(out: &Path, overwrite: bool) -> Result<OutputDir, OutDirError> {
        let dir = Self::prepare(out, Mode::Folder, overwrite)?;
        match existing(out)? {
            Existing::Nothing => {}
            Existing::Run if overwrite => {}
            Existing::Run => {
                return Err(OutDirError::Finished {
                    out: out.to_path_buf(),
                    summary: RunSummary::read(out),
                })
            }
            Existing::Other => return Err(OutDirError::NotARun(out.to_path_buf())),
        }
        dir.create()
    }

    /// Prepares a run that adds the files `names` to the folder `out`, which may exist
    /// (`export`): an existing file of those names is refused unless `overwrite`.
    pub fn files(out: &Path, names: &[String], overwrite: bool) -> Result<OutputDir, OutDirError> {
        let dir = Self::prepare(out, Mode::Files, overwrite)?;
        if !overwrite {
            if let Some(p) = names.iter().map(|n| out.join(n)).find(|p| p.exists()) {
                return Err(OutDirError::FileExists(p));
            }
        }
        existing(out)?;
        dir.create()
    }

    /// Checks the name, takes the lock and removes leftovers.
    fn prepare(out: &Path, mode: Mode, overwrite: bool) -> Result<OutputDir, OutDirError> {
        let name = out
            .file_name()
            .ok_or_else(|| OutDirError::NoName(out.to_path_buf()))?
            .to_string_lossy()
            .into_owned();
        let parent = match out.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        fs::create_dir_all(&parent).map_err(OutDirError::io("create", &parent))?;
        let lock = DirLock::try_acquire(
            &parent.join(format!(".{name}.lock")),
            &format!("the output folder {}", out.display()),
        )?;
        remove_leftovers(&parent, &name);
        Ok(OutputDir {
            target: out.to_path_buf(),
            work: parent.join(format!(".{name}.partial-{}", std::process::id())),
            mode,
            overwrite,
            committed: false,
            _lock: lock,
        })
    }

    fn create(self) -> Result<OutputDir, OutDirError> {
        fs::create_dir(&self.work).map_err(OutDirError::io("create", &self.work))?;
        Ok(self)
    }

    /// The private folder the run writes into.
    pub fn work(&self) -> &Path {
        &self.work
    }

    /// The final folder (`--out`).
    pub fn target(&self) -> &Path {
        &self.target
    }

    /// Moves the finished outputs into place: the whole folder (replacing an old run by an
    /// atomic exchange when `overwrite`), or each file.
    pub fn commit(mut self) -> Result<PathBuf, OutDirError> {
        relocate_report(&self.work, &self.target);
        sync_dir(&self.work);
        let folder_exists = self.target.is_dir();
        match (self.mode, folder_exists) {
            (_, false) => rename(&self.work, &self.target)?,
            (Mode::Folder, true) => replace_folder(&self.work, &self.target)?,
            (Mode::Files, true) => self.move_files()?,
        }
        self.committed = true;
        if let Some(parent) = self.target.parent() {
            sync_dir(parent);
        }
        Ok(self.target.clone())
    }

    /// Renames each file of the work folder into the target, then removes the work folder.
    fn move_files(&self) -> Result<(), OutDirError> {
        let entries = fs::read_dir(&self.work).map_err(OutDirError::io("list", &self.work))?;
        for e in entries {
            let e = e.map_err(OutDirError::io("list", &self.work))?;
            let dest = self.target.join(e.file_name());
            if !self.overwrite && dest.exists() {
                return Err(OutDirError::FileExists(dest));
            }
            rename(&e.path(), &dest)?;
        }
        fs::remove_dir(&self.work).map_err(OutDirError::io("remove", &self.work))
    }
}

impl Drop for OutputDir {
    fn drop(&mut self) {
        if !self.committed {
            let _ = fs::remove_dir_all(&self.work);
        }
    }
}

/// What is at `out`.
fn existing(out: &Path) -> Result<Existing, OutDirError> {
    let meta = match fs::symlink_metadata(out) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Existing::Nothing),
        Err(e) => return Err(OutDirError::io("inspect", out)(e)),
    };
    if !meta.is_dir() {
        return Err(OutDirError::NotAFolder(out.to_path_buf()));
    }
    let mut entries = fs::read_dir(out).map_err(OutDirError::io("list", out))?;
    if entries.next().is_none() {
        return Ok(Existing::Nothing);
    }
    Ok(if RUN_FILES.iter().any(|f| out.join(f).exists()) {
        Existing::Run
    } else {
        Existing::Other
    })
}

/// Removes `.<name>.partial-*` and `.<name>.old-*` beside `out`: left by killed runs (the caller
/// holds the lock, so no live run owns them).
fn remove_leftovers(parent: &Path, name: &str) {
    let prefixes = [format!(".{name}.partial-"), format!(".{name}.old-")];
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for e in entries.flatten() {
        let file = e.file_name().to_string_lossy().into_owned();
        if prefixes.iter().any(|p| file.starts_with(p.as_str())) {
            match fs::remove_dir_all(e.path()) {
                Ok(()) => {
                    tracing::warn!("removed {}, left by an interrupted run", e.path().display())
                }
                Err(err) => tracing::warn!(
                    "cannot remove {}, left by an interrupted run: {err}",
                    e.path().display()
                ),
            }
        }
    }
}

fn rename(from: &Path, to: &Path) -> Result<(), OutDirError> {
    fs::rename(from, to).map_err(OutDirError::io("move the finished run into", to))
}

/// Replaces the folder `target` by `work`: one atomic exchange where the filesystem supports it,
/// else rename the old one away, the new one in, and delete the old one.
fn replace_folder(work: &Path, target: &Path) -> Result<(), OutDirError> {
    if exchange(work, target).is_ok() {
        // `work` now holds the old run.
        return fs::remove_dir_all(work).map_err(OutDirError::io("remove the old run", work));
    }
    let old = old_name(target);
    fs::rename(target, &old).map_err(OutDirError::io("move the old run away from", target))?;
    rename(work, target)?;
    fs::remove_dir_all(&old).map_err(OutDirError::io("remove the old run", &old))
}

/// `.<name>.old-<pid>` beside `target`.
fn old_name(target: &Path) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    target.with_file_name(format!(".{name}.old-{}", std::process::id()))
}

/// Atomically swaps two paths (Linux `renameat2(RENAME_EXCHANGE)`).
#[cfg(target_os = "linux")]
fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    use std::ffi::CString;
    use std::os::unix::ffi::OsStrExt;
    let c = |p: &Path| {
        CString::new(p.as_os_str().as_bytes()).map_err(|e| io::Error::other(e.to_string()))
    };
    let (a, b) = (c(a)?, c(b)?);
    // SAFETY: both arguments are valid NUL-terminated paths that outlive the call.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

#[cfg(not(target_os = "linux"))]
fn exchange(_: &Path, _: &Path) -> io::Result<()> {
    Err(io::Error::from(io::ErrorKind::Unsupported))
}

/// Flushes a folder's entries to disk (best effort).
fn sync_dir(dir: &Path) {
    if let Ok(f) = fs::File::open(dir) {
        let _ = f.sync_all();
    }
}

/// Rewrites the `files` of `work/report.json`, written while the run lived in `work`, to name
/// their final place under `target`. A folder without a report is left as it is.
pub fn relocate_report(work: &Path, target: &Path) {
    let p = work.join("report.json");
    let Ok(bytes) = fs::read(&p) else {
        return;
    };
    let Ok(mut report) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        return;
    };
    let Some(files) = report.get_mut("files").and_then(|f| f.as_array_mut()) else {
        return;
    };
    for f in files.iter_mut() {
        let moved = f
            .as_str()
            .and_then(|s| Path::new(s).strip_prefix(work).ok())
            .map(|rest| target.join(rest).to_string_lossy().into_owned());
        if let Some(m) = moved {
            *f = serde_json::Value::String(m);
        }
    }
    if let Ok(text) = serde_json::to_string_pretty(&report) {
        if let Err(e) = super::write_atomic(&p, text.as_bytes()) {
            tracing::warn!("cannot rewrite the file list of {}: {e}", p.display());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn folder_appears_only_on_commit_and_is_refused_after() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("run");
        let dir = OutputDir::folder(&out, false).unwrap();
        fs::write(dir.work().join("report.json"), r#"{"prompt": "a cube"}"#).unwrap();
        assert!(!out.exists());
        assert!(matches!(
            OutputDir::folder(&out, false).unwrap_err(),
            OutDirError::Lock(LockError::Busy { .. })
        ));
        dir.commit().unwrap();
        assert_eq!(names(d.path()), vec!["run"]);
        let err = OutputDir::folder(&out, false).unwrap_err().to_string();
        assert!(
            err.contains("already holds a finished run (prompt \"a cube\")")
                && err.contains("--overwrite"),
            "{err}"
        );
    }

    #[test]
    fn overwrite_replaces_and_failure_keeps_the_old_run() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("run");
        fs::create_dir(&out).unwrap();
        fs::write(out.join("report.json"), "old").unwrap();
        let dir = OutputDir::folder(&out, true).unwrap();
        fs::write(dir.work().join("report.json"), "half").unwrap();
        drop(dir); // the run failed
        assert_eq!(fs::read(out.join("report.json")).unwrap(), b"old");
        assert_eq!(names(d.path()), vec!["run"]);
        let dir = OutputDir::folder(&out, true).unwrap();
        fs::write(dir.work().join("report.json"), "new").unwrap();
        dir.commit().unwrap();
        assert_eq!(fs::read(out.join("report.json")).unwrap(), b"new");
        assert_eq!(names(d.path()), vec!["run"]);
    }

    #[test]
    fn leftovers_are_removed_and_foreign_folders_refused() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("run");
        fs::create_dir(d.path().join(".run.partial-99999")).unwrap();
        fs::create_dir(d.path().join(".other.partial-99999")).unwrap();
        drop(OutputDir::folder(&out, false).unwrap());
        assert_eq!(names(d.path()), vec![".other.partial-99999"]);
        fs::create_dir(&out).unwrap();
        fs::write(out.join("thesis.tex"), "x").unwrap();
        let err = OutputDir::folder(&out, true).unwrap_err();
        assert!(matches!(err, OutDirError::NotARun(_)), "{err}");
        assert!(matches!(
            OutputDir::folder(Path::new("/"), false).unwrap_err(),
            OutDirError::NoName(_)
        ));
    }

    #[test]
    fn files_join_an_existing_folder_without_clobbering() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("run");
        fs::create_dir(&out).unwrap();
        fs::write(out.join("latent.safetensors"), "z").unwrap();
        let want = vec!["mesh.glb".to_string()];
        let dir = OutputDir::files(&out, &want, false).unwrap();
        fs::write(dir.work().join("mesh.glb"), "m").unwrap();
        dir.commit().unwrap();
        assert_eq!(names(&out), vec!["latent.safetensors", "mesh.glb"]);
        let err = OutputDir::files(&out, &want, false).unwrap_err();
        assert!(matches!(err, OutDirError::FileExists(_)), "{err}");
        let dir = OutputDir::files(&out, &want, true).unwrap();
        fs::write(dir.work().join("mesh.glb"), "m2").unwrap();
        dir.commit().unwrap();
        assert_eq!(fs::read(out.join("mesh.glb")).unwrap(), b"m2");
        assert_eq!(names(d.path()), vec!["run"]);
    }

    #[test]
    fn report_files_name_the_final_folder() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("run");
        let dir = OutputDir::folder(&out, false).unwrap();
        let file = dir.work().join("mesh.glb").to_string_lossy().into_owned();
        let report = serde_json::json!({"prompt": "p", "files": [file]});
        fs::write(dir.work().join("report.json"), report.to_string()).unwrap();
        dir.commit().unwrap();
        let back: serde_json::Value =
            serde_json::from_slice(&fs::read(out.join("report.json")).unwrap()).unwrap();
        assert_eq!(
            back["files"][0],
            out.join("mesh.glb").to_string_lossy().as_ref()
        );
    }
}
