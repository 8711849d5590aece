//! The gallery: `index.html` for a folder of runs (a batch, the runs of `vary`, or one run), which opens from disk
//! with no server and loads nothing from the network.
//!
//! 1. [`scan`] reads the folder: every sub-folder with a `report.json` is a card, the folder itself too when it holds
//!    one, and failed batch items (their manifest line, their `<id>.failed/` folder) are cards with their reason.
//! 2. [`page`] renders the cards as one self-contained page: its CSS and script (`page.css`, `page.js`) are
//!    inline; cards sort by score and filter by text.
//! 3. [`assets`] writes beside it, in `gallery/`, the vendored 3D viewer (`@google/model-viewer`, pinned, with its
//!    licence; `vendor/README.md`) and each mesh as a script holding its GLB as a `data:` URI, loaded when a card's
//!    3D view opens (browsers refuse to fetch `file://` URLs from a page, but run classic scripts from them).
//!
//! [`write_gallery`] does all three, atomically per file, so a page read while a batch rewrites it is always whole.

pub(crate) mod assets;
pub(crate) mod page;
pub(crate) mod scan;

use std::path::{Path, PathBuf};

pub use scan::{Card, CardStatus};

/// The page's file name.
pub const INDEX_FILE: &str = "index.html";
/// The folder beside the page that holds the viewer and the meshes' scripts.
pub const ASSETS_DIR: &str = "gallery";

/// A gallery that could not be written.
#[derive(Debug, thiserror::Error)]
pub enum GalleryError {
    /// The folder is not a folder.
    #[error("{0} is not a folder of runs (no such folder)")]
    NotAFolder(PathBuf),
    /// The folder holds no runs: nothing was written.
    #[error(
        "{0} holds no runs (no report.json in it or in its sub-folders, no failed batch item); give a run folder \
         or a batch's --out folder"
    )]
    Empty(PathBuf),
    /// Reading or writing a file failed.
    #[error("writing the gallery of {dir}: {path}: {source}")]
    Io {
        /// The gallery's folder.
        dir: PathBuf,
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

/// What [`write_gallery`] wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GallerySummary {
    /// The page.
    pub index: PathBuf,
    /// Cards of finished runs.
    pub runs: usize,
    /// Cards of failed items.
    pub failed: usize,
}

/// Writes `dir/index.html` (and `dir/gallery/`) for the runs in `dir`, replacing an earlier page; refuses a folder
/// with no runs ([`GalleryError::Empty`]), writing nothing.
pub fn write_gallery(dir: &Path) -> Result<GallerySummary, GalleryError> {
    if !dir.is_dir() {
        return Err(GalleryError::NotAFolder(dir.to_path_buf()));
    }
    let io = |path: &Path| {
        let (dir, path) = (dir.to_path_buf(), path.to_path_buf());
        move |source| GalleryError::Io { dir, path, source }
    };
    let cards = scan::scan(dir);
    if cards.is_empty() {
        return Err(GalleryError::Empty(dir.to_path_buf()));
    }
    let assets = dir.join(ASSETS_DIR);
    assets::write_viewer(&assets).map_err(io(&assets))?;
    let mut meshes = Vec::new();
    for card in &cards {
        meshes.push(match &card.glb {
            Some(glb) => {
                let script = assets::write_mesh_script(dir, glb, &card.key).map_err(io(glb))?;
                Some(script)
            }
            None => None,
        });
    }
    let html = page::render(dir, &cards, &meshes);
    let index = dir.join(INDEX_FILE);
    crate::atomic::write_atomic(&index, html.as_bytes()).map_err(io(&index))?;
    let failed = cards
        .iter()
        .filter(|c| c.status == CardStatus::Failed)
        .count();
    Ok(GallerySummary {
        index,
        runs: cards.len() - failed,
        failed,
    })
}
