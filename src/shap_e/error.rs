//! Errors at the Shap-E loading boundary: configs, weight files and latents.

use std::fmt;
use std::path::PathBuf;

/// One problem with one tensor of a weight file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TensorProblem {
    /// The model needs `key` with this shape; the file does not have it.
    Missing {
        /// Checkpoint key.
        key: String,
        /// Expected shape.
        expected: Vec<usize>,
    },
    /// The file has `key` with another shape.
    Shape {
        /// Checkpoint key.
        key: String,
        /// Expected shape.
        expected: Vec<usize>,
        /// Shape in the file.
        found: Vec<usize>,
    },
}

impl fmt::Display for TensorProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Missing { key, expected } => write!(f, "missing {key} (expected {expected:?})"),
            Self::Shape {
                key,
                expected,
                found,
            } => write!(f, "{key}: expected {expected:?}, found {found:?}"),
        }
    }
}

/// Loading a Shap-E component failed.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// A file could not be read or written.
    #[error("cannot access {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A config file is not valid JSON for its class.
    #[error("invalid config {path}: {source}")]
    Config {
        /// The file.
        path: PathBuf,
        /// The serde message (names the field and the accepted values).
        source: serde_json::Error,
    },
    /// A config was written for another class (e.g. the prior loader pointed at `text_encoder/`).
    #[error(
        "expected {expected}, found {found} in {path}; point the loader at the right sub-folder"
    )]
    WrongClass {
        /// The file.
        path: PathBuf,
        /// The class we need.
        expected: &'static str,
        /// The class in the file.
        found: String,
    },
    /// A config value this port does not implement.
    #[error("unsupported config {path}: {reason}")]
    Unsupported {
        /// The file.
        path: PathBuf,
        /// What and which values are accepted.
        reason: String,
    },
    /// No weight file was found in a component folder.
    #[error("no weights in {dir}: tried {}; download the component or convert the .bin", tried.join(", "))]
    NoWeights {
        /// The folder.
        dir: PathBuf,
        /// File names tried, in order.
        tried: Vec<String>,
    },
    /// A weight file is unreadable (truncated, not safetensors/pickle).
    #[error("cannot read weights {path}: {source}")]
    Weights {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: candle_core::Error,
    },
    /// Tensors are missing or mis-shaped; all of them are listed.
    #[error("{} tensor problem(s) in {path} for this config:\n  {}", problems.len(),
        problems.iter().map(|p| p.to_string()).collect::<Vec<_>>().join("\n  "))]
    Tensors {
        /// The file.
        path: PathBuf,
        /// Every problem found.
        problems: Vec<TensorProblem>,
    },
    /// A latent file does not hold a `latent` tensor of a usable shape.
    #[error("invalid latent file {path}: {reason}")]
    Latent {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Building the model from checked tensors failed (a bug if the checks passed).
    #[error("building the model from {path} failed: {source}")]
    Build {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: candle_core::Error,
    },
}
