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
//! - `prior-backward-ckpt`: the same with every block checkpointed;
//! - `guide`: one guidance step at published decoder and CLIP sizes: the decoder of
//!   `MODEL/shap_e/shap_e_renderer` and the vision tower of `MODEL/clip` (ViT-B/16 at 224 px for
//!   `--preset published`), 2 views of 64² rays, 64 stratified + 64 importance samples per ray,
//!   each view over 4 grey backgrounds, loss −mean cosine to a fixed random text embedding,
//!   backward to the latent (1024 × 1024), unchecked;
//! - `guide-ckpt`: the same with ray chunks of 1024 (the CLI's default) and every CLIP block
//!   checkpointed;
//! - `matmul`: the machine's matrix-product rate (candle's CPU matmul, i.e. the `gemm` crate) on
//!   the prior's shapes, rows = 2 × 1026 tokens: `(2052 × 1024)·(1024 × 1024)`,
//!   `(2052 × 1024)·(1024 × 4096)` and `(2052 × 4096)·(4096 × 1024)`, each the best of 5; the JSON
//!   line adds `gflops` per shape.
//!
//! `REPEATS=N` (default 1); `CLIPSCULPT_DEVICE=cpu|cuda|cuda:N` and `CLIPSCULPT_DTYPE=f32|bf16`
//! as the other benches read them (`common`); `WARMUP=N` untimed repeats first (default 1 on a
//! GPU, 0 on the CPU). Each repeat is timed with the device synchronised at both ends. Prints one
//! JSON line: the stage, device and dtype, the seconds of each repeat, their minimum, the
//! process's peak RSS (MiB, weights included: `VmHWM`) and, on a GPU, the memory pool's
//! high-water mark over the timed repeats (`peak_device_mib`, weights included; null on the CPU).

#[path = "common/mod.rs"]
mod common;

use std::time::Instant;

use candle_core::{Result, Tensor, Var};
use clipsculpt::autodiff::checkpoint::Policy;
use clipsculpt::autodiff::memory::{self, CountingAlloc};
use clipsculpt::autodiff::rng::Rng;
use clipsculpt::clip::{ClipVisionConfig, ClipVisionModelWithProjection};
use clipsculpt::shap_e::{Decoder, PriorConfig, PriorTransformer, RendererConfig};
use clipsculpt::weights::WeightFile;
use common::guide_step::{normalize, step};
use common::BenchEnv;

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
    let env = BenchEnv::from_env()?;
    if stage == "matmul" {
        return matmul_stage(&env);
    }
    let runs = Runs {
        env: &env,
        repeats: common::repeats("REPEATS")?,
        warmup: warmup(&env)?,
    };
    let model = std::path::Path::new(&model);
    let (seconds, peak) = match stage.as_str() {
        "guide" => guide_stage(model, &runs, None)?,
        "guide-ckpt" => guide_stage(model, &runs, Some(GUIDE_CHUNK))?,
        _ => prior_stage(model, &stage, &runs)?,
    };
    let min = seconds.iter().copied().fold(f64::INFINITY, f64::min);
    println!(
        "{}",
        serde_json::json!({
            "impl": "clipsculpt", "stage": stage, "seconds": seconds, "min_seconds": min,
            "peak_rss_mib": peak_rss_mib(), "peak_device_mib": peak, "device": device_kind(&env),
            "dtype": env.precision.to_string(), "threads": rayon::current_num_threads(),
        })
    );
    Ok(())
}

/// `cpu` or `cuda`, as the PyTorch twin names its device.
fn device_kind(env: &BenchEnv) -> &'static str {
    if env.device.is_cpu() {
        "cpu"
    } else {
        "cuda"
    }
}

/// `WARMUP` (untimed repeats first): default 1 on a GPU, 0 on the CPU.
fn warmup(env: &BenchEnv) -> Result<usize> {
    match std::env::var("WARMUP") {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .map_err(|_| candle_core::Error::Msg(format!("WARMUP={v}: a count"))),
        _ => Ok(usize::from(!env.device.is_cpu())),
    }
}

/// How a stage's work is repeated and timed.
struct Runs<'a> {
    env: &'a BenchEnv,
    repeats: usize,
    warmup: usize,
}

impl Runs<'_> {
    /// Seconds of each timed repeat of `f` after the untimed warm-up, and on a GPU the pool's
    /// high-water mark over them (MiB, weights included).
    fn time(&self, mut f: impl FnMut() -> Result<()>) -> Result<(Vec<f64>, Option<f64>)> {
        for _ in 0..self.warmup {
            f()?;
        }
        let mut seconds = Vec::with_capacity(self.repeats);
        let mut peak = 0u64;
        for _ in 0..self.repeats {
            let span = self.env.start()?;
            f()?;
            let m = span.finish(self.env)?;
            seconds.push(m.seconds);
            peak = peak.max(m.device_peak);
        }
        let on_device = !self.env.device.is_cpu();
        Ok((seconds, on_device.then(|| peak as f64 / 1048576.0)))
    }
}

/// The prior's matrix-product shapes `(m, k, n)`.
const MATMUL_SHAPES: [(usize, usize, usize); 3] =
    [(2052, 1024, 1024), (2052, 1024, 4096), (2052, 4096, 1024)];

/// The `matmul` stage: GFLOP/s of each of [`MATMUL_SHAPES`] in the bench's dtype on its device,
/// the best of 5 products after one untimed.
fn matmul_stage(env: &BenchEnv) -> Result<()> {
    let mut rng = Rng::new(3);
    let mut gflops = Vec::new();
    let mut seconds = Vec::new();
    let dev = &env.device;
    for (m, k, n) in MATMUL_SHAPES {
        let a = rng.normal_tensor(&[m, k], dev)?.to_dtype(env.dtype())?;
        let b = rng.normal_tensor(&[k, n], dev)?.to_dtype(env.dtype())?;
        drop(a.matmul(&b)?);
        let mut best = f64::INFINITY;
        for _ in 0..5 {
            dev.synchronize()?;
            let t = Instant::now();
            drop(a.matmul(&b)?);
            dev.synchronize()?;
            best = best.min(t.elapsed().as_secs_f64());
        }
        seconds.push(best);
        gflops.push(2.0 * (m * k * n) as f64 / best / 1e9);
    }
    println!(
        "{}",
        serde_json::json!({
            "impl": "clipsculpt", "stage": "matmul", "seconds": seconds, "gflops": gflops,
            "shapes": MATMUL_SHAPES, "device": device_kind(env), "dtype": env.precision.to_string(),
            "threads": rayon::current_num_threads(),
        })
    );
    Ok(())
}

/// Rays per checkpointed chunk of the `guide-ckpt` stage (the CLI's default).
const GUIDE_CHUNK: usize = 1024;

/// A config file of `dir`, parsed.
fn config<T: serde::de::DeserializeOwned>(path: &std::path::Path) -> Result<T> {
    let text = std::fs::read_to_string(path).map_err(candle_core::Error::wrap)?;
    serde_json::from_str(&text).map_err(candle_core::Error::wrap)
}

/// Builds a model from one safetensors file, its matrix weights in the bench's dtype on its device.
fn build<M>(
    env: &BenchEnv,
    path: &std::path::Path,
    f: impl FnOnce(candle_nn::VarBuilder) -> Result<M>,
) -> Result<M> {
    WeightFile::open(path)
        .and_then(|w| w.build(env.dtype(), &env.device, f))
        .map(|loaded| loaded.model)
        .map_err(|e| candle_core::Error::Msg(e.to_string()))
}

/// The `guide` stages: guidance steps, ray chunks of `chunk` and checkpointed CLIP blocks when
/// given.
fn guide_stage(
    model: &std::path::Path,
    runs: &Runs,
    chunk: Option<usize>,
) -> Result<(Vec<f64>, Option<f64>)> {
    let env = runs.env;
    let dir = model.join("shap_e").join("shap_e_renderer");
    let cfg: RendererConfig = config(&dir.join("config.json"))?;
    let decoder = build(
        env,
        &dir.join("diffusion_pytorch_model.safetensors"),
        |vb| Decoder::new(vb, &cfg),
    )?;
    let clip: serde_json::Value = config(&model.join("clip").join("config.json"))?;
    let vit_cfg: ClipVisionConfig =
        serde_json::from_value(clip["vision_config"].clone()).map_err(candle_core::Error::wrap)?;
    let projection = clip["projection_dim"].as_u64().unwrap_or(512) as usize;
    let vit = build(env, &model.join("clip").join("model.safetensors"), |vb| {
        ClipVisionModelWithProjection::new(vb, &vit_cfg, projection)
    })?;
    let (mut rng, dev) = (Rng::new(3), &env.device);
    let shape = [1, cfg.latent_rows(), cfg.d_latent];
    let latent0 = (rng.normal_tensor(&shape, dev)? * 0.3)?.clamp(-1f32, 1f32)?;
    let text = normalize(&rng.normal_tensor(&[1, projection], dev)?)?;
    let tower = (&vit, vit_cfg.image_size);
    runs.time(|| {
        let z = Var::from_tensor(&latent0)?;
        step(&decoder, tower, &text, &z, (64, 2), (64, 64), chunk, dev)
    })
}

/// The prior's stages (`prior-eval`, `prior-backward`, `prior-backward-ckpt`).
fn prior_stage(
    model: &std::path::Path,
    stage: &str,
    runs: &Runs,
) -> Result<(Vec<f64>, Option<f64>)> {
    let env = runs.env;
    let dir = model.join("shap_e").join("prior");
    let prior_cfg: PriorConfig = config(&dir.join("config.json"))?;
    let prior = build(
        env,
        &dir.join("diffusion_pytorch_model.safetensors"),
        |vb| PriorTransformer::new(vb, &prior_cfg),
    )?;
    let cfg: serde_json::Value = config(&dir.join("config.json"))?;
    let size = |key: &str| cfg[key].as_u64().map(|v| v as usize);
    let (tokens, width) = (size("num_embeddings"), size("embedding_dim"));
    let cond = size("embedding_proj_dim").or(width);
    let (Some(tokens), Some(width), Some(cond)) = (tokens, width, cond) else {
        candle_core::bail!("{}: no prior sizes in config.json", dir.display());
    };
    let (mut rng, dev) = (Rng::new(3), &env.device);
    let shape = [1, tokens, width];
    let x = (rng.normal_tensor(&shape, dev)? * 2.0)?;
    let emb = rng.normal_tensor(&[2, cond], dev)?;
    let w = rng.normal_tensor(&shape, dev)?;
    let policy = match stage {
        "prior-eval" | "prior-backward" => Policy::None,
        "prior-backward-ckpt" => Policy::BLOCKS,
        other => candle_core::bail!("unknown STAGE {other}"),
    };
    runs.time(|| {
        if stage == "prior-eval" {
            let input = Tensor::cat(&[&x, &x], 0)?;
            drop(prior.forward_with_policy(&input, TIMESTEP, &emb, &policy)?);
        } else {
            drop(backward(&prior, &x, &emb, &w, &policy)?);
        }
        Ok(())
    })
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
