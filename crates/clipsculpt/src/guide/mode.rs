//! Where CLIP guidance acts: inside the prior's sampler, on the finished latent, both, through the
//! sampler's last steps end to end, or nowhere.

use std::fmt;
use std::str::FromStr;

/// The guidance stages a run uses (`--guide`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GuideMode {
    /// Plain Shap-E: the prior's sample, unguided.
    Off,
    /// Guided sampling through the prior ([`super::sampling`]).
    Sampling,
    /// Optimization of the finished latent through the decoder ([`super::optimize()`]).
    Latent,
    /// Guided sampling, then the latent optimization from its result.
    Both,
    /// End-to-end guidance: the state N sampler steps before the end (or the conditioning) optimized
    /// through those steps ([`super::end_to_end`]).
    EndToEnd,
}

impl GuideMode {
    /// Whether the sampler is guided.
    pub(crate) fn guides_sampling(self) -> bool {
        matches!(self, Self::Sampling | Self::Both)
    }

    /// Whether the finished latent is optimized.
    pub(crate) fn optimizes_latent(self) -> bool {
        matches!(self, Self::Latent | Self::Both)
    }
}

impl FromStr for GuideMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" | "none" => Ok(Self::Off),
            "sampling" => Ok(Self::Sampling),
            "latent" => Ok(Self::Latent),
            "both" => Ok(Self::Both),
            "end-to-end" | "e2e" => Ok(Self::EndToEnd),
            _ => Err(format!(
                "unknown guidance mode {s:?} (sampling, latent, both, end-to-end, off)"
            )),
        }
    }
}

impl fmt::Display for GuideMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Off => "off",
            Self::Sampling => "sampling",
            Self::Latent => "latent",
            Self::Both => "both",
            Self::EndToEnd => "end-to-end",
        })
    }
}
