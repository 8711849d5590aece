//! Where the NVIDIA driver keeps the CUDA kernels it compiled, and how much it holds: a process on
//! a machine whose cache lacks candle's kernels compiles them first (`docs/gpu.md`, "The first
//! process on a machine"; [`super::load_kernels`]).

use std::path::{Path, PathBuf};

/// The driver's cache folder: `CUDA_CACHE_PATH`, else `~/.nv/ComputeCache`; `None` when the cache
/// is disabled (`CUDA_CACHE_DISABLE=1`) or no home is known.
pub(crate) fn folder(
    cache_path: Option<&str>,
    disable: Option<&str>,
    home: Option<&str>,
) -> Option<PathBuf> {
    if disable.map(str::trim) == Some("1") {
        return None;
    }
    match cache_path.filter(|p| !p.is_empty()) {
        Some(p) => Some(PathBuf::from(p)),
        None => home.map(|h| Path::new(h).join(".nv").join("ComputeCache")),
    }
}

/// [`folder`] from this process's environment.
pub fn folder_from_env() -> Option<PathBuf> {
    let var = |k| std::env::var(k).ok();
    folder(
        var("CUDA_CACHE_PATH").as_deref(),
        var("CUDA_CACHE_DISABLE").as_deref(),
        var("HOME").as_deref(),
    )
}

/// The bytes of the files below `dir` (0 when it does not exist).
fn bytes_below(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => bytes_below(&e.path()),
            Ok(t) if t.is_file() => e.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}

/// One line for `clipsculpt info`: the cache folder and what it holds.
pub fn describe(folder: Option<&Path>) -> String {
    match folder {
        None => "CUDA kernel cache: disabled (CUDA_CACHE_DISABLE=1) or no home folder; every run \
                 compiles candle's kernels first"
            .into(),
        Some(f) => format!(
            "CUDA kernel cache: {} ({:.1} MB; CUDA_CACHE_PATH); when it lacks candle's kernels \
             (about 12 MB), the next run compiles them first",
            f.display(),
            bytes_below(f) as f64 / 1e6
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_folder_follows_the_drivers_variables() {
        let p = |s: &str| Some(PathBuf::from(s));
        assert_eq!(folder(Some("/c"), None, Some("/h")), p("/c"));
        assert_eq!(folder(None, None, Some("/h")), p("/h/.nv/ComputeCache"));
        assert_eq!(
            folder(Some(""), Some("0"), Some("/h")),
            p("/h/.nv/ComputeCache")
        );
        assert_eq!(folder(Some("/c"), Some("1"), Some("/h")), None);
        assert_eq!(folder(None, None, None), None);
    }

    #[test]
    fn describes_what_the_cache_holds() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub").join("k"), vec![0u8; 1_500_000]).unwrap();
        let line = describe(Some(dir.path()));
        assert!(line.contains("(1.5 MB;"), "{line}");
        assert!(describe(Some(&dir.path().join("absent"))).contains("(0.0 MB;"));
        assert!(describe(None).starts_with("CUDA kernel cache: disabled"));
    }
}
