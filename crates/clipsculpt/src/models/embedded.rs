//! The embedded default world (`assets/toy` in the repository), carried inside the binary.
//!
//! The loaders read model folders, so the first run writes the embedded files into a folder of
//! the user's cache named by their content hash ([`folder`]), atomically: a second process, or
//! a later run, finds the folder complete and checks its bytes against the embedded ones.

use std::path::{Path, PathBuf};

use crate::atomic::write_atomic;

/// Bytes of one embedded file under `assets/toy/`.
macro_rules! asset {
    ($rel:literal) => {
        (
            $rel,
            include_bytes!(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../assets/toy/",
                $rel
            )) as &[u8],
        )
    };
}

/// The files of the embedded world that the loaders read, relative to its root.
pub(crate) const FILES: &[(&str, &[u8])] = &[
    asset!("MANIFEST.json"),
    asset!("clip/config.json"),
    asset!("clip/model.safetensors"),
    asset!("clip/tokenizer.json"),
    asset!("shap_e/prior/config.json"),
    asset!("shap_e/prior/diffusion_pytorch_model.safetensors"),
    asset!("shap_e/sampling.json"),
    asset!("shap_e/scheduler/scheduler_config.json"),
    asset!("shap_e/shap_e_renderer/config.json"),
    asset!("shap_e/shap_e_renderer/diffusion_pytorch_model.safetensors"),
    asset!("shap_e/text_encoder/config.json"),
    asset!("shap_e/text_encoder/model.safetensors"),
    asset!("shap_e/tokenizer/tokenizer.json"),
];

/// The embedded toy CLIP's `tokenizer.json` (every caption word of the toy world), which
/// random-weight models share.
pub fn toy_tokenizer_json() -> &'static str {
    let bytes = FILES
        .iter()
        .find(|(rel, _)| *rel == "clip/tokenizer.json")
        .map_or(&[][..], |(_, b)| *b);
    std::str::from_utf8(bytes).unwrap_or_default()
}

/// FNV-1a over every embedded file's name and bytes: the folder's name changes with the content.
fn content_hash() -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for (rel, bytes) in FILES {
        for b in rel.bytes().chain([0]).chain(bytes.iter().copied()) {
            h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
    h
}

/// Where the embedded world is written: `$CLIPSCULPT_CACHE`, else `$XDG_CACHE_HOME/clipsculpt`,
/// else `~/.cache/clipsculpt`, else the temporary folder.
fn cache_root() -> PathBuf {
    let var = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    var("CLIPSCULPT_CACHE")
        .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("clipsculpt")))
        .or_else(|| var("HOME").map(|d| d.join(".cache").join("clipsculpt")))
        .unwrap_or_else(|| std::env::temp_dir().join("clipsculpt"))
}

/// Whether `root` holds every embedded file with exactly the embedded bytes.
fn complete(root: &Path) -> bool {
    FILES
        .iter()
        .all(|(rel, bytes)| std::fs::read(root.join(rel)).is_ok_and(|b| b == *bytes))
}

/// The folder holding the embedded world, written on first use (each file atomically); the error
/// names the cache folder and how to choose another.
pub(crate) fn folder() -> Result<PathBuf, String> {
    let cache = cache_root();
    folder_in(&cache).map_err(|e| {
        format!(
            "cannot write the embedded toy model into {}: {e}; set CLIPSCULPT_CACHE to a writable folder",
            cache.display()
        )
    })
}

/// The embedded world's folder under `cache`, written or repaired where it differs.
fn folder_in(cache: &Path) -> std::io::Result<PathBuf> {
    let root = cache.join(format!("toy-{:016x}", content_hash()));
    if complete(&root) {
        return Ok(root);
    }
    for (rel, bytes) in FILES {
        let path = root.join(rel);
        if std::fs::read(&path).is_ok_and(|b| b == *bytes) {
            continue;
        }
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        write_atomic(&path, bytes)?;
    }
    Ok(root)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The folder is written once with the embedded bytes, and a damaged file is repaired.
    #[test]
    fn the_embedded_world_is_written_and_repaired() {
        let tmp = tempfile::tempdir().unwrap();
        let root = folder_in(tmp.path()).unwrap();
        assert!(root.starts_with(tmp.path()) && complete(&root));
        std::fs::write(root.join("clip/config.json"), b"{}").unwrap();
        assert!(!complete(&root));
        assert_eq!(folder_in(tmp.path()).unwrap(), root);
        assert!(complete(&root));
        assert!(toy_tokenizer_json().contains("cube"));
    }
}
