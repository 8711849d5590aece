//! One guided sampler step through the Shap-E prior at its published shape: the
//! classifier-free-guided x0 prediction of a state `x (1, tokens, 1024)` (both branches as one
//! batch of 2), a fixed random projection of it as the loss, and the backward pass to `x`, with
//! the prior's 24 blocks under each checkpoint policy. Random weights (24 blocks of width 1024 in
//! 16 heads of 64, conditioning 768, as `random-models --preset published`). The render and
//! CLIP part of a real guided step is left out: it is the same for every policy.
//!
//! Per policy: the activation peak above the weights (CPU: the counting allocator; CUDA: the
//! memory pool's high-water mark above what was in use before the step), seconds (forward and
//! backward, the device synchronised at both ends), blocks recomputed in backward, and the
//! gradient's relative error against `none`.
//! A second table repeats `none` and `blocks` at 256, 512 and 1024 latent tokens.
//!
//! Run: `cargo bench --bench prior_guidance` (about 13 min on 2 cores, 6.3 GiB peak RSS);
//! `PRIOR_BENCH=tiny` is a smoke run of a 4-block, width-64 prior; `PRIOR_BENCH_POLICIES=none,budget:2GiB`
//! runs only those rows (no token table). Each table starts with an unmeasured warm-up step.
//! `CLIPSCULPT_DEVICE=cuda` and `CLIPSCULPT_DTYPE=f32|bf16|f16` (`benches/common`) run it on a GPU
//! with the prior's matrix weights in that dtype (default: f32 on the CPU, bf16 on CUDA);
//! `PRIOR_BENCH_REPEATS=N` keeps the fastest of N runs of each step (the highest peak).
//! `cargo bench --features composite-ops --bench prior_guidance` runs the composed ops a GPU runs
//! on the CPU, whose heap counter then measures a GPU's activation bytes (not its time).
//!
//! `PRIOR_BENCH_CHAIN=N` instead measures end-to-end guidance through the last N Heun steps of 64
//! (2N − 1 guided prior evaluations): the gradient of a fixed random projection of the finished
//! latent with respect to the state N steps before the end, with the sampler steps and the prior's
//! blocks each unchecked or checkpointed (nested: a recomputed step checkpoints its blocks again).

#[path = "../../crates/clipsculpt/benches/common/mod.rs"]
mod common;

use candle_core::{DType, Result, Tensor, Var};
use clipsculpt::autodiff::checkpoint::Policy;
use clipsculpt::autodiff::memory::{self, mib, CountingAlloc};
use clipsculpt::autodiff::rng::Rng;
use clipsculpt::device::memory::used_bytes;
use clipsculpt::random::random_frozen_in;
use clipsculpt::shap_e::config::PriorConfig;
use clipsculpt::shap_e::{
    Denoiser, HeunDiscreteScheduler, PriorTransformer, SamplerChain, SchedulerConfig,
};
use common::{BenchEnv, Size};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// The prior's shape: blocks, heads × head width, conditioning width.
struct Shape {
    layers: usize,
    heads: usize,
    head_dim: usize,
    cond: usize,
}

const PUBLISHED: Shape = Shape {
    layers: 24,
    heads: 16,
    head_dim: 64,
    cond: 768,
};

const TINY: Shape = Shape {
    layers: 4,
    heads: 2,
    head_dim: 32,
    cond: 32,
};

fn prior(env: &BenchEnv, shape: &Shape, tokens: usize) -> Result<PriorTransformer> {
    let d = shape.heads * shape.head_dim;
    let cfg: PriorConfig = serde_json::from_value(serde_json::json!({
        "num_attention_heads": shape.heads, "attention_head_dim": shape.head_dim,
        "num_layers": shape.layers, "embedding_dim": d, "num_embeddings": tokens,
        "additional_embeddings": 0, "time_embed_act_fn": "gelu", "norm_in_type": "layer",
        "embedding_proj_norm_type": null, "encoder_hid_proj_type": null, "added_emb_type": null,
        "time_embed_dim": 4 * d, "embedding_proj_dim": shape.cond, "clip_embed_dim": 2 * d
    }))
    .map_err(candle_core::Error::wrap)?;
    random_frozen_in(1, &env.device, env.dtype(), |vb| {
        PriorTransformer::new(vb, &cfg)
    })
}

/// One measured guided step: peak bytes above the start, seconds, the gradient.
struct Run {
    peak: usize,
    seconds: f64,
    grad: Tensor,
}

/// The guided step, run `PRIOR_BENCH_REPEATS` times (default 1; a GPU step takes milliseconds):
/// the fastest time and the highest peak.
fn guided_step(
    env: &BenchEnv,
    prior: &PriorTransformer,
    policy: &Policy,
    inputs: &Inputs,
) -> Result<Run> {
    let repeats = common::repeats("PRIOR_BENCH_REPEATS")?;
    let mut best = guided_step_once(env, prior, policy, inputs)?;
    for _ in 1..repeats {
        let run = guided_step_once(env, prior, policy, inputs)?;
        best.peak = best.peak.max(run.peak);
        best.seconds = best.seconds.min(run.seconds);
    }
    Ok(best)
}

/// The guided step at the 40th of 64 Heun steps (σ ≈ 2), CFG scale 15.
fn guided_step_once(
    env: &BenchEnv,
    prior: &PriorTransformer,
    policy: &Policy,
    inputs: &Inputs,
) -> Result<Run> {
    let mut sched = HeunDiscreteScheduler::new(&SchedulerConfig::shap_e(), 64)?;
    let denoiser = Denoiser::new(prior, &inputs.text, 15.0)?;
    let dummy = inputs.x.zeros_like()?;
    while sched.step_number() < 40 {
        sched.step(&dummy, &dummy)?;
    }
    let span = env.start()?;
    let x = Var::from_tensor(&inputs.x)?;
    let x0 = denoiser.x0(&sched, x.as_tensor(), policy)?;
    let loss = (x0 * &inputs.w)?.sum_all()?;
    let grads = loss.backward()?;
    let grad = grads
        .get(&x)
        .cloned()
        .ok_or_else(|| candle_core::Error::Msg("no gradient reached x".into()))?;
    let m = span.finish(env)?;
    Ok(Run {
        peak: m.activation_peak(env),
        seconds: m.seconds,
        grad,
    })
}

struct Inputs {
    x: Tensor,
    text: Tensor,
    w: Tensor,
}

fn inputs(env: &BenchEnv, shape: &Shape, tokens: usize) -> Result<Inputs> {
    let mut rng = Rng::new(3);
    let d = shape.heads * shape.head_dim;
    let dev = &env.device;
    Ok(Inputs {
        x: (rng.normal_tensor(&[1, tokens, d], dev)? * 2.0)?,
        text: rng.normal_tensor(&[1, shape.cond], dev)?,
        w: rng.normal_tensor(&[1, tokens, d], dev)?,
    })
}

fn rel_err(a: &Tensor, b: &Tensor) -> Result<f64> {
    let num = (a - b)?
        .sqr()?
        .sum_all()?
        .to_dtype(DType::F64)?
        .to_scalar::<f64>()?;
    let den = b
        .sqr()?
        .sum_all()?
        .to_dtype(DType::F64)?
        .to_scalar::<f64>()?;
    Ok((num / den.max(1e-300)).sqrt())
}

/// The cells comparing `run` with the `reference` row (none: it is the reference): peak and time
/// ratios, and the gradient's relative error.
fn against(run: &Run, reference: Option<&Run>) -> Result<(String, String, String)> {
    Ok(match reference {
        Some(r) => (
            format!("{:.1} %", 100.0 * run.peak as f64 / r.peak as f64),
            format!("{:.2}×", run.seconds / r.seconds),
            format!("{:.1e}", rel_err(&run.grad, &r.grad)?),
        ),
        None => ("100 %".into(), "1.00×".into(), "0".into()),
    })
}

/// The policies to run: `PRIOR_BENCH_POLICIES` (comma-separated, `none` first for the ratios) or all of them.
fn policies(tiny: bool) -> Result<Vec<Policy>> {
    match std::env::var("PRIOR_BENCH_POLICIES") {
        Ok(list) => list
            .split(',')
            .map(|p| p.parse().map_err(candle_core::Error::Msg))
            .collect(),
        Err(_) => Ok(all_policies(tiny)),
    }
}

fn all_policies(tiny: bool) -> Vec<Policy> {
    let gib = 1usize << 30;
    let budgets = if tiny {
        [Policy::Budget(1 << 20), Policy::Budget(4 << 20)]
    } else {
        [Policy::Budget(2 * gib), Policy::Budget(4 * gib)]
    };
    let mut v = vec![
        Policy::None,
        Policy::BLOCKS,
        Policy::EveryK(2),
        Policy::EveryK(4),
        Policy::Sqrt,
        Policy::LastN(6),
        Policy::LastN(12),
    ];
    v.extend(budgets);
    v
}

fn policy_table(env: &BenchEnv, shape: &Shape, tokens: usize, tiny: bool) -> Result<()> {
    let prior = prior(env, shape, tokens)?;
    let inputs = inputs(env, shape, tokens)?;
    println!(
        "## One guided sampler step, {} blocks × {} ({} heads of {}), {tokens} latent tokens, CFG batch 2\n",
        shape.layers,
        shape.heads * shape.head_dim,
        shape.heads,
        shape.head_dim
    );
    println!("weights: {}\n", mib(used_bytes(&env.device)? as usize));
    println!("| policy | activation peak | vs none | seconds | vs none | blocks recomputed | gradient rel. error vs none |");
    println!("|---|---|---|---|---|---|---|");
    // An unmeasured warm-up, so that the first measured row does not pay for first-touch page faults.
    guided_step(env, &prior, &Policy::None, &inputs)?;
    let mut reference: Option<Run> = None;
    for p in policies(tiny)? {
        // Plans (a budget measures one block first) are made outside the measured span; a budget
        // too small for any plan is a row of its own.
        let recomputed = match prior.block_plan(&p, 2) {
            Ok(plan) => plan.recomputed_blocks(),
            Err(e) => {
                println!("| {p} | does not fit: {e} | | | | | |");
                continue;
            }
        };
        let run = guided_step(env, &prior, &p, &inputs)?;
        let (peak_ratio, time_ratio, err) = against(&run, reference.as_ref())?;
        println!(
            "| {p} | {} | {peak_ratio} | {:.3} | {time_ratio} | {recomputed} | {err} |",
            mib(run.peak),
            run.seconds
        );
        if reference.is_none() {
            reference = Some(run);
        }
    }
    println!();
    Ok(())
}

fn token_table(env: &BenchEnv, shape: &Shape, tokens: &[usize]) -> Result<()> {
    println!(
        "## By latent token count ({} blocks, CFG batch 2)\n",
        shape.layers
    );
    println!("| tokens | none peak | none s | blocks peak | blocks s | peak ratio | time ratio |");
    println!("|---|---|---|---|---|---|---|");
    for &n in tokens {
        let prior = prior(env, shape, n)?;
        let inputs = inputs(env, shape, n)?;
        guided_step(env, &prior, &Policy::None, &inputs)?;
        let none = guided_step(env, &prior, &Policy::None, &inputs)?;
        let blocks = guided_step(env, &prior, &Policy::BLOCKS, &inputs)?;
        println!(
            "| {n} | {} | {:.3} | {} | {:.3} | {:.1} % | {:.2}× |",
            mib(none.peak),
            none.seconds,
            mib(blocks.peak),
            blocks.seconds,
            100.0 * blocks.peak as f64 / none.peak as f64,
            blocks.seconds / none.seconds
        );
    }
    println!();
    Ok(())
}

/// The end-to-end step through the last `n` Heun steps of 64 with the steps under `steps` and the
/// prior's blocks under `blocks`, CFG scale 15.
fn chain_step(
    env: &BenchEnv,
    prior: &PriorTransformer,
    n: usize,
    (steps, blocks): (Policy, Policy),
    inputs: &Inputs,
) -> Result<Run> {
    let sched = HeunDiscreteScheduler::new(&SchedulerConfig::shap_e(), 64)?;
    let chain = SamplerChain::new(prior, &sched, 64 - n, 15.0, blocks)?;
    let span = env.start()?;
    let x = Var::from_tensor(&(&inputs.x * (chain.sigma() as f64 / 2.0))?)?;
    let z = chain.run(x.as_tensor(), &inputs.text, &steps)?;
    let grads = (z * &inputs.w)?.sum_all()?.backward()?;
    let grad = grads
        .get(&x)
        .cloned()
        .ok_or_else(|| candle_core::Error::Msg("no gradient reached x".into()))?;
    let m = span.finish(env)?;
    Ok(Run {
        peak: m.activation_peak(env),
        seconds: m.seconds,
        grad,
    })
}

fn chain_table(env: &BenchEnv, shape: &Shape, tokens: usize, n: usize) -> Result<()> {
    let prior = prior(env, shape, tokens)?;
    let inputs = inputs(env, shape, tokens)?;
    println!(
        "## End to end through the last {n} Heun steps ({} prior evaluations), {} blocks × {}, {tokens} tokens, CFG batch 2\n",
        2 * n - 1,
        shape.layers,
        shape.heads * shape.head_dim
    );
    println!("| sampler steps | prior blocks | activation peak | vs none | seconds | vs none | gradient rel. error vs none |");
    println!("|---|---|---|---|---|---|---|");
    let (none, blocks) = (Policy::None, Policy::BLOCKS);
    chain_step(env, &prior, n, (blocks, blocks), &inputs)?;
    let mut reference: Option<Run> = None;
    for policies in [
        (none, none),
        (none, blocks),
        (blocks, none),
        (blocks, blocks),
    ] {
        let run = chain_step(env, &prior, n, policies, &inputs)?;
        let (peak_ratio, time_ratio, err) = against(&run, reference.as_ref())?;
        println!(
            "| {} | {} | {} | {peak_ratio} | {:.3} | {time_ratio} | {err} |",
            policies.0,
            policies.1,
            mib(run.peak),
            run.seconds
        );
        if reference.is_none() {
            reference = Some(run);
        }
    }
    println!();
    Ok(())
}

fn main() -> Result<()> {
    memory::keep_freed_pages();
    let env = BenchEnv::from_env()?;
    let tiny = std::env::var("PRIOR_BENCH").is_ok_and(|v| v == "tiny") || env.size == Size::Tiny;
    let (shape, tokens) = if tiny {
        (&TINY, vec![16, 32, 64])
    } else {
        (&PUBLISHED, vec![256, 512, 1024])
    };
    println!(
        "{}; {} CPU threads; load average at start: {}\n",
        env.describe()?,
        rayon::current_num_threads(),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    let last = tokens[tokens.len() - 1];
    if let Ok(n) = std::env::var("PRIOR_BENCH_CHAIN") {
        let n = n.parse().map_err(candle_core::Error::wrap)?;
        return chain_table(&env, shape, last, n);
    }
    policy_table(&env, shape, last, tiny)?;
    if std::env::var("PRIOR_BENCH_POLICIES").is_ok() {
        return Ok(());
    }
    token_table(&env, shape, &tokens)
}
