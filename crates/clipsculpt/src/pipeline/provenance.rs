//! What an asset says about itself: the prompt, seed, models with their weights' SHA-256, the
//! settings and the latent's SHA-256, stored in its GLB's `asset.extras.clipsculpt`. The record
//! is a settings file ([`super::RunSettings::read`]): `generate --settings mesh.glb` runs it again.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context as _, Result};
use candle_core::{DType, Tensor};
use serde::{Deserialize, Serialize};

use crate::atomic::write_atomic;
use crate::mesh::glb_extras;
use crate::mesh::Iso;
use crate::weights::digest::sha256_hex;

/// The key under `asset.extras` that holds the record.
pub const EXTRAS_KEY: &str = "clipsculpt";

/// A GLB's provenance record (`asset.extras.clipsculpt`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Provenance {
    /// The clipsculpt version that made it.
    pub version: String,
    /// The prompt.
    pub prompt: String,
    /// The seed (also in `settings`).
    pub seed: u64,
    /// SHA-256 of every weight file the run loaded, by role and path.
    pub weights: BTreeMap<String, String>,
    /// The run's settings as `report.json` records them (readable by `--settings`).
    pub settings: serde_json::Value,
    /// SHA-256 of the exported latent ([`latent_sha256`]).
    pub latent_sha256: String,
    /// The iso level the mesh was extracted at and how it was chosen.
    pub iso: Iso,
    /// For `vary` and `edit`: the command and its parents (`report.json`'s lineage); null otherwise.
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub lineage: serde_json::Value,
}

impl Provenance {
    /// Writes this record into the GLB at `path` (rewritten atomically, its mesh unchanged).
    pub fn stamp(&self, path: &Path) -> Result<()> {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let extras = serde_json::json!({ EXTRAS_KEY: self });
        let stamped = glb_extras::with_extras(&bytes, extras)
            .with_context(|| format!("stamping {}", path.display()))?;
        write_atomic(path, &stamped).with_context(|| format!("writing {}", path.display()))
    }

    /// The record of the GLB at `path`; an error when it is not a GLB or has none.
    pub fn read(path: &Path) -> Result<Self> {
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        Self::from_value(record(&bytes)?)
            .with_context(|| format!("the provenance record of {}", path.display()))
    }

    /// The record in a `asset.extras.clipsculpt` value.
    pub fn from_value(value: serde_json::Value) -> Result<Self> {
        Ok(serde_json::from_value(value)?)
    }

    /// The record as lines for `clipsculpt info`: prompt, seed, version, latent, iso level, each
    /// weight file, then the settings as JSON.
    pub fn describe(&self) -> String {
        let mut lines = vec![
            format!("prompt: {:?}", self.prompt),
            format!("seed: {}", self.seed),
            format!("clipsculpt: {}", self.version),
            format!("latent sha256: {}", self.latent_sha256),
            format!("iso level: {} ({})", self.iso.level, self.iso.rule),
            "weights (sha256):".to_string(),
        ];
        lines.extend(self.weights.iter().map(|(f, h)| format!("  {f}: {h}")));
        if let Some(command) = self.lineage["command"].as_str() {
            lines.push(format!("made by: {command}, from:"));
            for p in self.lineage["parents"].as_array().into_iter().flatten() {
                let prompt = p["prompt"].as_str().unwrap_or("(no prompt)");
                let hash = p["latent_sha256"].as_str().unwrap_or("?");
                lines.push(format!("  {prompt:?}: latent sha256 {hash}"));
            }
        }
        let settings = serde_json::to_string_pretty(&self.settings).unwrap_or_default();
        lines.push(format!("settings: {settings}"));
        lines.join("\n")
    }
}

/// The raw `asset.extras.clipsculpt` value of the GLB `bytes`.
pub(crate) fn record(bytes: &[u8]) -> Result<serde_json::Value> {
    glb_extras::read_extras(bytes)?
        .and_then(|mut e| e.get_mut(EXTRAS_KEY).map(serde_json::Value::take))
        .context("the GLB has no clipsculpt record (asset.extras.clipsculpt): it was not written by clipsculpt generate")
}

/// SHA-256 of `latent`'s values as little-endian f32, row-major: equal hashes, equal latents bit for bit.
pub fn latent_sha256(latent: &Tensor) -> candle_core::Result<String> {
    let values = latent
        .to_dtype(DType::F32)?
        .flatten_all()?
        .to_vec1::<f32>()?;
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    Ok(sha256_hex(&bytes))
}
