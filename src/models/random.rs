//! Random-weight models in the exact on-disk layout the loaders read (`config.json` +
//! `*.safetensors` + tokenizer), built by the architectures' own constructors so every key and
//! shape is right by construction. Used by the tests and as the untrained embedded default.
//!
//! Initialisation follows transformers/diffusers: weights 𝒩(0, 0.02²), biases 0, LayerNorm
//! weights 1, CLIP's `logit_scale` ln(1/0.07) — all drawn from our seeded [`Rng`].

use std::path::Path;

use candle_core::{DType, Device, Result, Tensor};
use candle_nn::{VarBuilder, VarMap};
use serde_json::json;

use crate::atomic::write_atomic;
use crate::autodiff::rng::Rng;
use crate::clip::{ClipConfig, ClipModel};
use crate::toy::tokenizer::toy_tokenizer_json;

/// Token ids of the toy tokenizer's specials and its vocabulary size.
const TOY_VOCAB: usize = 575;
const TOY_BOS: usize = 573;
const TOY_EOS: usize = 574;

fn io(e: std::io::Error) -> candle_core::Error {
    candle_core::Error::Msg(e.to_string())
}

/// Creates every variable of a model through `build`, re-initialises them from `seed`, and saves
/// them to `path`.
pub fn save_random<T>(
    path: &Path,
    seed: u64,
    build: impl FnOnce(VarBuilder) -> Result<T>,
) -> Result<()> {
    let map = VarMap::new();
    build(VarBuilder::from_varmap(&map, DType::F32, &Device::Cpu))?;
    let mut rng = Rng::new(seed);
    {
        let data = map
            .data()
            .lock()
            .map_err(|_| candle_core::Error::Msg("variable map lock poisoned (bug)".into()))?;
        let mut names: Vec<&String> = data.keys().collect();
        names.sort();
        for name in names {
            let var = &data[name];
            let dims = var.dims().to_vec();
            let value = if name.ends_with("logit_scale") {
                Tensor::full((1.0f32 / 0.07).ln(), dims.as_slice(), &Device::Cpu)?
            } else if name.ends_with("bias") {
                Tensor::zeros(dims.as_slice(), DType::F32, &Device::Cpu)?
            } else if name.ends_with("weight") && dims.len() == 1 {
                Tensor::ones(dims.as_slice(), DType::F32, &Device::Cpu)?
            } else {
                (rng.normal_tensor(&dims, &Device::Cpu)? * 0.02)?
            };
            var.set(&value)?;
        }
    }
    map.save(path)
}

/// The JSON of a small CLIP (text + vision) over the toy tokenizer's vocabulary.
pub fn toy_clip_config(
    width: usize,
    layers: usize,
    image_size: usize,
    patch: usize,
) -> serde_json::Value {
    json!({
        "architectures": ["CLIPModel"],
        "model_type": "clip",
        "projection_dim": width,
        "logit_scale_init_value": 2.6592,
        "text_config": {
            "hidden_act": "quick_gelu", "hidden_size": width, "intermediate_size": 4 * width,
            "num_attention_heads": 4, "num_hidden_layers": layers, "max_position_embeddings": 77,
            "vocab_size": TOY_VOCAB, "bos_token_id": TOY_BOS, "eos_token_id": TOY_EOS, "pad_token_id": TOY_EOS,
            "layer_norm_eps": 1e-5
        },
        "vision_config": {
            "hidden_act": "quick_gelu", "hidden_size": width, "intermediate_size": 4 * width,
            "num_attention_heads": 4, "num_hidden_layers": layers, "image_size": image_size,
            "patch_size": patch, "num_channels": 3, "layer_norm_eps": 1e-5
        }
    })
}

/// Writes a random-weight CLIP folder (`config.json`, `model.safetensors`, `tokenizer.json`).
pub fn write_random_clip(dir: &Path, config: &serde_json::Value, seed: u64) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(io)?;
    let text =
        serde_json::to_string_pretty(config).map_err(|e| candle_core::Error::Msg(e.to_string()))?;
    let cfg: ClipConfig =
        serde_json::from_str(&text).map_err(|e| candle_core::Error::Msg(e.to_string()))?;
    write_atomic(&dir.join("config.json"), text.as_bytes()).map_err(io)?;
    write_atomic(&dir.join("tokenizer.json"), toy_tokenizer_json().as_bytes()).map_err(io)?;
    save_random(&dir.join("model.safetensors"), seed, |vb| {
        ClipModel::new(vb, &cfg)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autodiff::checkpoint::Policy;
    use crate::clip::ClipScorer;

    /// The written folder loads through the ordinary loader, tokenizes toy captions, and scores.
    #[test]
    fn random_clip_loads_and_scores() -> Result<()> {
        let dir = tempfile::tempdir().map_err(io)?;
        write_random_clip(dir.path(), &toy_clip_config(32, 2, 32, 8), 1).unwrap();
        let scorer = ClipScorer::load(dir.path(), &Device::Cpu).unwrap();
        let t = scorer.embed_texts(&["a red cube", "a blue torus"]).unwrap();
        let img = Rng::new(2).uniform_tensor(&[1, 3, 32, 32], &Device::Cpu)?;
        let i = scorer.embed_images(&img, &Policy::BLOCKS)?;
        assert_eq!(ClipScorer::cosine(&i, &t)?.dims(), &[1, 2]);
        Ok(())
    }
}
