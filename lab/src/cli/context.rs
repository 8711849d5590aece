//! What the lab's commands share: the device, its dtype, hub access and loading models.

use std::path::Path;

use anyhow::Context as _;
use candle_core::Device;
use clipsculpt::atomic::write_atomic;
use clipsculpt::device::{DeviceSpec, Precision};
use clipsculpt::models::HubOptions;
use clipsculpt::pipeline::{ModelChoice, Models};

/// The global options of a command.
pub(crate) struct Context {
    /// `--device`.
    pub(crate) device: DeviceSpec,
    /// `--dtype`, when given.
    pub(crate) dtype: Option<Precision>,
    /// `-q`: no progress bars or summaries.
    pub(crate) quiet: bool,
}

impl Context {
    /// Opens the compute device.
    pub(crate) fn open_device(&self) -> anyhow::Result<Device> {
        Ok(self.device.open()?)
    }

    /// Loads the models `choice` names (the lab never downloads: hub ids must be in the cache).
    pub(crate) fn load_models(
        &self,
        choice: &ModelChoice,
        device: &Device,
    ) -> anyhow::Result<Models> {
        let precision = self.dtype.unwrap_or_else(|| Precision::default_for(device));
        let hub = HubOptions {
            offline: true,
            progress: false,
        };
        Models::load_choice(choice, device, precision, &hub)
    }
}

/// Creates `dir` and proves it writable before any work starts.
pub(crate) fn ensure_writable(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the output folder {}", dir.display()))?;
    let probe = dir.join(".clipsculpt-write-test");
    write_atomic(&probe, b"ok")
        .with_context(|| format!("the output folder {} is not writable", dir.display()))?;
    let _ = std::fs::remove_file(probe);
    Ok(())
}
