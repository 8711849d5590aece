//! Errors at the CLIP boundaries: loading a model directory ([`LoadError`]) and tokenizing prompts
//! ([`TokenizeError`]). Model code itself returns `candle_core::Result`.

use std::fmt;
use std::path::PathBuf;

/// Why a CLIP model directory could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The directory has no `config.json`.
    #[error("no config.json in {dir}: point at a CLIP model directory (config.json + model.safetensors), or fetch one with `clipsculpt download`")]
    MissingConfig {
        /// The directory that was searched.
        dir: PathBuf,
    },
    /// A file could not be read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// `config.json` is not valid JSON or has a bad value.
    #[error("invalid config {path}: {source}")]
    Config {
        /// The config file.
        path: PathBuf,
        /// serde's message (names the field and, for enums, the accepted values).
        source: serde_json::Error,
    },
    /// `config.json` describes another kind of model.
    #[error("{path} describes {found}, expected {expected}")]
    WrongModel {
        /// The config file.
        path: PathBuf,
        /// What the loader needs.
        expected: &'static str,
        /// What the file holds (`model_type` / `architectures`).
        found: String,
    },
    /// No weights file was found.
    #[error("no weights in {dir}: tried {tried}; download the model's safetensors weights")]
    MissingWeights {
        /// The directory that was searched.
        dir: PathBuf,
        /// The file names tried, comma-separated.
        tried: String,
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
    /// The weights file is not a valid safetensors file.
    #[error("invalid safetensors file {path}: {reason}")]
    Corrupt {
        /// The weights file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Tensors expected by `config.json` are missing or have the wrong shape or dtype.
    #[error("{path} does not match its config.json ({} problem(s)):{}", problems.len(), ProblemList(problems))]
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
    /// Building the model failed after validation (a bug or an inconsistent config).
    #[error("cannot build the model from {path}: {source}")]
    Build {
        /// The weights or config file.
        path: PathBuf,
        /// candle's error.
        source: candle_core::Error,
    },
}

/// One tensor that does not match what the config implies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TensorProblem {
    /// The key is absent from the file.
    Missing {
        /// Checkpoint key.
        name: String,
        /// Shape implied by the config.
        expected: Vec<usize>,
    },
    /// The key is present with another shape.
    Shape {
        /// Checkpoint key.
        name: String,
        /// Shape implied by the config.
        expected: Vec<usize>,
        /// Shape in the file.
        found: Vec<usize>,
    },
    /// The key is present with a dtype that is not a float (f16, bf16, f32, f64).
    DType {
        /// Checkpoint key.
        name: String,
        /// dtype in the file.
        found: String,
    },
}

impl fmt::Display for TensorProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TensorProblem::Missing { name, expected } => {
                write!(f, "missing tensor {name} (expected shape {expected:?})")
            }
            TensorProblem::Shape {
                name,
                expected,
                found,
            } => write!(
                f,
                "tensor {name} has shape {found:?}, expected {expected:?}"
            ),
            TensorProblem::DType { name, found } => write!(
                f,
                "tensor {name} has dtype {found}, expected a float (f16, bf16, f32)"
            ),
        }
    }
}

struct ProblemList<'a>(&'a [TensorProblem]);

impl fmt::Display for ProblemList<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in self.0 {
            write!(f, "\n  {p}")?;
        }
        Ok(())
    }
}

/// Why prompts could not be tokenized or embedded.
#[derive(Debug, thiserror::Error)]
pub enum TokenizeError {
    /// The tokenizers crate failed on a prompt.
    #[error("cannot tokenize prompt {prompt:?}: {reason}")]
    Encode {
        /// The prompt.
        prompt: String,
        /// The tokenizer's message.
        reason: String,
    },
    /// Building the id tensor or running the text tower failed.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}
