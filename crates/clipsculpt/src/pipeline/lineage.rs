//! Where a run came from when it was made from saved runs (`vary`, `edit`, `blend`): its parents (their latents'
//! hashes, prompts and settings), recorded in `report.json`, and reading a parent from a run folder or a latent file.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};
use candle_core::{Device, Tensor};
use serde::Serialize;

use super::provenance::latent_sha256;
use crate::shap_e::load_latent;

/// The command and parents of a run made from saved runs.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Lineage {
    /// The command (`vary`, `edit`, `blend`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub command: Option<String>,
    /// The re-noising strength (`vary`, `edit`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub strength: Option<f64>,
    /// The interpolation position between the two parents (`blend`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub t: Option<f64>,
    /// The runs it was made from.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub parents: Vec<Parent>,
}

/// One saved run a run was made from.
#[derive(Debug, Clone, Serialize)]
pub struct Parent {
    /// The latent file, as given.
    pub source: String,
    /// SHA-256 of the latent's values (f32, little-endian, row-major), independent of the file's layout.
    pub latent_sha256: String,
    /// Its prompt, when its folder has a `report.json`.
    pub prompt: Option<String>,
    /// Its settings (its report's `settings`), when its folder has a `report.json`.
    pub settings: Option<serde_json::Value>,
}

/// A parent read from disk: its latent and its record.
pub struct LoadedParent {
    /// The latent.
    pub latent: Tensor,
    /// The record for `report.json`.
    pub parent: Parent,
    /// Its `report.json`, when it has one.
    pub report: Option<PathBuf>,
}

/// Reads `path`: a run folder (its `latent.safetensors` and `report.json`) or a latent file (with the `report.json`
/// beside it, when there is one). A missing path, a missing latent or an unreadable report is an error.
pub fn load_parent(path: &Path, device: &Device) -> Result<LoadedParent> {
    let (latent_file, folder) = if path.is_dir() {
        (path.join("latent.safetensors"), path.to_path_buf())
    } else if path.is_file() {
        let folder = path.parent().map(Path::to_path_buf).unwrap_or_default();
        (path.to_path_buf(), folder)
    } else {
        bail!(
            "{}: no such run folder or latent file (give a run folder such as outputs/a-red-cube-0, or its \
             latent.safetensors)",
            path.display()
        );
    };
    if !latent_file.is_file() {
        bail!(
            "{}: no latent.safetensors in it; is it a run folder of generate, vary or edit?",
            path.display()
        );
    }
    let latent = load_latent(&latent_file, device)?;
    let report_file = folder.join("report.json");
    let report = match report_file.is_file() {
        true => Some(read_report(&report_file)?),
        false => None,
    };
    let parent = Parent {
        source: latent_file.display().to_string(),
        latent_sha256: latent_sha256(&latent)?,
        prompt: report
            .as_ref()
            .and_then(|r| r["prompt"].as_str().map(String::from)),
        settings: report.as_ref().map(|r| r["settings"].clone()),
    };
    Ok(LoadedParent {
        latent,
        parent,
        report: report.map(|_| report_file),
    })
}

/// A run's `report.json` as JSON; an unreadable one is an error that names it.
fn read_report(path: &Path) -> Result<serde_json::Value> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .with_context(|| format!("{} is not a readable report (corrupt JSON)", path.display()))?;
    if !value.is_object() || !value["settings"].is_object() {
        bail!(
            "{} is not a run's report (no settings section)",
            path.display()
        );
    }
    Ok(value)
}
