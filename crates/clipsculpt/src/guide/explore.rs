//! The exploration mode: which candidates besides the prior's sample may start the optimization
//! ([`super::start`]).

use std::fmt;
use std::str::FromStr;

/// Which candidates exploration considers besides the prior's sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Explore {
    /// Start from the prior's sample.
    Off,
    /// Also the bank (the prior sampled for every negative prompt).
    Bank,
    /// Also the bank's consensus completions.
    Analogies,
}

impl FromStr for Explore {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(Self::Off),
            "bank" => Ok(Self::Bank),
            "analogies" => Ok(Self::Analogies),
            _ => Err(format!("unknown exploration {s:?} (off, bank, analogies)")),
        }
    }
}

impl fmt::Display for Explore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Off => "off",
            Self::Bank => "bank",
            Self::Analogies => "analogies",
        })
    }
}
