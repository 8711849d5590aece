//! `clipsculpt preview RUN --blender`, and `--blender-preview` for `generate` and `batch`: the command-line side
//! of [`clipsculpt::blender`].

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args as ClapArgs;

use crate::context::Context;
use clipsculpt::blender::{self, Engine, Lookup, PreviewSettings};

/// How to render a Blender preview (shared by `preview`, `generate` and `batch`).
#[derive(Debug, Clone, ClapArgs)]
pub(super) struct BlenderArgs {
    /// The Blender executable [default: $BLENDER, else `blender` on PATH].
    #[arg(long)]
    pub(crate) blender_path: Option<PathBuf>,
    /// Blender render engine: cycles (CPU path tracing, works headless), eevee or workbench (fastest, darker).
    #[arg(long, default_value_t = PreviewSettings::default().engine)]
    pub(crate) engine: Engine,
    /// Turntable frames (0 = one still); blender_preview.png is then their contact sheet.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=720))]
    pub(crate) frames: u32,
    /// Side of the Blender render in pixels.
    #[arg(long, default_value_t = PreviewSettings::default().size, value_parser = clap::value_parser!(u32).range(16..=4096))]
    pub(crate) size: u32,
    /// Samples per pixel (cycles, eevee).
    #[arg(long, default_value_t = PreviewSettings::default().samples, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub(crate) samples: u32,
    /// Also save the set-up scene as blender_preview.blend.
    #[arg(long)]
    pub(crate) blend: bool,
    /// Also write the turntable as blender_turntable.gif (needs --frames).
    #[arg(long, requires = "frames")]
    pub(crate) gif: bool,
    /// Stop Blender after this many seconds.
    #[arg(long, default_value_t = PreviewSettings::default().timeout.as_secs())]
    pub(crate) blender_timeout: u64,
}

impl BlenderArgs {
    /// The Blender to run, or the one-line "not found, install it" error.
    pub(crate) fn find(&self) -> anyhow::Result<PathBuf> {
        Ok(Lookup::from_env(self.blender_path.clone()).find()?)
    }

    /// The library's settings.
    pub(crate) fn settings(&self) -> PreviewSettings {
        PreviewSettings {
            engine: self.engine,
            frames: self.frames,
            size: self.size,
            samples: self.samples,
            blend: self.blend,
            mask: false,
            gif: self.gif,
            timeout: Duration::from_secs(self.blender_timeout),
        }
    }
}

/// `--blender-preview`, for `generate` and `batch` (with the preview's default settings).
#[derive(Debug, Clone, ClapArgs)]
pub(super) struct BlenderPreviewArgs {
    /// Also render blender_preview.png of each run in Blender ($BLENDER, else `blender` on PATH);
    /// `clipsculpt preview RUN --blender` has the render's options
    #[arg(long, help_heading = "Blender")]
    pub(crate) blender_preview: bool,
}

impl BlenderPreviewArgs {
    /// The Blender to use when a preview is asked for: found before any work starts, so a missing Blender fails
    /// in a second, not after the run.
    pub(crate) fn find(&self) -> anyhow::Result<Option<PathBuf>> {
        self.blender_preview
            .then(|| Ok(Lookup::from_env(None).find()?))
            .transpose()
    }
}

/// Renders the preview of run folder `dir` with `exe` into `dir`; prints what it wrote unless `quiet`.
pub(super) fn render_run(
    exe: &Path,
    dir: &Path,
    opts: &PreviewSettings,
    quiet: bool,
) -> anyhow::Result<()> {
    // The folder is still the run's private one here: its path would name nothing once the run is in place.
    let report = blender::preview(exe, dir, dir, opts).context("Blender preview")?;
    if !quiet {
        // File names only: `dir` is moved into place after this.
        let names: Vec<String> = report
            .files
            .iter()
            .filter_map(|f| f.file_name())
            .map(|n| n.to_string_lossy().into_owned())
            .collect();
        println!(
            "Blender preview in {:.1} s: {}",
            report.seconds,
            names.join(", ")
        );
    }
    Ok(())
}

/// Render a run (or a mesh file) in Blender: vertex-colour material, camera, soft light, still or turntable.
#[derive(Debug, ClapArgs)]
pub(super) struct Preview {
    /// A run folder (uses its mesh.glb, else mesh.ply, else mesh.obj) or a .glb/.gltf/.ply/.obj file.
    run: PathBuf,
    /// Render with Blender (the only preview renderer for now, so this is the default).
    #[arg(long)]
    blender: bool,
    /// Output folder [default: the run folder, or the mesh file's folder].
    #[arg(long)]
    out: Option<PathBuf>,
    #[command(flatten)]
    opts: BlenderArgs,
}

impl Preview {
    /// Runs the command.
    pub(crate) fn run(self, cx: &Context) -> anyhow::Result<ExitCode> {
        let quiet = cx.quiet;
        let _ = self.blender;
        let exe = self.opts.find()?;
        let out = match self.out {
            Some(o) => o,
            None if self.run.is_dir() => self.run.clone(),
            None => self.run.parent().map(Path::to_path_buf).unwrap_or_default(),
        };
        let report = blender::preview(&exe, &self.run, &out, &self.opts.settings())?;
        if !quiet {
            for f in &report.files {
                println!("{}", f.display());
            }
            println!("({:.1} s in Blender)", report.seconds);
        }
        Ok(ExitCode::from(crate::EXIT_OK))
    }
}
