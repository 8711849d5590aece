//! Edits (`clipsculpt edit`): a saved latent continued toward a new prompt, by one of two methods.
//!
//! - [`EditMethod::Renoise`]: re-noise the latent ([`super::renoise`], [`DEFAULT_STRENGTH`] unless told) and sample
//!   back conditioned on the new prompt, guided as the run's settings say.
//! - [`EditMethod::Latent`]: keep the latent as the start (strength 0) and run the latent stage (`--guide latent`:
//!   CLIP guidance of the latent through the decoder) toward the new prompt.
//!
//! Which one keeps more of the original while reaching the new prompt was measured on the toy world
//! (`docs/workflows.md`); [`EditMethod::DEFAULT`] is the one that did.

use serde::{Deserialize, Serialize};

use super::renoise::DEFAULT_STRENGTH;
use super::settings::RunSettings;
use crate::guide::GuideMode;

/// How `edit` continues from the saved latent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum EditMethod {
    /// Re-noise, then sample with the new prompt.
    Renoise,
    /// CLIP guidance of the latent itself toward the new prompt.
    Latent,
}

impl EditMethod {
    /// The method `edit` uses unless told (see the module docs).
    pub const DEFAULT: EditMethod = EditMethod::Renoise;

    /// The settings and the strength of an edit by this method from a run's settings `s` (`strength`: the one
    /// asked for, used by [`EditMethod::Renoise`]).
    pub fn plan(self, s: &RunSettings, strength: Option<f64>) -> (RunSettings, f64) {
        match self {
            Self::Renoise => (s.clone(), strength.unwrap_or(DEFAULT_STRENGTH)),
            Self::Latent => {
                let mut s = s.clone();
                s.mode = GuideMode::Latent;
                (s, 0.0)
            }
        }
    }
}

impl std::str::FromStr for EditMethod {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "renoise" => Ok(Self::Renoise),
            "latent" => Ok(Self::Latent),
            other => Err(format!("unknown edit method {other:?}: renoise or latent")),
        }
    }
}

impl std::fmt::Display for EditMethod {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Renoise => "renoise",
            Self::Latent => "latent",
        })
    }
}
