//! Blender previews of a run: find `blender`, run the repository's `scripts/blender/preview.py` on the run's mesh
//! headless with a time limit, and move the results into the run folder atomically.
//!
//! The script (embedded in the binary, so an installed `clipsculpt` needs no source tree) imports the mesh with the
//! importer the Blender version has, gives it a material that reads the vertex colours, lights it softly on a
//! neutral floor and renders a still or a turntable. [`preview`] writes into the output folder:
//! [`PREVIEW_FILE`] (the still, or the turntable's contact sheet), [`STATS_FILE`] (what Blender imported and the
//! render settings), and on request [`FRAMES_DIR`], [`GIF_FILE`], [`BLEND_FILE`] and [`MASK_FILE`].
//!
//! ```no_run
//! use clipsculpt::blender::{preview, Lookup, PreviewSettings};
//! let blender = Lookup::from_env(None).find()?;
//! let report = preview(&blender, "outputs/a-red-cylinder-0".as_ref(), "outputs/a-red-cylinder-0".as_ref(),
//!                      &PreviewSettings::default())?;
//! println!("{:?} in {:.1} s", report.files, report.seconds);
//! # Ok::<(), clipsculpt::blender::BlenderError>(())
//! ```

mod error;
mod locate;
mod pixels;
mod process;

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::str::FromStr;
use std::time::Duration;

pub use error::BlenderError;
pub use locate::Lookup;
pub use pixels::{object_pixels, ObjectPixels};

use crate::atomic::{write_atomic, write_atomic_with};

/// The Blender script, as in `scripts/blender/preview.py`.
pub const SCRIPT: &str = include_str!("preview.py");
/// The still, or the contact sheet of the turntable.
pub const PREVIEW_FILE: &str = "blender_preview.png";
/// What Blender imported (vertices, faces, colour attributes, world bounding box, mean vertex colour) and how it
/// rendered, as JSON.
pub const STATS_FILE: &str = "blender_preview.json";
/// The turntable frames (`frame_0000.png`, …).
pub const FRAMES_DIR: &str = "blender_frames";
/// The turntable as an animated GIF.
pub const GIF_FILE: &str = "blender_turntable.gif";
/// The set-up scene.
pub const BLEND_FILE: &str = "blender_preview.blend";
/// The object mask of the still (or of frame 0): white where the object is.
pub const MASK_FILE: &str = "blender_preview_mask.png";
/// Blender's output, kept only when it failed.
pub const LOG_FILE: &str = "blender_preview.log";
/// The mesh files a run folder may hold, in the order the script prefers them.
pub(crate) const RUN_MESHES: [&str; 3] = ["mesh.glb", "mesh.ply", "mesh.obj"];

/// Blender's render engines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Engine {
    /// Path tracing on the CPU: works headless everywhere; the default.
    #[default]
    Cycles,
    /// Rasterised (OpenGL); headless it needs EGL (Mesa's software one works) and is slower than Cycles on a CPU.
    Eevee,
    /// Blender's viewport renderer: fastest, studio-lit (darker than the vertex colours).
    Workbench,
}

impl Engine {
    /// The script's name for it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Engine::Cycles => "cycles",
            Engine::Eevee => "eevee",
            Engine::Workbench => "workbench",
        }
    }
}

impl fmt::Display for Engine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Engine {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "cycles" => Ok(Engine::Cycles),
            "eevee" => Ok(Engine::Eevee),
            "workbench" => Ok(Engine::Workbench),
            _ => Err(format!(
                "unknown engine {s:?}: use cycles, eevee or workbench"
            )),
        }
    }
}

/// How to render a preview.
#[derive(Debug, Clone, PartialEq)]
pub struct PreviewSettings {
    /// Render engine.
    pub engine: Engine,
    /// Turntable frames; 0 renders one still.
    pub frames: u32,
    /// Image side in pixels.
    pub size: u32,
    /// Samples per pixel (Cycles, EEVEE).
    pub samples: u32,
    /// Also save the scene as [`BLEND_FILE`].
    pub blend: bool,
    /// Also write [`MASK_FILE`].
    pub mask: bool,
    /// Also write [`GIF_FILE`] (needs `frames > 0`).
    pub gif: bool,
    /// Stop Blender after this long.
    pub timeout: Duration,
}

impl Default for PreviewSettings {
    fn default() -> Self {
        Self {
            engine: Engine::Cycles,
            frames: 0,
            size: 384,
            samples: 16,
            blend: false,
            mask: false,
            gif: false,
            timeout: Duration::from_secs(600),
        }
    }
}

/// What [`preview`] did.
#[derive(Debug, Clone)]
pub struct PreviewReport {
    /// Files and folders written into the output folder, [`PREVIEW_FILE`] first.
    pub files: Vec<PathBuf>,
    /// Seconds Blender ran (start, import, render, save).
    pub seconds: f64,
    /// The script's [`STATS_FILE`].
    pub stats: serde_json::Value,
}

/// The mesh a preview of `input` shows: a run folder's `mesh.glb` (else `.ply`, else `.obj`), or a mesh file.
pub(crate) fn mesh_input(input: &Path) -> Result<PathBuf, BlenderError> {
    let bad = |reason: String| BlenderError::Input {
        path: input.to_path_buf(),
        reason,
    };
    if input.is_dir() {
        return RUN_MESHES
            .iter()
            .map(|n| input.join(n))
            .find(|p| p.is_file())
            .ok_or_else(|| {
                let latent = input.join("latent.safetensors");
                bad(if latent.is_file() {
                    format!(
                        "the run has no mesh (none of {}); `clipsculpt export {}` makes one, with `--level L` when \
                         its field had no surface at 0",
                        RUN_MESHES.join(", "),
                        latent.display()
                    )
                } else {
                    format!(
                        "not a run folder: it has none of {} (run `clipsculpt generate` with --formats glb, ply or obj)",
                        RUN_MESHES.join(", ")
                    )
                })
            });
    }
    if !input.is_file() {
        return Err(bad("no such file or folder".into()));
    }
    let ext = input
        .extension()
        .map(|e| e.to_string_lossy().to_ascii_lowercase());
    match ext.as_deref() {
        Some("glb" | "gltf" | "ply" | "obj") => Ok(input.to_path_buf()),
        _ => Err(bad(
            "not a mesh Blender can preview (use .glb, .gltf, .ply or .obj)".into(),
        )),
    }
}

/// Renders a preview of `input` (run folder or mesh file) with the Blender at `blender` into `out_dir`.
///
/// Blender works in a private folder inside `out_dir`; its results are renamed into place only when it
/// succeeded, so an interrupted or failed preview never leaves a half-written file under a final name. On
/// failure Blender's output is kept in `out_dir/`[`LOG_FILE`] and the error names it.
pub fn preview(
    blender: &Path,
    input: &Path,
    out_dir: &Path,
    s: &PreviewSettings,
) -> Result<PreviewReport, BlenderError> {
    let mesh = mesh_input(input)?;
    if s.gif && s.frames == 0 {
        return Err(BlenderError::Input {
            path: input.to_path_buf(),
            reason: "a GIF needs a turntable: give --frames N".into(),
        });
    }
    std::fs::create_dir_all(out_dir).map_err(BlenderError::io(out_dir))?;
    let stage = out_dir.join(format!(".blender_preview.tmp-{}", std::process::id()));
    if stage.exists() {
        std::fs::remove_dir_all(&stage).map_err(BlenderError::io(&stage))?;
    }
    std::fs::create_dir_all(&stage).map_err(BlenderError::io(&stage))?;
    let result = render_in(blender, &mesh, &stage, out_dir, s);
    if let Err(BlenderError::Timeout { .. } | BlenderError::Failed { .. }) = &result {
        let _ = std::fs::rename(stage.join(LOG_FILE), out_dir.join(LOG_FILE));
    }
    let _ = std::fs::remove_dir_all(&stage);
    result
}

/// Runs Blender with outputs in `stage`, then moves them to `out_dir`.
fn render_in(
    blender: &Path,
    mesh: &Path,
    stage: &Path,
    out_dir: &Path,
    s: &PreviewSettings,
) -> Result<PreviewReport, BlenderError> {
    let script = stage.join("preview.py");
    write_atomic(&script, SCRIPT.as_bytes()).map_err(BlenderError::io(&script))?;
    let abs = |p: &Path| std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
    let staged = |name: &str| abs(&stage.join(name));
    let mut cmd = Command::new(blender);
    cmd.args([
        "-b",
        "--factory-startup",
        "-noaudio",
        "--python-exit-code",
        "1",
        "-P",
    ])
    .arg(abs(&script))
    .arg("--")
    .arg(abs(mesh))
    .arg("--out")
    .arg(staged(PREVIEW_FILE))
    .arg("--stats")
    .arg(staged(STATS_FILE))
    .args(["--engine", s.engine.as_str()])
    .args(["--size", &s.size.to_string()])
    .args(["--samples", &s.samples.to_string()])
    .args(["--frames", &s.frames.to_string()]);
    let mut names = vec![PREVIEW_FILE, STATS_FILE];
    if s.frames > 0 {
        cmd.arg("--frames-dir").arg(staged(FRAMES_DIR));
        names.push(FRAMES_DIR);
    }
    if s.blend {
        cmd.arg("--blend").arg(staged(BLEND_FILE));
        names.push(BLEND_FILE);
    }
    if s.mask {
        cmd.arg("--mask").arg(staged(MASK_FILE));
        names.push(MASK_FILE);
    }
    let log = stage.join(LOG_FILE);
    tracing::info!(
        "rendering a Blender preview of {} ({}, {} px, {} frames)",
        mesh.display(),
        s.engine,
        s.size,
        s.frames
    );
    let (status, seconds) = process::run_logged(&mut cmd, &log, s.timeout)?;
    let failed = |status: String| {
        let output = std::fs::read_to_string(&log).unwrap_or_default();
        BlenderError::Failed {
            status,
            last_line: process::telling_line(&output),
            log: out_dir.join(LOG_FILE),
        }
    };
    if !status.success() {
        return Err(failed(status.to_string()));
    }
    if let Some(missing) = names.iter().find(|n| !stage.join(n).exists()) {
        return Err(failed(format!("exited 0 without writing {missing}")));
    }
    if s.gif {
        write_gif(&stage.join(FRAMES_DIR), &stage.join(GIF_FILE))?;
        names.push(GIF_FILE);
    }
    let stats_path = stage.join(STATS_FILE);
    let stats_text = std::fs::read_to_string(&stats_path).map_err(BlenderError::io(&stats_path))?;
    let stats = serde_json::from_str(&stats_text).map_err(|e| BlenderError::Image {
        path: stats_path.clone(),
        reason: format!("not JSON: {e}"),
    })?;
    // The preview image last: once it is in place, everything it goes with is too.
    let mut files = Vec::with_capacity(names.len());
    for name in names.iter().rev() {
        let (from, to) = (stage.join(name), out_dir.join(name));
        if to.is_dir() {
            std::fs::remove_dir_all(&to).map_err(BlenderError::io(&to))?;
        }
        std::fs::rename(&from, &to).map_err(BlenderError::io(&to))?;
        files.push(to);
    }
    files.reverse();
    Ok(PreviewReport {
        files,
        seconds,
        stats,
    })
}

/// Assembles the PNG frames of `frames_dir` (in name order) into an endlessly looping GIF at `out`.
fn write_gif(frames_dir: &Path, out: &Path) -> Result<(), BlenderError> {
    use image::codecs::gif::{GifEncoder, Repeat};
    use image::{Delay, Frame};
    let mut paths: Vec<PathBuf> = std::fs::read_dir(frames_dir)
        .map_err(BlenderError::io(frames_dir))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "png"))
        .collect();
    paths.sort();
    let mut frames = Vec::with_capacity(paths.len());
    for p in &paths {
        let img = image::open(p).map_err(|e| BlenderError::Image {
            path: p.clone(),
            reason: e.to_string(),
        })?;
        frames.push(Frame::from_parts(
            img.to_rgba8(),
            0,
            0,
            Delay::from_numer_denom_ms(100, 1),
        ));
    }
    write_atomic_with(out, |w| {
        let mut enc = GifEncoder::new_with_speed(w, 10);
        enc.set_repeat(Repeat::Infinite)
            .and_then(|_| enc.encode_frames(frames))
            .map_err(std::io::Error::other)
    })
    .map_err(BlenderError::io(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engines_parse_and_print() {
        for e in [Engine::Cycles, Engine::Eevee, Engine::Workbench] {
            assert_eq!(e.as_str().parse::<Engine>().unwrap(), e);
        }
        assert!("EEVEE".parse::<Engine>().is_ok());
        assert!("luxcore".parse::<Engine>().unwrap_err().contains("cycles"));
    }

    #[test]
    fn inputs_are_run_folders_or_mesh_files() {
        let d = tempfile::tempdir().unwrap();
        let err = mesh_input(d.path()).unwrap_err().to_string();
        assert!(err.contains("not a run folder"), "{err}");
        // A run with latents but no mesh (no surface): the error names the export that makes one.
        std::fs::write(d.path().join("latent.safetensors"), "").unwrap();
        let err = mesh_input(d.path()).unwrap_err().to_string();
        assert!(
            err.contains("the run has no mesh") && err.contains("clipsculpt export"),
            "{err}"
        );
        std::fs::remove_file(d.path().join("latent.safetensors")).unwrap();
        std::fs::write(d.path().join("mesh.obj"), "").unwrap();
        std::fs::write(d.path().join("mesh.ply"), "").unwrap();
        assert_eq!(mesh_input(d.path()).unwrap(), d.path().join("mesh.ply"));
        assert!(mesh_input(&d.path().join("mesh.obj")).is_ok());
        std::fs::write(d.path().join("notes.txt"), "").unwrap();
        assert!(mesh_input(&d.path().join("notes.txt")).is_err());
        assert!(mesh_input(&d.path().join("gone.glb")).is_err());
    }

    /// A stand-in for Blender that fails like Blender does: the preview keeps the log and names the line.
    #[cfg(unix)]
    #[test]
    fn a_failing_blender_leaves_no_outputs_and_keeps_its_log() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("mesh.glb"), "glTF").unwrap();
        let fake = d.path().join("blender");
        std::fs::write(
            &fake,
            "#!/bin/sh\necho 'EGL Error (0x3001): noise'\necho 'clipsculpt preview: broken mesh' >&2\nexit 1\n",
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let err = preview(&fake, d.path(), d.path(), &PreviewSettings::default()).unwrap_err();
        let msg = err.to_string();
        assert!(msg.contains("clipsculpt preview: broken mesh"), "{msg}");
        assert!(d.path().join(LOG_FILE).is_file());
        let mut names: Vec<String> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names, ["blender", LOG_FILE, "mesh.glb"]);
        // Exit 0 without the promised files is a failure too.
        std::fs::write(&fake, "#!/bin/sh\nexit 0\n").unwrap();
        let msg = preview(&fake, d.path(), d.path(), &PreviewSettings::default())
            .unwrap_err()
            .to_string();
        assert!(msg.contains("without writing blender_preview.png"), "{msg}");
    }
}
