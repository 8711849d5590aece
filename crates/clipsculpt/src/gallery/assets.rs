//! The files beside the page, in `gallery/`: the vendored viewer with its licence, and one script per mesh that
//! holds the mesh's GLB as a `data:` URI (`window.CLIPSCULPT_GLB[key]`).

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use base64::engine::general_purpose::STANDARD;

use crate::atomic::{write_atomic, write_atomic_with};

/// `@google/model-viewer`'s UMD build, pinned (`vendor/README.md`).
const VIEWER_JS: &str = include_str!("vendor/model-viewer.min.js");
/// Its licence.
const VIEWER_LICENSE: &str = include_str!("vendor/LICENSE");
/// The viewer's file name in `gallery/`.
pub(crate) const VIEWER_FILE: &str = "model-viewer.min.js";
/// The folder in `gallery/` that holds the meshes' scripts.
pub(crate) const MESH_DIR: &str = "glb";

/// Writes the viewer and its licence into `assets` (unless they are there already).
pub(crate) fn write_viewer(assets: &Path) -> io::Result<()> {
    fs::create_dir_all(assets.join(MESH_DIR))?;
    for (name, text) in [
        (VIEWER_FILE, VIEWER_JS),
        ("LICENSE.model-viewer.txt", VIEWER_LICENSE),
    ] {
        let path = assets.join(name);
        if fs::metadata(&path).map_or(true, |m| m.len() != text.len() as u64) {
            write_atomic(&path, text.as_bytes())?;
        }
    }
    Ok(())
}

/// The script of the mesh with `key`, relative to the gallery's folder.
pub(crate) fn mesh_script(key: &str) -> String {
    format!("{}/{MESH_DIR}/{key}.js", super::ASSETS_DIR)
}

/// Writes the script of `glb` under `key` into `dir`'s `gallery/glb/` (unless one newer than the GLB is there) and
/// returns its path relative to `dir`.
pub(crate) fn write_mesh_script(dir: &Path, glb: &Path, key: &str) -> io::Result<String> {
    let rel = mesh_script(key);
    let path: PathBuf = dir.join(&rel);
    let modified = |p: &Path| fs::metadata(p).and_then(|m| m.modified());
    if let (Ok(script), Ok(mesh)) = (modified(&path), modified(glb)) {
        if script >= mesh {
            return Ok(rel);
        }
    }
    let bytes = fs::read(glb)?;
    write_atomic_with(&path, |w| write_script(w, key, &bytes))?;
    Ok(rel)
}

/// The script that sets `window.CLIPSCULPT_GLB[key]` to `glb` as a `data:` URI.
fn write_script(w: &mut impl Write, key: &str, glb: &[u8]) -> io::Result<()> {
    let key = serde_json::to_string(key).map_err(io::Error::other)?;
    write!(
        w,
        "window.CLIPSCULPT_GLB=window.CLIPSCULPT_GLB||{{}};\nwindow.CLIPSCULPT_GLB[{key}]=\"data:model/gltf-binary;base64,"
    )?;
    {
        let mut enc = base64::write::EncoderWriter::new(&mut *w, &STANDARD);
        enc.write_all(glb)?;
        enc.finish()?;
    }
    w.write_all(b"\";\n")
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine;

    /// The script holds the bytes, base64, under the key; the viewer is the pinned file.
    #[test]
    fn mesh_script_round_trips() {
        let mut out = Vec::new();
        write_script(&mut out, "a\"b", &[0, 1, 2, 250, 255]).unwrap();
        let text = String::from_utf8(out).unwrap();
        let (_, tail) = text
            .split_once("[\"a\\\"b\"]=\"data:model/gltf-binary;base64,")
            .unwrap();
        let b64 = tail.trim_end().trim_end_matches("\";");
        assert_eq!(STANDARD.decode(b64).unwrap(), vec![0, 1, 2, 250, 255]);
        assert_eq!(
            VIEWER_JS.len(),
            1_072_040,
            "the pinned model-viewer 4.4.0 build"
        );
    }
}
