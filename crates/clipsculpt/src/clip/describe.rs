//! `clipsculpt info --clip`: a CLIP directory's config summary and parameter count. The count comes
//! from building the model on a dry backend (zero views, nothing read), so the weights need not be
//! present.

use std::path::Path;

use super::config::{ClipTextConfig, ConfigFile};
use super::load::{read_config, text_config};
use super::model::ClipModel;
use super::text::ClipTextModelWithProjection;
use crate::weights::files::TRANSFORMERS_WEIGHTS;
use crate::weights::{count_parameters, find_weights, LoadError};

/// A summary of the model in `dir` for `clipsculpt info --clip`: the config's sizes, the
/// parameter count (computed from the config; the weights need not be present) and the weights
/// file, if any.
pub fn describe(dir: &Path) -> Result<String, LoadError> {
    let (path, config) = read_config(dir)?;
    let (kind, counted) = match &config {
        ConfigFile::Full(cfg) => ("CLIPModel", count_parameters(|vb| ClipModel::new(vb, cfg))),
        ConfigFile::Text(_) => {
            let (cfg, p) = text_config(config.clone());
            (
                "CLIPTextModelWithProjection",
                count_parameters(|vb| ClipTextModelWithProjection::new(vb, &cfg, p)),
            )
        }
    };
    let params = counted.map_err(|source| LoadError::Build {
        path: path.clone(),
        source,
    })?;
    let mut s = format!("{kind} at {}\n", dir.display());
    let tower = |s: &mut String, name: &str, t: &ClipTextConfig| {
        s.push_str(&format!(
            "  {name}: {} layers, width {}, {} heads, mlp {}, {:?}, vocab {}, context {}\n",
            t.num_hidden_layers,
            t.hidden_size,
            t.num_attention_heads,
            t.intermediate_size,
            t.hidden_act,
            t.vocab_size,
            t.max_position_embeddings
        ));
    };
    match &config {
        ConfigFile::Full(cfg) => {
            tower(&mut s, "text", &cfg.text_config);
            let v = &cfg.vision_config;
            s.push_str(&format!(
                "  vision: {} layers, width {}, {} heads, mlp {}, {:?}, image {}, patch {}\n",
                v.num_hidden_layers,
                v.hidden_size,
                v.num_attention_heads,
                v.intermediate_size,
                v.hidden_act,
                v.image_size,
                v.patch_size
            ));
            s.push_str(&format!("  projection: {}\n", cfg.projection_dim));
        }
        ConfigFile::Text(t) => {
            tower(&mut s, "text", t);
            s.push_str(&format!("  projection: {}\n", t.projection_dim));
        }
    }
    s.push_str(&format!(
        "  parameters: {params} ({:.1} M)\n",
        params as f64 / 1e6
    ));
    match find_weights(dir, &TRANSFORMERS_WEIGHTS) {
        Ok(w) => {
            let size = std::fs::metadata(&w).map(|m| m.len()).unwrap_or(0);
            s.push_str(&format!(
                "  weights: {} ({:.1} MB)",
                w.display(),
                size as f64 / 1e6
            ));
        }
        Err(_) => s.push_str("  weights: not present"),
    }
    Ok(s)
}
