//! `clipsculpt info --model`: a Shap-E pipeline folder's components, their config summaries and
//! parameter counts (computed from the configs on a dry backend; the weights need not be present).

use std::fmt::Write as _;
use std::path::Path;

use super::config::{read_config, PriorConfig, RendererConfig, SchedulerConfig};
use super::decoder::Decoder;
use super::model::{SamplingDefaults, SAMPLING_FILE};
use super::prior::PriorTransformer;
use crate::weights::files::{DECODER_DIRS, DIFFUSERS_WEIGHTS};
use crate::weights::{count_parameters, find_weights, LoadError};

/// A summary of the Shap-E pipeline in `root`: prior, decoder and scheduler (the prior's text
/// encoder is a CLIP, described by `clip::describe`).
pub fn describe(root: &Path) -> Result<String, LoadError> {
    let mut s = format!("Shap-E pipeline at {}\n", root.display());
    let prior_dir = root.join("prior");
    let path = prior_dir.join("config.json");
    let prior: PriorConfig = read_config(&path)?;
    let params = count(&path, |vb| PriorTransformer::new(vb, &prior))?;
    // ok (all `writeln!`s below): writing to a String cannot fail.
    let _ = writeln!(
        s,
        "  prior: {} layers, width {}, {} heads, {} latent tokens × {}, time MLP {:?}",
        prior.num_layers,
        prior.inner_dim(),
        prior.num_attention_heads,
        prior.num_embeddings,
        prior.embedding_dim,
        prior.time_embed_act_fn
    );
    params_line(&mut s, params, &prior_dir);
    match DECODER_DIRS
        .iter()
        .map(|d| root.join(d))
        .find(|d| d.join("config.json").is_file())
    {
        Some(dir) => {
            let path = dir.join("config.json");
            let cfg: RendererConfig = read_config(&path)?;
            let params = count(&path, |vb| Decoder::new(vb, &cfg))?;
            let _ = writeln!(
                s,
                "  decoder ({}): latent {} × {}, MLP {} hidden layers of {}",
                dir.file_name().map_or("?".into(), |n| n.to_string_lossy()),
                cfg.latent_rows(),
                cfg.d_latent,
                cfg.n_hidden_layers,
                cfg.d_hidden
            );
            params_line(&mut s, params, &dir);
        }
        None => {
            let _ = writeln!(
                s,
                "  decoder: not present (tried {})",
                DECODER_DIRS.join(", ")
            );
        }
    }
    let sched = root.join("scheduler").join("scheduler_config.json");
    if sched.is_file() {
        let c: SchedulerConfig = read_config(&sched)?;
        let _ = writeln!(
            s,
            "  scheduler: {} training steps, {:?} betas, Karras sigmas {}",
            c.num_train_timesteps, c.beta_schedule, c.use_karras_sigmas
        );
    } else {
        let _ = writeln!(
            s,
            "  scheduler: not present (Shap-E's published settings are used)"
        );
    }
    let (sampling, from) = match SamplingDefaults::read(root)? {
        Some(d) => (d, SAMPLING_FILE),
        None => (SamplingDefaults::default(), "Shap-E's default"),
    };
    let _ = writeln!(
        s,
        "  sampling: guidance scale {} ({from})",
        sampling.guidance_scale
    );
    Ok(s.trim_end().to_string())
}

/// Parameters a constructor asks for, on a dry backend.
fn count<T>(
    path: &Path,
    build: impl FnOnce(candle_nn::VarBuilder<'static>) -> candle_core::Result<T>,
) -> Result<usize, LoadError> {
    count_parameters(build).map_err(|source| LoadError::Build {
        path: path.to_path_buf(),
        source,
    })
}

/// `parameters: N (x M), weights: FILE (y MB)` of a component folder.
fn params_line(s: &mut String, params: usize, dir: &Path) {
    let weights = match find_weights(dir, &DIFFUSERS_WEIGHTS) {
        Ok(w) => {
            let size = std::fs::metadata(&w).map(|m| m.len()).unwrap_or(0);
            format!("{} ({:.1} MB)", w.display(), size as f64 / 1e6)
        }
        Err(_) => "not present".into(),
    };
    let _ = writeln!(
        s,
        "    parameters: {params} ({:.1} M), weights: {weights}",
        params as f64 / 1e6
    );
}
