//! Loading CLIP from a model directory: `config.json` plus the first of
//! [`TRANSFORMERS_WEIGHTS`] (f16/bf16 upcast to f32), validated and checked tensor by tensor by
//! [`crate::weights`]. Keys the model never asks for (the int64 `position_ids` buffers of older
//! checkpoints) are ignored.

use std::path::{Path, PathBuf};

use candle_core::{DType, Device};

use super::config::{ClipConfig, ClipTextConfig, ConfigFile};
use super::model::ClipModel;
use super::text::ClipTextModelWithProjection;
use crate::weights::files::TRANSFORMERS_WEIGHTS;
use crate::weights::{find_weights, LoadError, WeightFile};

/// Opens the weights file of a CLIP directory.
fn open_weights(dir: &Path) -> Result<WeightFile, LoadError> {
    WeightFile::open(&find_weights(dir, &TRANSFORMERS_WEIGHTS)?)
}

/// Loads a full CLIP (`CLIPModel`: text + vision) from `dir` with its matrix weights in `dtype`
/// (f32; bf16/f16: mixed precision, see [`crate::autodiff::nn`]; norms, embeddings and
/// activations stay f32).
pub(crate) fn load_clip(dir: &Path, dtype: DType, device: &Device) -> Result<ClipModel, LoadError> {
    let (path, config) = read_config(dir)?;
    let ConfigFile::Full(cfg) = config else {
        return Err(LoadError::WrongModel {
            path,
            expected: "a CLIPModel (text_config + vision_config)",
            found: "a text-only CLIP (use the text-encoder loader)".into(),
        });
    };
    let weights = open_weights(dir)?;
    Ok(weights
        .build(dtype, device, |vb| ClipModel::new(vb, &cfg))?
        .model)
}

/// Loads the `CLIPTextModelWithProjection` layout (`text_model.*`, `text_projection.weight`), as in
/// openai/shap-e's `text_encoder/`. A full CLIP directory works too (its text half is loaded, with
/// the top-level `projection_dim`). The matrix weights are in `dtype`, as in [`load_clip`].
pub(crate) fn load_text_with_projection(
    dir: &Path,
    dtype: DType,
    device: &Device,
) -> Result<ClipTextModelWithProjection, LoadError> {
    let (_, config) = read_config(dir)?;
    let (cfg, projection_dim) = text_config(config);
    let weights = open_weights(dir)?;
    Ok(weights
        .build(dtype, device, |vb| {
            ClipTextModelWithProjection::new(vb, &cfg, projection_dim)
        })?
        .model)
}

/// The text tower's config and projection size of either config form.
pub(crate) fn text_config(config: ConfigFile) -> (ClipTextConfig, usize) {
    match config {
        ConfigFile::Full(ClipConfig {
            text_config,
            projection_dim,
            ..
        }) => (text_config, projection_dim),
        ConfigFile::Text(t) => {
            let p = t.projection_dim;
            (t, p)
        }
    }
}

/// Reads and parses `dir/config.json`.
pub(crate) fn read_config(dir: &Path) -> Result<(PathBuf, ConfigFile), LoadError> {
    let path = dir.join("config.json");
    if !path.is_file() {
        return Err(LoadError::MissingConfig {
            dir: dir.to_path_buf(),
        });
    }
    let text = std::fs::read_to_string(&path).map_err(|source| LoadError::Io {
        path: path.clone(),
        source,
    })?;
    let config = ConfigFile::from_json(&text).map_err(|source| LoadError::Config {
        path: path.clone(),
        source,
    })?;
    Ok((path, config))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every float tensor of the fixture checkpoints is read (the int64 `position_ids` buffers
    /// that transformers no longer uses are not floats); an unused key would be as much a bug as a
    /// missing one.
    #[test]
    fn every_tensor_in_the_file_is_used() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/clip");
        for (dir, full) in [("tiny-clip", true), ("tiny-text-proj", false)] {
            let dir = root.join(dir);
            let (_, config) = read_config(&dir).unwrap();
            let weights = open_weights(&dir).unwrap();
            let unused = match (config, full) {
                (ConfigFile::Full(cfg), true) => {
                    weights
                        .build(DType::F32, &Device::Cpu, |vb| ClipModel::new(vb, &cfg))
                        .unwrap()
                        .unused
                }
                (config, false) => {
                    let (cfg, p) = text_config(config);
                    weights
                        .build(DType::F32, &Device::Cpu, |vb| {
                            ClipTextModelWithProjection::new(vb, &cfg, p)
                        })
                        .unwrap()
                        .unused
                }
                _ => panic!("fixture {} has the wrong config form", dir.display()),
            };
            assert!(unused.is_empty(), "{}: {unused:?}", dir.display());
        }
    }
}
