//! Checkpoint engine benchmark: frozen-weight linear backward cost, and peak activation memory /
//! time of a residual MLP chain under every policy. Prints markdown tables; asserts nothing.
//!
//! Run: `cargo bench --bench checkpoint`

use std::time::Instant;

use candle_core::backprop::GradStore;
use candle_core::{Device, Module, Result, Tensor, Var};
use clipsculpt::autodiff::checkpoint::{
    measure_costs, predicted_peak, run_chain, Policy, ResidualMlp,
};
use clipsculpt::autodiff::memory::{self, CountingAlloc, PeakMeter};
use clipsculpt::autodiff::nn::Linear;
use clipsculpt::autodiff::rng::Rng;

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fn main() -> Result<()> {
    frozen_linear()?;
    chain_policies()
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
fn frozen_linear() -> Result<()> {
    let dev = Device::Cpu;
    let (layers, d, rows) = (8, 1024, 2048);
    let mut rng = Rng::new(1);
    let weights: Vec<(Tensor, Tensor)> = (0..layers)
        .map(|_| {
            Ok((
                (rng.normal_tensor(&[d, d], &dev)? / 32.0)?,
                rng.normal_tensor(&[d], &dev)?,
            ))
        })
        .collect::<Result<_>>()?;
    let x0 = rng.normal_tensor(&[rows, d], &dev)?;
    println!("## Frozen-weight linear chain ({layers} × Linear {d}→{d} + tanh, {rows} rows)\n");
    println!("| implementation | forward s | backward s | backward / forward | gradients kept | gradient bytes kept |");
    println!("|---|---|---|---|---|---|");
    for name in [
        "clipsculpt autodiff::nn::Linear",
        "candle_nn::Linear (baseline)",
    ] {
        let ours = name.starts_with("clipsculpt");
        let (mut fw, mut bw, mut kept) = (Vec::new(), Vec::new(), (0, 0));
        for _ in 0..3 {
            let x = Var::from_tensor(&x0)?;
            let t = Instant::now();
            let mut h = x.as_tensor().clone();
            for (w, b) in &weights {
                h = if ours {
                    Linear::new(w.clone(), Some(b.clone())).forward(&h)?
                } else {
                    candle_nn::Linear::new(w.clone(), Some(b.clone())).forward(&h)?
                }
                .tanh()?;
            }
            let loss = h.sum_all()?;
            fw.push(t.elapsed().as_secs_f64());
            let t = Instant::now();
            let g = loss.backward()?;
            bw.push(t.elapsed().as_secs_f64());
            kept = store_bytes(&g);
        }
        let (f, b) = (median(fw), median(bw));
        println!(
            "| {name} | {f:.3} | {b:.3} | {:.2} | {} | {} |",
            b / f,
            kept.0,
            memory::mib(kept.1)
        );
    }
    println!();
    Ok(())
}

/// 16 residual MLP blocks (d 256, hidden 1024) on 2048 rows under every policy.
fn chain_policies() -> Result<()> {
    let dev = Device::Cpu;
    let (n, d, h, rows) = (16, 256, 1024, 2048);
    let blocks: Vec<ResidualMlp> = (0..n)
        .map(|i| ResidualMlp::new(d, h, 10 + i as u64, &dev))
        .collect::<Result<_>>()?;
    let mut rng = Rng::new(2);
    let x0 = rng.normal_tensor(&[rows, d], &dev)?;
    let w = rng.normal_tensor(&[rows, d], &dev)?;
    let costs =
        measure_costs(&blocks, &x0, &[])?.expect("the bench installs the counting allocator");
    println!(
        "## Residual MLP chain: {n} blocks, d {d}, hidden {h}, {rows} rows (s = {} per boundary, a = {} graph per block)\n",
        memory::mib(costs[0].input_bytes),
        memory::mib(costs[0].graph_bytes)
    );

    // One run: peak bytes above the start, seconds, the input gradient.
    let run_once = |policy: Policy| -> Result<(usize, f64, Tensor)> {
        let plan = policy
            .plan(n, Some(&costs))
            .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        let x = Var::from_tensor(&x0)?;
        let meter = PeakMeter::start();
        let t = Instant::now();
        let out = run_chain(&blocks, x.as_tensor(), &[], &plan)?;
        let g = (out * &w)?.sum_all()?.backward()?;
        let secs = t.elapsed().as_secs_f64();
        let grad = g.get(&x).cloned().expect("gradient reaches the input");
        Ok((meter.peak_above_base(), secs, grad))
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
    let budgets: Vec<usize> = [0.15, 0.25, 0.35, 0.5, 0.75, 1.2]
        .iter()
        .map(|f| (costs.iter().map(|c| c.graph_bytes).sum::<usize>() as f64 * f) as usize)
        .collect();
    policies.extend(budgets.iter().map(|&b| Policy::Budget(b)));
    let mut results: Vec<(usize, Vec<f64>, Option<Tensor>)> =
        vec![(0, Vec::new(), None); policies.len()];
    for _round in 0..3 {
        for (p, r) in policies.iter().zip(results.iter_mut()) {
            if p.plan(n, Some(&costs)).is_err() {
                continue;
            }
            let (peak, secs, grad) = run_once(*p)?;
            r.0 = r.0.max(peak);
            r.1.push(secs);
            r.2 = Some(grad);
        }
    }
    let (base_peak, base_time) = (results[0].0, median(results[0].1.clone()));
    let base_grad = results[0].2.clone().expect("none ran");
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
            rel_err(r.2.as_ref().expect("ran"), &base_grad)?
        );
    }
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
