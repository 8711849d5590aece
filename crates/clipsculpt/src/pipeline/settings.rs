//! The settings of one `generate` item: the one source of every default, their validation, and
//! settings files (a bare settings JSON, a run's `report.json` or its `mesh.glb`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};
use serde::{Deserialize, Serialize};

use crate::autodiff::checkpoint::Policy;
use crate::guide::{
    EndToEndGuidance, GuideMode, GuideSettings, SamplingGuidance, AUTO_RESOLUTION_MAX,
};
use crate::mesh::{glb_extras, AssetOptions, Format};
use crate::models::ModelSpec;

/// Which models a run uses, as their specs: `toy` (embedded), a hub id, or a folder.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ModelChoice {
    /// The Shap-E pipeline (prior, its text encoder, decoder).
    #[serde(with = "spec_text")]
    pub model: ModelSpec,
    /// The scoring CLIP that guides.
    #[serde(with = "spec_text")]
    pub clip: ModelSpec,
    /// A second, held-out CLIP that only scores the result.
    #[serde(with = "opt_spec_text")]
    pub eval_clip: Option<ModelSpec>,
    /// Negative prompts, one per line (default: the scoring CLIP folder's `negatives.txt`).
    pub negatives: Option<PathBuf>,
}

impl Default for ModelChoice {
    fn default() -> Self {
        Self {
            model: ModelSpec::Toy,
            clip: ModelSpec::Toy,
            eval_clip: None,
            negatives: None,
        }
    }
}

/// Settings of one `generate` item. [`Default`] is exactly what `clipsculpt generate PROMPT` runs;
/// `report.json` records them (the guidance settings flattened), and
/// [`RunSettings::read`] reads them back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct RunSettings {
    /// The models (loaded once by the caller: [`super::Models::load_choice`]).
    pub models: ModelChoice,
    /// Seed of every random draw.
    pub seed: u64,
    /// Prior sampling steps.
    pub prior_steps: usize,
    /// Prior guidance scale; `None`: the model's recommendation ([`crate::shap_e::SamplingDefaults`]).
    pub guidance_scale: Option<f64>,
    /// Unguided samples from this many noises, the run going on from the one the scorer rates
    /// highest on the held-aside views (1: the seed's noise, no choice).
    pub candidates: usize,
    /// Which guidance stages run.
    pub mode: GuideMode,
    /// Guided sampling through the prior (used when [`GuideMode::guides_sampling`]).
    pub sampling: SamplingGuidance,
    /// End-to-end guidance through the sampler's last steps (used by [`GuideMode::EndToEnd`]).
    pub end_to_end: EndToEndGuidance,
    /// Latent optimization settings (used when [`GuideMode::optimizes_latent`]; the view loss's
    /// views, side and samples are guided sampling's too).
    #[serde(flatten)]
    pub guide: GuideSettings,
    /// Export grid.
    pub grid: usize,
    /// Side of each view in the before/after contact sheets (20 views each).
    pub preview_size: usize,
    /// Output formats.
    pub formats: Vec<Format>,
    /// What the exported mesh becomes: face count, texture, smoothing, height.
    #[serde(flatten)]
    pub asset: AssetOptions,
}

impl Default for RunSettings {
    fn default() -> Self {
        Self {
            models: ModelChoice::default(),
            seed: 0,
            prior_steps: 64,
            guidance_scale: None,
            candidates: 1,
            mode: GuideMode::Sampling,
            sampling: SamplingGuidance::default(),
            end_to_end: EndToEndGuidance::default(),
            guide: GuideSettings::default(),
            grid: 96,
            preview_size: 48,
            formats: Format::DEFAULT.to_vec(),
            asset: AssetOptions::default(),
        }
    }
}

/// A settings file: the settings, and the prompt when the file is a run's `report.json`.
#[derive(Debug, Clone)]
pub struct SettingsFile {
    /// The settings (defaults where the file is silent).
    pub settings: RunSettings,
    /// The prompt the report was made for.
    pub prompt: Option<String>,
    /// The SHA-256 of the weights the recorded run loaded (a report or a GLB's record).
    pub weights: Option<BTreeMap<String, String>>,
}

impl RunSettings {
    /// Reads a settings JSON (any subset of the fields), a run's `report.json` (its `settings`
    /// section and prompt) or a GLB that `generate` wrote (its provenance record,
    /// [`super::provenance`]), and validates it.
    pub fn read(path: &Path) -> anyhow::Result<SettingsFile> {
        let bytes = std::fs::read(path)
            .with_context(|| format!("reading the settings file {}", path.display()))?;
        let parse = || -> anyhow::Result<SettingsFile> {
            let mut value: serde_json::Value = if glb_extras::is_glb(&bytes) {
                super::provenance::record(&bytes)?
            } else {
                serde_json::from_slice(&bytes)?
            };
            let prompt = value
                .get("prompt")
                .and_then(|p| p.as_str())
                .map(String::from);
            let weights = value
                .pointer("/weights")
                .or_else(|| value.pointer("/models/weights"))
                .map(|w| serde_json::from_value(w.clone()))
                .transpose()?;
            if let Some(section) = value.get_mut("settings").map(serde_json::Value::take) {
                value = section;
            }
            check_names(&value)?;
            let settings: RunSettings = serde_json::from_value(value)?;
            settings.validate()?;
            Ok(SettingsFile {
                settings,
                prompt,
                weights,
            })
        };
        parse().with_context(|| format!("the settings file {} is not usable", path.display()))
    }

    /// Checks every value a user can set; the error names the setting.
    pub fn validate(&self) -> anyhow::Result<()> {
        let g = &self.guide;
        for (name, side) in [
            ("resolution", g.resolution),
            ("eval_resolution", g.eval_resolution),
        ] {
            if side != 0 && !(4..=1024).contains(&side) {
                bail!("{name} {side} is out of range (4..=1024, or 0 for automatic)");
            }
        }
        if g.views == 0 || !(8..=512).contains(&self.grid) {
            bail!("views must be at least 1 and grid within 8..=512");
        }
        self.asset.validate().map_err(anyhow::Error::msg)?;
        if self.asset.texture.is_some() && !self.formats.iter().any(|f| f.carries_texture()) {
            bail!("texture needs a mesh format that carries one (glb or obj) among the formats");
        }
        if !(8..=512).contains(&self.preview_size) {
            bail!("preview_size must be within 8..=512");
        }
        if self.prior_steps == 0 {
            bail!("prior_steps must be at least 1");
        }
        let positive = |name: &str, v: f64| -> anyhow::Result<()> {
            if !(v.is_finite() && v > 0.0) {
                bail!("{name} must be a positive number");
            }
            Ok(())
        };
        positive("lr", g.lr)?;
        let non_negative = |name: &str, v: f64| -> anyhow::Result<()> {
            if !(v.is_finite() && v >= 0.0) {
                bail!("{name} must be a number ≥ 0");
            }
            Ok(())
        };
        non_negative("contrast", g.contrast)?;
        non_negative("keep_margin", g.keep_margin.into())?;
        non_negative("sampling.scale", self.sampling.scale)?;
        non_negative("end_to_end.lr", self.end_to_end.lr)?;
        if let Some(scale) = self.guidance_scale {
            non_negative("guidance_scale", scale)?;
        }
        if g.explore_prior_steps == 0 {
            bail!("explore_prior_steps must be at least 1");
        }
        if !(1..=64).contains(&self.candidates) {
            bail!("candidates must be within 1..=64 (1: the seed's own noise)");
        }
        let s = &self.sampling;
        if !(s.sigma_min > 0.0 && s.sigma_max >= s.sigma_min && s.sigma_max.is_finite()) {
            bail!("the guided σ window needs 0 < sigma_min ≤ sigma_max");
        }
        if s.recurrence.times == 0 {
            bail!("sampling.recurrence.times must be at least 1 (1 takes each step once)");
        }
        if self.end_to_end.steps == 0 {
            bail!("end_to_end.steps must be at least 1 (it is capped at prior_steps)");
        }
        if matches!(self.end_to_end.step_policy, Policy::Budget(_)) {
            bail!("end_to_end.step_policy takes none, blocks, sqrt, every:K or last:N (a budget applies to the prior's blocks)");
        }
        Ok(())
    }

    /// Fits the run into `budget` bytes: half for the prior's blocks, half for a decoder chunk
    /// and the CLIP's blocks, the chunk sized from what one ray keeps while it is recomputed.
    /// Refuses a budget too small for a 16-ray chunk.
    pub fn fit_memory_budget(&mut self, budget: usize) -> anyhow::Result<()> {
        let samples = self.guide.samples;
        // Per ray while a chunk is recomputed: its samples × the MLP's stored activations and
        // backward temporaries (≈ 8 layers × 4 tensors of width ≤ 256, f32).
        let per_ray = (samples.0 + samples.1) * 8 * 4 * 256 * 4;
        let half = budget / 2;
        let chunk = half / per_ray;
        if chunk < 16 {
            bail!(
                "a memory budget of {budget} bytes is too small: a 16-ray decoder chunk alone needs about {} bytes",
                2 * 16 * per_ray
            );
        }
        self.guide.chunk_rays = Some(chunk.min(self.rays_per_step()));
        self.guide.clip_policy = Policy::Budget(half);
        self.sampling.prior_policy = Policy::Budget(half);
        Ok(())
    }

    /// Sets the checkpoint policy of the decoder chunks and the CLIP's blocks (`none` renders
    /// every ray in one graph).
    pub fn set_checkpoint(&mut self, policy: Policy) {
        self.guide.clip_policy = policy;
        self.guide.chunk_rays = match policy {
            Policy::None => None,
            _ => Some(1024.min(self.rays_per_step())),
        };
    }

    /// Rays rendered per guided step at the largest automatic side (or the set resolution).
    fn rays_per_step(&self) -> usize {
        let side = match self.guide.resolution {
            0 => AUTO_RESOLUTION_MAX,
            r => r,
        };
        self.guide.views * side * side
    }

    /// Settings for evaluating latent optimization without writing files: the defaults with the
    /// latent stage, a 64³ mesh grid, 64 px previews and no output formats.
    pub fn for_evaluation(guide: GuideSettings) -> Self {
        Self {
            mode: GuideMode::Latent,
            guide,
            grid: 64,
            preview_size: 64,
            formats: vec![],
            ..Self::default()
        }
    }
}

/// Refuses a top-level name that no setting has (a typo would otherwise be ignored); `device`
/// and `dtype`, which a report records beside the settings, are allowed.
fn check_names(value: &serde_json::Value) -> anyhow::Result<()> {
    let known = serde_json::to_value(RunSettings::default())?;
    if let (Some(given), Some(known)) = (value.as_object(), known.as_object()) {
        let unknown: Vec<&str> = given
            .keys()
            .map(String::as_str)
            .filter(|k| !known.contains_key(*k) && !["device", "dtype"].contains(k))
            .collect();
        if !unknown.is_empty() {
            bail!(
                "unknown setting {} (the names are those of report.json's settings)",
                unknown.join(", ")
            );
        }
    }
    Ok(())
}

/// A [`ModelSpec`] as its command-line text.
mod spec_text {
    use super::ModelSpec;

    pub(super) fn serialize<S: serde::Serializer>(
        spec: &ModelSpec,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        s.collect_str(spec)
    }

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<ModelSpec, D::Error> {
        let text: String = serde::Deserialize::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// An optional [`ModelSpec`] as its command-line text, or null.
mod opt_spec_text {
    use super::ModelSpec;

    pub(super) fn serialize<S: serde::Serializer>(
        spec: &Option<ModelSpec>,
        s: S,
    ) -> Result<S::Ok, S::Error> {
        match spec {
            Some(spec) => s.collect_str(spec),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<ModelSpec>, D::Error> {
        let text: Option<String> = serde::Deserialize::deserialize(d)?;
        text.map(|t| t.parse().map_err(serde::de::Error::custom))
            .transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Settings survive a JSON round trip, a partial file takes the defaults, and a report's
    /// `settings` section is read with its prompt.
    #[test]
    fn settings_files_round_trip() -> anyhow::Result<()> {
        let tmp = tempfile::tempdir()?;
        let mut s = RunSettings {
            seed: 7,
            mode: GuideMode::EndToEnd,
            ..RunSettings::default()
        };
        s.fit_memory_budget(1 << 30)?;
        let bare = tmp.path().join("s.json");
        std::fs::write(&bare, serde_json::to_string(&s)?)?;
        assert_eq!(RunSettings::read(&bare)?.settings, s);
        let partial = tmp.path().join("p.json");
        std::fs::write(&partial, r#"{"seed": 3}"#)?;
        let read = RunSettings::read(&partial)?;
        assert_eq!(
            read.settings,
            RunSettings {
                seed: 3,
                ..RunSettings::default()
            }
        );
        assert_eq!(read.prompt, None);
        let report = tmp.path().join("report.json");
        let r = serde_json::json!({"prompt": "a red cube", "settings": s});
        std::fs::write(&report, r.to_string())?;
        let read = RunSettings::read(&report)?;
        assert_eq!(
            (read.settings, read.prompt.as_deref()),
            (s, Some("a red cube"))
        );
        Ok(())
    }

    /// A bad value or an unknown field is refused with the setting's name.
    #[test]
    fn bad_settings_are_refused_by_name() {
        let tmp = tempfile::tempdir().unwrap();
        for (text, names) in [
            (r#"{"grid": 4}"#, "grid"),
            (r#"{"lr": -1}"#, "lr"),
            (r#"{"candidates": 0}"#, "candidates"),
            (r#"{"seed": "x"}"#, "seed"),
            (r#"{"sede": 1}"#, "unknown setting sede"),
            (r#"{"faces": 3}"#, "faces 3"),
            (r#"{"texture": 100000}"#, "texture 100000"),
            (r#"{"height": -1}"#, "height -1"),
            (
                r#"{"texture": 512, "formats": ["ply", "png"]}"#,
                "glb or obj",
            ),
        ] {
            let p = tmp.path().join("bad.json");
            std::fs::write(&p, text).unwrap();
            let e = format!("{:#}", RunSettings::read(&p).unwrap_err());
            assert!(
                e.contains(names) || e.contains("invalid type"),
                "{text}: {e}"
            );
        }
    }
}
