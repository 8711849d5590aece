//! The file names a model folder may hold: the one list the loaders search and the hub
//! download lists are built from.

use std::path::{Path, PathBuf};

use super::error::LoadError;

/// Weight files of a `transformers` model folder (CLIP, Shap-E's `text_encoder/`), tried in order.
pub(crate) const TRANSFORMERS_WEIGHTS: [&str; 3] = [
    "model.safetensors",
    "model.fp16.safetensors",
    "model.bf16.safetensors",
];

/// Weight files of a diffusers component folder (`prior/`, the renderer), tried in order.
pub(crate) const DIFFUSERS_WEIGHTS: [&str; 3] = [
    "diffusion_pytorch_model.safetensors",
    "diffusion_pytorch_model.fp16.safetensors",
    "diffusion_pytorch_model.bin",
];

/// Shap-E decoder folders, tried in order (`renderer/` is the legacy name).
pub(crate) const DECODER_DIRS: [&str; 2] = ["shap_e_renderer", "renderer"];

/// The first of `names` present in `dir`.
pub(crate) fn find_weights(dir: &Path, names: &[&str]) -> Result<PathBuf, LoadError> {
    names
        .iter()
        .map(|f| dir.join(f))
        .find(|p| p.is_file())
        .ok_or_else(|| LoadError::MissingWeights {
            dir: dir.to_path_buf(),
            tried: names.iter().map(|s| s.to_string()).collect(),
        })
}

/// `names` under the folder `dir` (`dir/name`), as hub paths.
pub(crate) fn under(dir: &str, names: &[&str]) -> Vec<String> {
    names.iter().map(|n| format!("{dir}/{n}")).collect()
}
