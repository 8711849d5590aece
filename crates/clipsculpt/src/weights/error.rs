//! Why a model folder, config, weight file or latent could not be loaded (every architecture).

use std::path::PathBuf;

use super::problem::{ProblemList, TensorProblem};

/// Why a model component could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The directory has no `config.json`.
    #[error("no config.json in {dir}: point at a model directory (config.json + weights), or fetch one with `clipsculpt download`")]
    MissingConfig {
        /// The directory that was searched.
        dir: PathBuf,
    },
    /// A file could not be read or written.
    #[error("cannot access {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A file could not be written. Shows only the OS error: the writer's caller names the file
    /// once, in its own context ("writing X").
    #[error("{source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// A config file is not valid JSON or has a bad value.
    #[error("invalid config {path}: {source}")]
    Config {
        /// The config file.
        path: PathBuf,
        /// serde's message (names the field and, for enums, the accepted values).
        source: serde_json::Error,
    },
    /// A config describes another kind of model (e.g. the prior loader pointed at `renderer/`).
    #[error("{path}: expected {expected}, found {found}; point the loader at the right folder")]
    WrongModel {
        /// The config file.
        path: PathBuf,
        /// What the loader needs.
        expected: &'static str,
        /// What the file holds.
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
    /// No weight file was found in a folder.
    #[error("no weights in {dir}: tried {}; download the model's weights", tried.join(", "))]
    MissingWeights {
        /// The folder that was searched.
        dir: PathBuf,
        /// File names tried, in order.
        tried: Vec<String>,
    },
    /// The weights file is shorter than its header says.
    #[error("truncated weights file {path}: expected {expected} bytes, found {actual}; the download was probably interrupted, fetch it again")]
    Truncated {
        /// The weights file.
        path: PathBuf,
        /// Size implied by the safetensors header.
        expected: u64,
        /// Size on disk.
        actual: u64,
    },
    /// A tensor holds NaN or infinite values.
    #[error("weights file {path}: tensor {tensor} holds {count} NaN or infinite value(s) (first at element {first}); the file is corrupt: download or export it again")]
    NonFinite {
        /// The weights file.
        path: PathBuf,
        /// The tensor.
        tensor: String,
        /// How many values are not finite.
        count: usize,
        /// Element index of the first.
        first: usize,
    },
    /// The weights file is not a valid safetensors file.
    #[error("invalid safetensors file {path}: {reason}")]
    Corrupt {
        /// The weights file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A weight file is unreadable (not safetensors or a pickle, or a tensor cannot be read).
    #[error("cannot read weights {path}: {source}")]
    Weights {
        /// The file.
        path: PathBuf,
        /// candle's error.
        source: candle_core::Error,
    },
    /// Tensors expected by the config are missing or have the wrong shape or dtype.
    #[error("{path} does not match its config ({} tensor problem(s)):{}", problems.len(), ProblemList(problems))]
    Tensors {
        /// The weights file.
        path: PathBuf,
        /// Every problem found, in load order.
        problems: Vec<TensorProblem>,
    },
    /// The tokenizer files could not be loaded.
    #[error("cannot load the tokenizer from {dir}: {reason}")]
    Tokenizer {
        /// The model directory.
        dir: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// A latent file does not hold a `latent` tensor of a usable shape.
    #[error("invalid latent file {path}: {reason}")]
    Latent {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Building the model failed after validation (a bug or an inconsistent config).
    #[error("cannot build the model from {path}: {source}")]
    Build {
        /// The weights or config file.
        path: PathBuf,
        /// candle's error.
        source: candle_core::Error,
    },
}
