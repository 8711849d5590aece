//! Every policy, multi-input, stochastic, nested and chunked segments give the gradient of the
//! un-checkpointed graph (relative error ≤ 1e-5 in f32; bitwise where a segment recomputes the same
//! ops), and each policy recomputes the blocks its plan names.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use candle_core::{Device, Result, Tensor, Var};

use super::segment::checkpoint;
use super::*;
use crate::autodiff::ops::testing::{bits, randn};
use crate::autodiff::rng::Rng;

fn chain(n: usize, d: usize) -> Result<Vec<ResidualMlp>> {
    (0..n)
        .map(|i| ResidualMlp::new(d, 2 * d, 100 + 10 * i as u64, &Device::Cpu))
        .collect()
}

fn rel_err(a: &Tensor, b: &Tensor) -> Result<f32> {
    let num = (a - b)?.sqr()?.sum_all()?.sqrt()?.to_scalar::<f32>()?;
    let den = b.sqr()?.sum_all()?.sqrt()?.to_scalar::<f32>()?;
    Ok(num / den.max(1e-12))
}

/// A block that counts its forward passes: a chain runs each block forward once, and backward
/// runs a checkpointed block forward once more (its recomputation).
#[derive(Clone)]
struct CountedForward {
    block: ResidualMlp,
    calls: Arc<AtomicUsize>,
}

impl Block for CountedForward {
    fn forward(&self, x: &Tensor, ctx: &[Tensor]) -> Result<Tensor> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.block.forward(x, ctx)
    }
}

/// [`chain`]'s blocks, counting their forward passes in `calls`.
fn counted_chain(n: usize, d: usize, calls: &Arc<AtomicUsize>) -> Result<Vec<CountedForward>> {
    Ok(chain(n, d)?
        .into_iter()
        .map(|block| CountedForward {
            block,
            calls: calls.clone(),
        })
        .collect())
}

/// Gradients of `Σ w ⊙ chain(x)` with respect to x and every tracked context tensor.
fn grads<B: Block + Clone + 'static>(
    blocks: &[B],
    x: &Var,
    ctx: &[Tensor],
    ctx_vars: &[&Var],
    plan: &Plan,
) -> Result<Vec<Tensor>> {
    let out = run_chain(blocks, x.as_tensor(), ctx, plan)?;
    let w = randn(out.dims(), 7, out.device())?;
    let g = (out * w)?.sum_all()?.backward()?;
    let mut all = vec![g.get(x).expect("gradient reaches the chain input").clone()];
    for v in ctx_vars {
        all.push(g.get(v).expect("gradient reaches the context").clone());
    }
    Ok(all)
}

fn assert_same(a: &[Tensor], b: &[Tensor], what: &str) -> Result<()> {
    for (i, (a, b)) in a.iter().zip(b).enumerate() {
        let e = rel_err(a, b)?;
        assert!(
            e <= 1e-5,
            "{what}: gradient {i} differs, relative error {e}"
        );
    }
    Ok(())
}

/// Every policy gives the plain graph's gradient and recomputes exactly the blocks its plan
/// checkpoints, each once, counted as extra forward passes (multi-block segments included): small
/// budgets checkpoint (`budget:55` recomputes all 9 blocks, `budget:80` the last 6), one above the
/// store-all peak recomputes none (the control).
#[test]
fn every_policy_matches_the_plain_graph() -> Result<()> {
    let (n, d) = (9, 16);
    let calls = Arc::new(AtomicUsize::new(0));
    let blocks = counted_chain(n, d, &calls)?;
    let x = Var::from_tensor(&randn(&[5, d], 1, &Device::Cpu)?)?;
    let reference = grads(&blocks, &x, &[], &[], &Policy::None.plan(n, None).unwrap())?;
    let costs = vec![
        BlockCost {
            input_bytes: 1,
            graph_bytes: 10,
            backward_bytes: 20,
            vjp_bytes: None,
        };
        n
    ];
    // (policy, blocks it recomputes)
    let policies = [
        (Policy::BLOCKS, n),
        (Policy::EveryK(2), n),
        (Policy::EveryK(4), n),
        (Policy::Sqrt, n),
        (Policy::LastN(3), 3),
        (Policy::LastN(n), n),
        (Policy::Budget(55), n),
        (Policy::Budget(80), 6),
        (Policy::Budget(1000), 0),
    ];
    for (p, recomputed) in policies {
        let plan = p.plan(n, Some(&costs)).unwrap();
        assert_eq!(plan.recomputed_blocks(), recomputed, "{p}: {plan:?}");
        calls.store(0, Ordering::SeqCst);
        let got = grads(&blocks, &x, &[], &[], &plan)?;
        let forwards = calls.load(Ordering::SeqCst);
        assert_eq!(forwards, n + recomputed, "{p}: forward passes");
        assert_same(&got, &reference, &p.to_string())?;
    }
    Ok(())
}

/// A block that draws its dropout mask (keep 80 %) inside its forward pass from its own seed, so
/// that a recomputed segment draws the same mask again; `ctx` is the rest of [`ResidualMlp`]'s.
#[derive(Clone)]
struct InnerDropout {
    block: ResidualMlp,
    seed: u64,
}

impl Block for InnerDropout {
    fn forward(&self, x: &Tensor, ctx: &[Tensor]) -> Result<Tensor> {
        let keep = Rng::new(self.seed)
            .uniform_tensor(x.dims(), x.device())?
            .ge(0.2)?
            .to_dtype(candle_core::DType::F32)?;
        let mut all = vec![(keep / 0.8)?];
        all.extend(ctx.iter().cloned());
        self.block.forward(x, &all)
    }
}

/// Dropout masks drawn inside the segments from seeded generators, and a differentiable context
/// matrix shared by every block: the input's gradient is bitwise the plain graph's under every
/// policy, and so is the shared matrix's where each segment is one block; a multi-block segment
/// sums the matrix's per-block gradients in another order (measured: 5.0e-8 relative under sqrt).
#[test]
fn multi_input_and_stochastic_segments() -> Result<()> {
    let (n, d) = (6, 12);
    let dev = Device::Cpu;
    let blocks: Vec<InnerDropout> = chain(n, d)?
        .into_iter()
        .enumerate()
        .map(|(i, block)| InnerDropout {
            block,
            seed: 42 + i as u64,
        })
        .collect();
    let x = Var::from_tensor(&randn(&[4, d], 2, &dev)?)?;
    let c = Var::from_tensor(&(randn(&[d, d], 3, &dev)? * 0.2)?)?;
    let ctx = [c.as_tensor().clone()];
    let reference = grads(
        &blocks,
        &x,
        &ctx,
        &[&c],
        &Policy::None.plan(n, None).unwrap(),
    )?;
    // (policy, whether every segment is one block)
    for (p, single) in [
        (Policy::BLOCKS, true),
        (Policy::Sqrt, false),
        (Policy::LastN(2), true),
    ] {
        let got = grads(&blocks, &x, &ctx, &[&c], &p.plan(n, None).unwrap())?;
        let (gx, gc) = ((&got[0], &reference[0]), (&got[1], &reference[1]));
        assert!(
            bits(gx.0)? == bits(gx.1)?,
            "{p}: d/dx {}",
            rel_err(gx.0, gx.1)?
        );
        let e = rel_err(gc.0, gc.1)?;
        if single {
            assert!(bits(gc.0)? == bits(gc.1)?, "{p}: d/dC {e}");
        } else {
            assert!(e <= 2e-7, "{p}: d/dC relative error {e}");
        }
    }
    Ok(())
}

/// A checkpointed segment whose body is itself a checkpointed chain (two levels).
#[test]
fn nested_segments() -> Result<()> {
    let (n, d) = (4, 8);
    let blocks = chain(n, d)?;
    let x = Var::from_tensor(&randn(&[3, d], 4, &Device::Cpu)?)?;
    let reference = grads(&blocks, &x, &[], &[], &Policy::None.plan(n, None).unwrap())?;
    let inner = blocks.clone();
    let out = checkpoint(&[x.as_tensor().clone()], move |ins| {
        run_chain(
            &inner,
            &ins[0],
            &[],
            &Policy::BLOCKS.plan(inner.len(), None).unwrap(),
        )
    })?;
    let w = randn(out.dims(), 7, out.device())?;
    let g = (out * w)?.sum_all()?.backward()?;
    assert_same(
        &[g.get(&x).expect("gradient reaches x").clone()],
        &reference,
        "nested",
    )
}

/// Width split: an MLP over 10 rows with shared differentiable weights, evaluated in chunks of
/// 1, 3 and 10 rows; gradients for the rows and the shared weight equal the direct graph.
#[test]
fn chunked_matches_direct() -> Result<()> {
    let dev = Device::Cpu;
    let rows = Var::from_tensor(&randn(&[10, 6], 5, &dev)?)?;
    let w = Var::from_tensor(&randn(&[4, 6], 6, &dev)?)?;
    let noise = randn(&[10, 4], 8, &dev)?; // a non-differentiable batched input
    let f = |b: &[Tensor], s: &[Tensor]| -> Result<Tensor> {
        crate::autodiff::ops::linear(&b[0], &s[0], None)?.tanh()? + &b[1]
    };
    let weights = randn(&[10, 4], 9, &dev)?;
    let run = |out: Tensor| -> Result<Vec<Tensor>> {
        let g = (out * &weights)?.sum_all()?.backward()?;
        Ok(vec![
            g.get(&rows).expect("rows grad").clone(),
            g.get(&w).expect("weight grad").clone(),
        ])
    };
    let reference = run(f(
        &[rows.as_tensor().clone(), noise.clone()],
        &[w.as_tensor().clone()],
    )?)?;
    for chunk in [1, 3, 10] {
        let out = chunked(
            &[rows.as_tensor().clone(), noise.clone()],
            &[w.as_tensor().clone()],
            chunk,
            std::sync::Arc::new(f),
        )?;
        assert_same(&run(out)?, &reference, &format!("chunk {chunk}"))?;
    }
    Ok(())
}

/// Nothing is tracked → the checkpoint is a plain forward and builds no node.
#[test]
fn untracked_inputs_make_no_node() -> Result<()> {
    let x = randn(&[2, 3], 1, &Device::Cpu)?;
    let y = checkpoint(&[x], |ins| ins[0].exp())?;
    assert!(!y.track_op());
    Ok(())
}

/// A residual MLP block whose VJP is its own recorded graph's, counting the calls (its kept form
/// keeps that graph, counted in `kept`).
#[derive(Clone)]
struct CountedVjp {
    block: ResidualMlp,
    calls: std::sync::Arc<std::sync::atomic::AtomicUsize>,
    kept: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl Block for CountedVjp {
    fn forward(&self, x: &Tensor, ctx: &[Tensor]) -> Result<Tensor> {
        self.block.forward(x, ctx)
    }

    fn input_vjp(&self, x: &Tensor, ctx: &[Tensor], g: &Tensor) -> Result<Option<Tensor>> {
        self.calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let x = Var::from_tensor(x)?;
        let grads = (self.block.forward(x.as_tensor(), ctx)? * g)?
            .sum_all()?
            .backward()?;
        Ok(grads.get(&x).cloned())
    }

    fn has_input_vjp(&self) -> bool {
        true
    }

    fn forward_kept(&self, x: &Tensor, ctx: &[Tensor]) -> Result<Option<(Tensor, KeptVjp)>> {
        self.kept.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let x = Var::from_tensor(x)?;
        let out = self.block.forward(x.as_tensor(), ctx)?;
        let value = out.detach();
        let vjp: KeptVjp = Box::new(move |g| {
            let grads = (out * g)?.sum_all()?.backward()?;
            grads
                .get(&x)
                .cloned()
                .ok_or_else(|| candle_core::Error::Msg("no gradient reached x".into()))
        });
        Ok(Some((value, vjp)))
    }
}

/// Blocks with hand-written VJPs: checkpointed segments use them, and unchecked ones use their
/// kept forms; a tracked context makes both record graphs instead.
#[test]
fn multi_block_segments_use_the_blocks_own_vjps() -> Result<()> {
    let (n, d) = (6, 16);
    let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let kept = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let blocks: Vec<CountedVjp> = chain(n, d)?
        .into_iter()
        .map(|block| CountedVjp {
            block,
            calls: calls.clone(),
            kept: kept.clone(),
        })
        .collect();
    let graph = chain(n, d)?;
    let x = Var::from_tensor(&randn(&[5, d], 1, &Device::Cpu)?)?;
    let w = randn(&[5, d], 7, &Device::Cpu)?;
    let grad = |policy: Policy| -> Result<Tensor> {
        let plan = policy.plan(n, None).unwrap();
        let out = run_chain(&blocks, x.as_tensor(), &[], &plan)?;
        let g = (out * &w)?.sum_all()?.backward()?;
        Ok(g.get(&x).expect("gradient reaches the chain input").clone())
    };
    let plain = Policy::None.plan(n, None).unwrap();
    let reference = grads(&graph, &x, &[], &[], &plain)?;
    for (policy, vjps, kepts) in [
        (Policy::None, 0, n),
        (Policy::EveryK(4), n, 0),
        (Policy::Sqrt, n, 0),
        (Policy::LastN(3), 3, n - 3),
    ] {
        calls.store(0, std::sync::atomic::Ordering::SeqCst);
        kept.store(0, std::sync::atomic::Ordering::SeqCst);
        let g = grad(policy)?;
        let used = calls.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(used, vjps, "{policy}: block VJPs called");
        let used = kept.load(std::sync::atomic::Ordering::SeqCst);
        assert_eq!(used, kepts, "{policy}: kept forwards");
        assert_same(&[g], &reference[..1], &policy.to_string())?;
    }
    // A tracked context makes every segment recompute with a graph instead.
    let mask = Var::from_tensor(&Tensor::ones(
        (5, 1),
        candle_core::DType::F32,
        &Device::Cpu,
    )?)?;
    calls.store(0, std::sync::atomic::Ordering::SeqCst);
    kept.store(0, std::sync::atomic::Ordering::SeqCst);
    for plan in [Policy::EveryK(2), Policy::None] {
        let plan = plan.plan(n, None).unwrap();
        run_chain(&blocks, x.as_tensor(), &[mask.as_tensor().clone()], &plan)?
            .sum_all()?
            .backward()?;
    }
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 0);
    assert_eq!(kept.load(std::sync::atomic::Ordering::SeqCst), 0);
    Ok(())
}
