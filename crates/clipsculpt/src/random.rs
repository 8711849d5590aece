//! Random-weight models in the exact on-disk layout the loaders read (`config.json` +
//! `*.safetensors` + tokenizer), built by the architectures' own constructors so every key and
//! shape is right by construction. Used by the tests and as the untrained embedded default.
//!
//! Initialisation follows transformers/diffusers: weights 𝒩(0, 0.02²), biases 0, LayerNorm
//! weights 1, CLIP's `logit_scale` ln(1/0.07) — all drawn from our seeded [`Rng`].

use std::path::Path;

use std::collections::HashMap;

use candle_core::{DType, Device, Result, Tensor, Var};
use candle_nn::{VarBuilder, VarMap};
use serde_json::json;

use crate::atomic::write_atomic;
use crate::autodiff::rng::Rng;
use crate::clip::{ClipConfig, ClipModel, ClipTextConfig, ClipTextModelWithProjection};
use crate::models::toy_tokenizer_json;
use crate::shap_e::{Decoder, PriorConfig, PriorTransformer, RendererConfig};

/// Token ids of the toy tokenizer's specials and its vocabulary size.
const TOY_VOCAB: usize = 575;
const TOY_BOS: usize = 573;
const TOY_EOS: usize = 574;

fn io(e: std::io::Error) -> candle_core::Error {
    candle_core::Error::Msg(e.to_string())
}

/// The initial value of parameter `name` (see the module docs).
fn init(name: &str, dims: &[usize], rng: &mut Rng, dev: &Device) -> Result<Tensor> {
    if name.ends_with("logit_scale") {
        Tensor::full((1.0f32 / 0.07).ln(), dims, dev)
    } else if name.ends_with("bias") {
        Tensor::zeros(dims, DType::F32, dev)
    } else if name.ends_with("weight") && dims.len() == 1 {
        Tensor::ones(dims, DType::F32, dev)
    } else {
        rng.normal_tensor(dims, dev)? * 0.02
    }
}

/// Every parameter `build` asks for, with random values from `seed` (names sorted, so the draws
/// do not depend on hash order).
pub(crate) fn random_tensors<T>(
    seed: u64,
    dev: &Device,
    build: impl FnOnce(VarBuilder) -> Result<T>,
) -> Result<HashMap<String, Tensor>> {
    let map = VarMap::new();
    build(VarBuilder::from_varmap(&map, DType::F32, dev))?;
    let data = map
        .data()
        .lock()
        .map_err(|_| candle_core::Error::Msg("variable map lock poisoned (bug)".into()))?;
    let mut names: Vec<&String> = data.keys().collect();
    names.sort();
    let mut rng = Rng::new(seed);
    names
        .into_iter()
        .map(|n| Ok((n.clone(), init(n, data[n].dims(), &mut rng, dev)?)))
        .collect()
}

/// A [`VarMap`] holding every parameter `build` asks for as a trainable [`Var`], initialised as
/// [`random_tensors`] does; build the model on it with `VarBuilder::from_varmap`.
pub fn random_varmap<T>(
    seed: u64,
    dev: &Device,
    build: impl FnOnce(VarBuilder) -> Result<T>,
) -> Result<VarMap> {
    let varmap = VarMap::new();
    let init = random_tensors(seed, dev, build)?;
    {
        let mut data = varmap
            .data()
            .lock()
            .map_err(|_| candle_core::Error::Msg("variable map lock poisoned (bug)".into()))?;
        for (name, t) in init {
            data.insert(name, Var::from_tensor(&t)?);
        }
    }
    Ok(varmap)
}

/// The current values of a [`VarMap`]'s variables by name (contiguous f32 on the CPU, no graph).
pub fn varmap_tensors(varmap: &VarMap) -> Result<HashMap<String, Tensor>> {
    let data = varmap
        .data()
        .lock()
        .map_err(|_| candle_core::Error::Msg("variable map lock poisoned (bug)".into()))?;
    data.iter()
        .map(|(k, v)| {
            let t = v
                .as_tensor()
                .detach()
                .to_dtype(DType::F32)?
                .to_device(&Device::Cpu)?
                .contiguous()?;
            Ok((k.clone(), t))
        })
        .collect()
}

/// Saves `tensors` to `path` as safetensors, atomically (temp file + rename).
pub fn save_tensors(tensors: &HashMap<String, Tensor>, path: &Path) -> Result<()> {
    let mut named: Vec<(&String, &Tensor)> = tensors.iter().collect();
    named.sort_by(|a, b| a.0.cmp(b.0));
    let bytes = safetensors::serialize(named, None).map_err(candle_core::Error::from)?;
    write_atomic(path, &bytes).map_err(io)
}

/// A model with random *frozen* weights (plain tensors, as loaded from a file), for benchmarks.
pub fn random_frozen<T>(
    seed: u64,
    dev: &Device,
    build: impl Fn(VarBuilder) -> Result<T>,
) -> Result<T> {
    random_frozen_in(seed, dev, DType::F32, build)
}

/// [`random_frozen`] with the matrix weights in `dtype` (bf16/f16: mixed precision, see
/// `autodiff::nn`); the values are drawn in f32 and rounded once.
pub fn random_frozen_in<T>(
    seed: u64,
    dev: &Device,
    dtype: DType,
    build: impl Fn(VarBuilder) -> Result<T>,
) -> Result<T> {
    let tensors = random_tensors(seed, dev, &build)?;
    build(VarBuilder::from_tensors(tensors, dtype, dev))
}

/// Creates every parameter of a model through `build` with random values from `seed`, and saves
/// them to `path` as safetensors.
pub(crate) fn save_random<T>(
    path: &Path,
    seed: u64,
    build: impl FnOnce(VarBuilder) -> Result<T>,
) -> Result<()> {
    save_tensors(&random_tensors(seed, &Device::Cpu, build)?, path)
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

/// Sizes of a small Shap-E pipeline.
#[derive(Debug, Clone, Copy)]
pub struct ShapESizes {
    /// Width of the decoder MLP (the latent has `4 × d_hidden` rows).
    pub d_hidden: usize,
    /// Latent width (the prior's `embedding_dim`).
    pub d_latent: usize,
    /// Prior transformer layers.
    pub prior_layers: usize,
    /// Prior transformer width (heads of 64, as the published prior's 16 × 64; 4 heads when
    /// narrower than 256); `None`: `d_latent` with 2 heads.
    pub prior_width: Option<usize>,
    /// Width of the prior's text tower and its projection.
    pub text_width: usize,
}

fn json_file(dir: &Path, name: &str, value: &serde_json::Value) -> Result<String> {
    std::fs::create_dir_all(dir).map_err(io)?;
    let text =
        serde_json::to_string_pretty(value).map_err(|e| candle_core::Error::Msg(e.to_string()))?;
    write_atomic(&dir.join(name), text.as_bytes()).map_err(io)?;
    Ok(text)
}

fn parse<T: serde::de::DeserializeOwned>(text: &str) -> Result<T> {
    serde_json::from_str(text).map_err(|e| candle_core::Error::Msg(e.to_string()))
}

/// Writes a random-weight Shap-E pipeline in diffusers' layout: `prior/`, `text_encoder/`,
/// `tokenizer/` (the toy tokenizer), `scheduler/` and `shap_e_renderer/`.
pub fn write_random_shap_e(root: &Path, sizes: ShapESizes, seed: u64) -> Result<()> {
    let ShapESizes {
        d_hidden,
        d_latent,
        prior_layers,
        prior_width,
        text_width,
    } = sizes;
    let (heads, head_dim) = match prior_width {
        Some(w) if w >= 256 && w % 64 == 0 => (w / 64, 64),
        Some(w) => (4, w / 4),
        None => (2, d_latent / 2),
    };
    let rows = 4 * d_hidden;
    let text = json_file(
        &root.join("text_encoder"),
        "config.json",
        &json!({
            "architectures": ["CLIPTextModelWithProjection"], "model_type": "clip_text_model",
            "hidden_act": "quick_gelu", "hidden_size": text_width, "intermediate_size": 4 * text_width,
            "num_attention_heads": 4, "num_hidden_layers": 2, "max_position_embeddings": 77,
            "vocab_size": TOY_VOCAB, "bos_token_id": TOY_BOS, "eos_token_id": TOY_EOS, "pad_token_id": TOY_EOS,
            "projection_dim": text_width, "layer_norm_eps": 1e-5
        }),
    )?;
    let text_cfg: ClipTextConfig = parse(&text)?;
    save_random(
        &root.join("text_encoder").join("model.safetensors"),
        seed,
        |vb| ClipTextModelWithProjection::new(vb, &text_cfg, text_width),
    )?;
    std::fs::create_dir_all(root.join("tokenizer")).map_err(io)?;
    write_atomic(
        &root.join("tokenizer").join("tokenizer.json"),
        toy_tokenizer_json().as_bytes(),
    )
    .map_err(io)?;
    let prior = json_file(
        &root.join("prior"),
        "config.json",
        &json!({
            "_class_name": "PriorTransformer", "num_attention_heads": heads, "attention_head_dim": head_dim,
            "num_layers": prior_layers, "embedding_dim": d_latent, "num_embeddings": rows,
            "additional_embeddings": 0, "dropout": 0.0, "time_embed_act_fn": "gelu",
            "norm_in_type": "layer", "embedding_proj_norm_type": null, "encoder_hid_proj_type": null,
            "added_emb_type": null, "time_embed_dim": 4 * d_latent, "embedding_proj_dim": text_width,
            "clip_embed_dim": 2 * d_latent
        }),
    )?;
    let prior_cfg: PriorConfig = parse(&prior)?;
    save_random(
        &root
            .join("prior")
            .join("diffusion_pytorch_model.safetensors"),
        seed + 1,
        |vb| PriorTransformer::new(vb, &prior_cfg),
    )?;
    json_file(
        &root.join("scheduler"),
        "scheduler_config.json",
        &json!({
            "_class_name": "HeunDiscreteScheduler", "beta_start": 0.00085, "beta_end": 0.012,
            "beta_schedule": "exp", "num_train_timesteps": 1024, "prediction_type": "sample",
            "use_karras_sigmas": true, "clip_sample": true, "clip_sample_range": 1.0,
            "steps_offset": 0, "timestep_spacing": "linspace"
        }),
    )?;
    let renderer = json_file(
        &root.join("shap_e_renderer"),
        "config.json",
        &json!({
            "_class_name": "ShapERenderer", "act_fn": "swish", "background": [255.0, 255.0, 255.0],
            "d_hidden": d_hidden, "d_latent": d_latent, "insert_direction_at": 4, "n_hidden_layers": 6,
            "n_output": 12,
            "param_names": ["nerstf.mlp.0.weight", "nerstf.mlp.1.weight", "nerstf.mlp.2.weight", "nerstf.mlp.3.weight"],
            "param_shapes": [[d_hidden, 93], [d_hidden, d_hidden], [d_hidden, d_hidden], [d_hidden, d_hidden]]
        }),
    )?;
    let renderer_cfg: RendererConfig = parse(&renderer)?;
    save_random(
        &root
            .join("shap_e_renderer")
            .join("diffusion_pytorch_model.safetensors"),
        seed + 2,
        |vb| Decoder::new(vb, &renderer_cfg),
    )
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
        let scorer = ClipScorer::load(dir.path(), DType::F32, &Device::Cpu).unwrap();
        let t = scorer.embed_texts(&["a red cube", "a blue torus"]).unwrap();
        let img = Rng::new(2).uniform_tensor(&[1, 3, 32, 32], &Device::Cpu)?;
        let i = scorer.embed_images(&img, &Policy::BLOCKS)?;
        assert_eq!(ClipScorer::cosine(&i, &t)?.dims(), &[1, 2]);
        Ok(())
    }
}
