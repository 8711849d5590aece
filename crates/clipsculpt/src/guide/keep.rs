//! The keep guard of the sampler's guided modes (guided sampling and end to end): a guided sample
//! is exported only when it beats the unguided sample from the same noise on the held-aside views
//! by the keep margin ([`super::GuideSettings::keep_margin`]); otherwise the unguided one is.

use std::fmt;
use std::str::FromStr;

/// Which sample the sampler's guided modes export.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SamplerExport {
    /// The guided sample only when it beats the unguided one by the keep margin.
    #[default]
    Guarded,
    /// Always the guided sample.
    Guided,
}

impl FromStr for SamplerExport {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "guarded" => Ok(Self::Guarded),
            "guided" => Ok(Self::Guided),
            _ => Err(format!("unknown sampler export {s:?} (guarded, guided)")),
        }
    }
}

impl fmt::Display for SamplerExport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Guarded => "guarded",
            Self::Guided => "guided",
        })
    }
}

/// What the keep guard compared and chose.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Kept {
    /// Held-aside scores of the unguided sample and of the guided one.
    pub held_aside: [f32; 2],
    /// Whether the guided sample was exported; otherwise it did not beat the unguided one by the
    /// keep margin, and the unguided sample was.
    pub exported_guided: bool,
}

impl Kept {
    /// The guard's choice between the unguided sample, scoring `unguided`, and the guided one,
    /// scoring `guided`, at keep margin `margin`.
    pub(crate) fn choose(unguided: f32, guided: f32, margin: f32) -> Self {
        Self {
            held_aside: [unguided, guided],
            exported_guided: guided >= unguided + margin,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_guided_sample_is_kept_only_by_the_margin() {
        assert!(Kept::choose(0.5, 0.55, 0.05).exported_guided);
        assert!(!Kept::choose(0.5, 0.549, 0.05).exported_guided);
        assert!(!Kept::choose(0.5, f32::NAN, 0.0).exported_guided);
    }

    #[test]
    fn exports_parse_and_print_back() {
        for e in [SamplerExport::Guarded, SamplerExport::Guided] {
            assert_eq!(e.to_string().parse::<SamplerExport>(), Ok(e));
        }
        assert!("always".parse::<SamplerExport>().is_err());
    }
}
