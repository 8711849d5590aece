//! What every command shares: the device, hub options, where the embedded models are, loading the
//! models named on the command line, and output folders.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use candle_core::Device;

use clipsculpt::atomic::{write_atomic, OutputDir};
use clipsculpt::batch::slug;
use clipsculpt::device::{DeviceSpec, Precision};
use clipsculpt::models::{HubOptions, ModelKind, ModelSpec};
use clipsculpt::pipeline::{ModelChoice, Models};

/// The global options of a run and the environment, read once.
pub(super) struct Context {
    /// `--device`.
    pub(crate) device: DeviceSpec,
    /// `--dtype`, when given.
    pub(crate) dtype: Option<Precision>,
    /// `-q`: no progress bars or summaries.
    pub(crate) quiet: bool,
    /// Hub access (`HF_HUB_OFFLINE`, progress bars).
    pub(crate) hub: HubOptions,
}

impl Context {
    /// Reads `HF_HUB_OFFLINE` from the environment.
    pub(crate) fn new(device: DeviceSpec, dtype: Option<Precision>, quiet: bool) -> Self {
        let offline = std::env::var("HF_HUB_OFFLINE")
            .map(|v| {
                matches!(
                    v.trim().to_ascii_lowercase().as_str(),
                    "1" | "true" | "yes" | "on"
                )
            })
            .unwrap_or(false);
        Self {
            device,
            dtype,
            quiet,
            hub: HubOptions {
                offline,
                progress: !quiet,
            },
        }
    }

    /// Opens the compute device.
    pub(crate) fn open_device(&self) -> anyhow::Result<Device> {
        Ok(self.device.open()?)
    }

    /// The frozen networks' weight dtype on `device`: `--dtype`, else the device's default.
    pub(crate) fn precision(&self, device: &Device) -> Precision {
        self.dtype.unwrap_or_else(|| Precision::default_for(device))
    }

    /// A local folder holding the files of `spec` (downloaded unless offline).
    pub(crate) fn resolve(&self, spec: &ModelSpec, kind: ModelKind) -> anyhow::Result<PathBuf> {
        Ok(clipsculpt::models::resolve(spec, kind, &self.hub)?)
    }

    /// Loads the models `choice` names.
    pub(crate) fn load_models(
        &self,
        choice: &ModelChoice,
        device: &Device,
    ) -> anyhow::Result<Models> {
        Models::load_choice(choice, device, self.precision(device), &self.hub)
    }
}

/// `outputs/<slug>-<seed>`, the default output folder of one prompt.
pub(super) fn default_out(prompt: &str, seed: u64) -> PathBuf {
    PathBuf::from("outputs").join(format!("{}-{seed}", slug(prompt)))
}

/// Runs `f` on the private folder of `dir`; its errors name the final folder (`--out`), which is
/// where the user looks, not the private one (removed on failure).
pub(super) fn in_private<T>(
    dir: &OutputDir,
    f: impl FnOnce(&Path) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    f(dir.work()).map_err(|e| {
        let (work, target) = (dir.work().to_string_lossy(), dir.target().to_string_lossy());
        anyhow::Error::msg(crate::error_line(&e).replace(work.as_ref(), target.as_ref()))
    })
}

/// Creates `dir` and proves it writable before any work starts.
pub(super) fn ensure_writable(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the output folder {}", dir.display()))?;
    let probe = dir.join(".clipsculpt-write-test");
    write_atomic(&probe, b"ok")
        .with_context(|| format!("the output folder {} is not writable", dir.display()))?;
    let _ = std::fs::remove_file(probe);
    Ok(())
}
