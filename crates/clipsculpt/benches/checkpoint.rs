//! Checkpoint engine benchmark: frozen-weight linear backward cost, and peak activation memory /
//! time of a residual MLP chain under every policy. Prints markdown tables; asserts nothing.
//!
//! Run: `cargo bench --bench checkpoint`
//!
//! Device-generic (`benches/common`): `CLIPSCULPT_DEVICE=cuda`; `CLIPSCULPT_DTYPE` sets the
//! frozen linear chain's weight dtype (the residual chain's own weights stay f32);
//! `CLIPSCULPT_BENCH_SIZE=gpu` widens both (linear 4096 on 16384 rows, chain d 1024 / hidden 4096
//! on 16384 rows), `tiny` is a smoke run. Timings synchronise the device; "device peak" is the
//! CUDA pool's absolute high-water mark (the host heap on the CPU), the policy and budget tables
//! count bytes above each run's start. Byte-budget plans measure blocks on the device's meter (a
//! CPU with the counting allocator, a CUDA device with a memory pool).

#[path = "common/mod.rs"]
mod common;

use candle_core::backprop::GradStore;
use candle_core::{Module, Result, Tensor, Var};
use clipsculpt::autodiff::checkpoint::{
    measure_costs, predicted_peak, run_chain, Policy, ResidualMlp,
};
use clipsculpt::autodiff::memory::{self, CountingAlloc};
use clipsculpt::autodiff::nn::Linear;
use clipsculpt::autodiff::rng::Rng;
use common::{BenchEnv, Size};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fn main() -> Result<()> {
    let env = BenchEnv::from_env()?;
    println!("{}\n", env.describe()?);
    frozen_linear(&env)?;
    chain_policies(&env)
}

fn store_bytes(g: &GradStore) -> (usize, usize) {
    let ids: Vec<_> = g.get_ids().copied().collect();
    let bytes = ids
        .iter()
        .filter_map(|id| g.get_id(*id))
        .map(|t| t.elem_count() * t.dtype().size_in_bytes())
        .sum();
    (ids.len(), bytes)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// A chain of 8 frozen 1024×1024 linears (+tanh) on 2048 rows: ours vs candle-nn's.
fn frozen_linear(env: &BenchEnv) -> Result<()> {
    let dev = env.device.clone();
    let (layers, d, rows) = match env.size {
        Size::Cpu => (8, 1024, 2048),
        Size::Gpu => (8, 4096, 16384),
        Size::Tiny => (2, 64, 32),
    };
    let mut rng = Rng::new(1);
    let weights: Vec<(Tensor, Tensor)> = (0..layers)
        .map(|_| {
            Ok((
                (rng.normal_tensor(&[d, d], &dev)? / (d as f64).sqrt())?.to_dtype(env.dtype())?,
                rng.normal_tensor(&[d], &dev)?,
            ))
        })
        .collect::<Result<_>>()?;
    let x0 = rng.normal_tensor(&[rows, d], &dev)?;
    println!("## Frozen-weight linear chain ({layers} × Linear {d}→{d} + tanh, {rows} rows)\n");
    println!("| implementation | forward s | backward s | backward / forward | gradients kept | gradient bytes kept | device peak |");
    println!("|---|---|---|---|---|---|---|");
    for name in [
        "clipsculpt autodiff::nn::Linear",
        "candle_nn::Linear (baseline)",
    ] {
        let ours = name.starts_with("clipsculpt");
        let (mut fw, mut bw, mut kept, mut dpeak) = (Vec::new(), Vec::new(), (0, 0), 0u64);
        for _ in 0..3 {
            let x = Var::from_tensor(&x0)?;
            let span = env.start()?;
            let mut h = x.as_tensor().clone();
            for (w, b) in &weights {
                h = if ours {
                    Linear::new(w.clone(), Some(b.clone())).forward(&h)?
                } else {
                    // candle-nn's linear needs one dtype: the activations in the weights'.
                    candle_nn::Linear::new(w.clone(), Some(b.to_dtype(w.dtype())?))
                        .forward(&h.to_dtype(w.dtype())?)?
                        .to_dtype(candle_core::DType::F32)?
                }
                .tanh()?;
            }
            let loss = h.sum_all()?;
            let forward = span.finish(env)?;
            fw.push(forward.seconds);
            let span = env.start()?;
            let g = loss.backward()?;
            let backward = span.finish(env)?;
            bw.push(backward.seconds);
            dpeak = dpeak.max(forward.device_peak).max(backward.device_peak);
            kept = store_bytes(&g);
        }
        let (f, b) = (median(fw), median(bw));
        println!(
            "| {name} | {f:.3} | {b:.3} | {:.2} | {} | {} | {} |",
            b / f,
            kept.0,
            memory::mib(kept.1),
            memory::mib(dpeak as usize)
        );
    }
    println!();
    Ok(())
}

/// 16 residual MLP blocks (d 256, hidden 1024) on 2048 rows under every policy.
fn chain_policies(env: &BenchEnv) -> Result<()> {
    let dev = env.device.clone();
    let (n, d, h, rows) = match env.size {
        Size::Cpu => (16, 256, 1024, 2048),
        Size::Gpu => (16, 1024, 4096, 16384),
        Size::Tiny => (4, 16, 32, 8),
    };
    let blocks: Vec<ResidualMlp> = (0..n)
        .map(|i| ResidualMlp::new(d, h, 10 + i as u64, &dev))
        .collect::<Result<_>>()?;
    let mut rng = Rng::new(2);
    let x0 = rng.normal_tensor(&[rows, d], &dev)?;
    let w = rng.normal_tensor(&[rows, d], &dev)?;
    // Measured on the host heap, so only on the CPU (None elsewhere): budgets need them.
    let costs = measure_costs(&blocks, &x0, &[])?;
    match &costs {
        Some(c) => println!(
            "## Residual MLP chain: {n} blocks, d {d}, hidden {h}, {rows} rows (s = {} per boundary, a = {} graph per block)\n",
            memory::mib(c[0].input_bytes),
            memory::mib(c[0].graph_bytes)
        ),
        None => println!("## Residual MLP chain: {n} blocks, d {d}, hidden {h}, {rows} rows\n"),
    }

    // One run: peak bytes above the start (host heap; the device's high-water mark above what
    // was in use at the start elsewhere), seconds, the input gradient.
    let run_once = |policy: Policy| -> Result<(usize, f64, Tensor)> {
        let plan = policy
            .plan(n, costs.as_deref())
            .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        let x = Var::from_tensor(&x0)?;
        let span = env.start()?;
        let out = run_chain(&blocks, x.as_tensor(), &[], &plan)?;
        let g = (out * &w)?.sum_all()?.backward()?;
        let Some(grad) = g.get(&x).cloned() else {
            candle_core::bail!("no gradient reached the input");
        };
        drop(g);
        let m = span.finish(env)?;
        Ok((m.activation_peak(env), m.seconds, grad))
    };
    // Rounds interleave the policies so that machine noise hits them alike; medians are reported.
    let mut policies = vec![
        Policy::None,
        Policy::BLOCKS,
        Policy::EveryK(2),
        Policy::Sqrt,
        Policy::EveryK(8),
        Policy::LastN(4),
        Policy::LastN(8),
    ];
    let budgets: Vec<usize> = match &costs {
        Some(costs) => [0.15, 0.25, 0.35, 0.5, 0.75, 1.2]
            .iter()
            .map(|f| (costs.iter().map(|c| c.graph_bytes).sum::<usize>() as f64 * f) as usize)
            .collect(),
        None => Vec::new(),
    };
    policies.extend(budgets.iter().map(|&b| Policy::Budget(b)));
    let mut results: Vec<(usize, Vec<f64>, Option<Tensor>)> =
        vec![(0, Vec::new(), None); policies.len()];
    for _round in 0..3 {
        for (p, r) in policies.iter().zip(results.iter_mut()) {
            if p.plan(n, costs.as_deref()).is_err() {
                continue;
            }
            let (peak, secs, grad) = run_once(*p)?;
            r.0 = r.0.max(peak);
            r.1.push(secs);
            r.2 = Some(grad);
        }
    }
    let (base_peak, base_time) = (results[0].0, median(results[0].1.clone()));
    let Some(base_grad) = results[0].2.clone() else {
        candle_core::bail!("the unchecked run did not run");
    };
    println!("| policy | peak activation | vs none | seconds | vs none | recomputed blocks | kept inputs | rel. grad error vs none |");
    println!("|---|---|---|---|---|---|---|---|");
    for (p, r) in policies
        .iter()
        .zip(&results)
        .filter(|(p, _)| !matches!(p, Policy::Budget(_)))
    {
        let plan = p
            .plan(n, None)
            .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        let time = median(r.1.clone());
        println!(
            "| {p} | {} | {:.0}% | {time:.2} | {:.2}× | {} | {} | {:.1e} |",
            memory::mib(r.0),
            100.0 * r.0 as f64 / base_peak as f64,
            time / base_time,
            plan.recomputed_blocks(),
            plan.checkpoints(),
            match r.2.as_ref() {
                Some(g) => rel_err(g, &base_grad)?,
                None => f32::NAN,
            }
        );
    }
    let Some(costs) = costs else {
        println!("\n(byte-budget plans need a device memory meter; this device has none)");
        return Ok(());
    };
    println!("\n### Budget policy (budgets as fractions of the chain's total graph bytes)\n");
    println!(
        "| budget | plan | recomputed blocks | predicted peak | measured peak | fits | seconds |"
    );
    println!("|---|---|---|---|---|---|---|");
    for (p, r) in policies.iter().zip(&results) {
        let Policy::Budget(budget) = *p else { continue };
        match p.plan(n, Some(&costs)) {
            Ok(plan) => {
                let shape: Vec<String> = plan
                    .segments
                    .iter()
                    .map(|s| {
                        format!(
                            "{}{}",
                            s.blocks.len(),
                            if s.checkpointed { "c" } else { "s" }
                        )
                    })
                    .collect();
                println!(
                    "| {} | {} | {} | {} | {} | {} | {:.2} |",
                    memory::mib(budget),
                    shape.join(" "),
                    plan.recomputed_blocks(),
                    memory::mib(predicted_peak(&costs, &plan)),
                    memory::mib(r.0),
                    if r.0 <= budget { "yes" } else { "NO" },
                    median(r.1.clone())
                );
            }
            Err(e) => println!("| {} | refused: {e} | | | | | |", memory::mib(budget)),
        }
    }
    println!("\n(plan: segment lengths, c = checkpointed, s = graph stored)");
    Ok(())
}

fn rel_err(a: &Tensor, b: &Tensor) -> Result<f32> {
    let num = (a - b)?.sqr()?.sum_all()?.sqrt()?.to_scalar::<f32>()?;
    let den = b.sqr()?.sum_all()?.sqrt()?.to_scalar::<f32>()?;
    Ok(num / den)
}
