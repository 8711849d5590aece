//! One stage of a published-size run, alone in its process, for the side-by-side comparison with
//! PyTorch: `benches/reference/stages.sh` runs this and its twin `benches/reference/stages.py`
//! interleaved, on the same random weights (`random-models --preset published`).
//!
//! `STAGE=<stage> MODEL=<random-models folder> cargo bench --bench stages`, stages:
//! - `prior-eval`: one evaluation of the prior (24 blocks, 16 heads of 64, 1024 tokens) on a batch
//!   of 2 (classifier-free guidance's two branches), no graph;
//! - `prior-backward`: one guided sampler step through the prior: the guided x0 prediction
//!   `u + 3·(c − u)` of a state `x`, a fixed random projection of it as the loss, and the backward
//!   pass to `x`, unchecked;
//! - `prior-backward-ckpt`: the same with every block checkpointed.
//!
//! `REPEATS=N` (default 1). Prints one JSON line: the stage, the seconds of each repeat, their
//! minimum and the process's peak RSS (MiB, weights included: `VmHWM`).

use std::time::Instant;

use candle_core::{DType, Device, Result, Tensor, Var};
use clipsculpt::autodiff::checkpoint::Policy;
use clipsculpt::autodiff::memory::{self, CountingAlloc};
use clipsculpt::autodiff::rng::Rng;
use clipsculpt::shap_e::{PriorConfig, PriorTransformer};
use clipsculpt::weights::WeightFile;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// The timestep of the evaluated step (about σ = 2 on Shap-E's schedule).
const TIMESTEP: f32 = 250.0;
const CFG_SCALE: f64 = 3.0;

fn main() -> Result<()> {
    memory::keep_freed_pages();
    let stage = std::env::var("STAGE").unwrap_or_else(|_| "prior-eval".into());
    let model = std::env::var("MODEL")
        .map_err(|_| candle_core::Error::Msg("set MODEL to a random-models folder".into()))?;
    let repeats: usize = std::env::var("REPEATS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(1);
    let dir = std::path::Path::new(&model).join("shap_e").join("prior");
    let text =
        std::fs::read_to_string(dir.join("config.json")).map_err(candle_core::Error::wrap)?;
    let prior_cfg: PriorConfig = serde_json::from_str(&text).map_err(candle_core::Error::wrap)?;
    let prior = WeightFile::open(&dir.join("diffusion_pytorch_model.safetensors"))
        .and_then(|f| {
            f.build(DType::F32, &Device::Cpu, |vb| {
                PriorTransformer::new(vb, &prior_cfg)
            })
        })
        .map_err(|e| candle_core::Error::Msg(e.to_string()))?
        .model;
    let cfg: serde_json::Value = serde_json::from_str(&text).map_err(candle_core::Error::wrap)?;
    let size = |key: &str| cfg[key].as_u64().map(|v| v as usize);
    let (tokens, width) = (size("num_embeddings"), size("embedding_dim"));
    let cond = size("embedding_proj_dim").or(width);
    let (Some(tokens), Some(width), Some(cond)) = (tokens, width, cond) else {
        candle_core::bail!("{}: no prior sizes in config.json", dir.display());
    };
    let mut rng = Rng::new(3);
    let shape = [1, tokens, width];
    let x = (rng.normal_tensor(&shape, &Device::Cpu)? * 2.0)?;
    let emb = rng.normal_tensor(&[2, cond], &Device::Cpu)?;
    let w = rng.normal_tensor(&shape, &Device::Cpu)?;
    let mut seconds = Vec::with_capacity(repeats);
    for _ in 0..repeats {
        let t = Instant::now();
        match stage.as_str() {
            "prior-eval" => {
                let input = Tensor::cat(&[&x, &x], 0)?;
                drop(prior.forward_with_policy(&input, TIMESTEP, &emb, &Policy::None)?)
            }
            "prior-backward" => drop(backward(&prior, &x, &emb, &w, &Policy::None)?),
            "prior-backward-ckpt" => drop(backward(&prior, &x, &emb, &w, &Policy::BLOCKS)?),
            other => candle_core::bail!("unknown STAGE {other}"),
        }
        seconds.push(t.elapsed().as_secs_f64());
    }
    let min = seconds.iter().copied().fold(f64::INFINITY, f64::min);
    println!(
        "{}",
        serde_json::json!({
            "impl": "clipsculpt", "stage": stage, "seconds": seconds, "min_seconds": min,
            "peak_rss_mib": peak_rss_mib(), "threads": rayon::current_num_threads(),
        })
    );
    Ok(())
}

/// The guided step's backward: the gradient of `Σ w ⊙ (u + s·(c − u))` with respect to `x`.
fn backward(
    prior: &PriorTransformer,
    x: &Tensor,
    emb: &Tensor,
    w: &Tensor,
    policy: &Policy,
) -> Result<Tensor> {
    let x = Var::from_tensor(x)?;
    let input = Tensor::cat(&[x.as_tensor(), x.as_tensor()], 0)?;
    let width = x.dim(2)?;
    let pred = prior
        .forward_with_policy(&input, TIMESTEP, emb, policy)?
        .narrow(2, 0, width)?;
    let (u, c) = (pred.narrow(0, 0, 1)?, pred.narrow(0, 1, 1)?);
    let guided = (&u + ((c - &u)? * CFG_SCALE)?)?;
    let grads = (guided * w)?.sum_all()?.backward()?;
    grads
        .get(&x)
        .cloned()
        .ok_or_else(|| candle_core::Error::Msg("no gradient reached x".into()))
}

/// The process's peak resident set (`VmHWM`), in MiB; 0 where `/proc` is unavailable.
fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}
