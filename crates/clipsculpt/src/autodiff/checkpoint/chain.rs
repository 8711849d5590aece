//! The chain driver: runs N blocks under a [`Plan`], each checkpointed segment as one node of
//! candle's graph (see [`super::segment`]), each block of a kept segment as one node whose
//! backward is its hand-written VJP over the activations it kept ([`Block::forward_kept`]), or as
//! its recorded graph. Backward is the caller's ordinary `loss.backward()`.

use std::sync::{Arc, Mutex};

use candle_core::{Result, Tensor, Var};

use super::budget::BlockCost;
use super::plan::Plan;
use super::segment::recompute_unchunked;
use crate::autodiff::vjp::{attach, backward_with_grad, Vjp};
use crate::device::memory::{has_peak, SpanMeter};

/// One block of a chain: `x -> block(x, context)`.
///
/// `context` holds the tensors every block sees (attention masks, latent-derived weights, random
/// draws made outside); those that track a gradient receive one, summed over the blocks. The
/// block's own weights are constants to a checkpointed segment: train under [`Plan`]s without
/// checkpointed segments (`Policy::None`).
pub trait Block: Send + Sync {
    /// The block's forward pass. Must be deterministic given its inputs.
    fn forward(&self, x: &Tensor, context: &[Tensor]) -> Result<Tensor>;

    /// The gradient of `Σ forward(x) ⊙ g` with respect to `x`, computed without a graph and bitwise
    /// equal to the graph's, for blocks with a hand-written VJP that keeps fewer activations than
    /// a recorded graph. `None` (the default) when there is none; a checkpointed single block is
    /// then recomputed with a graph, as it is whenever `context` tracks a gradient.
    fn input_vjp(&self, _x: &Tensor, _context: &[Tensor], _g: &Tensor) -> Result<Option<Tensor>> {
        Ok(None)
    }

    /// Whether [`Self::input_vjp`] is written (returns `Some`); a block that writes it says so, or
    /// checkpointed segments recompute it with a graph.
    fn has_input_vjp(&self) -> bool {
        false
    }

    /// The forward pass keeping what [`Self::input_vjp`] would recompute, and that VJP over it:
    /// the output and the gradient of `Σ forward(x) ⊙ g` with respect to `x` for a given `g`,
    /// bitwise the recorded graph's, from fewer kept tensors than the graph holds and with no
    /// recomputation. `None` (the default) when there is none, or when the block's own weights
    /// track a gradient (their gradients need the recorded graph).
    fn forward_kept(&self, _x: &Tensor, _context: &[Tensor]) -> Result<Option<(Tensor, KeptVjp)>> {
        Ok(None)
    }
}

/// The input gradient of a block's [`Block::forward_kept`] for its output gradient; it owns the
/// kept activations and frees them as it runs.
pub type KeptVjp = Box<dyn FnOnce(&Tensor) -> Result<Tensor> + Send>;

/// Runs `blocks` over `x` following `plan`.
pub fn run_chain<B>(blocks: &[B], x: &Tensor, context: &[Tensor], plan: &Plan) -> Result<Tensor>
where
    B: Block + Clone + 'static,
{
    let covered: usize = plan.segments.iter().map(|s| s.blocks.len()).sum();
    if covered != blocks.len() {
        candle_core::bail!(
            "checkpoint plan covers {covered} blocks, chain has {} (bug)",
            blocks.len()
        );
    }
    let mut h = x.clone();
    for seg in &plan.segments {
        let seg_blocks = &blocks[seg.blocks.clone()];
        h = if seg.checkpointed {
            checkpoint_segment(seg_blocks.to_vec(), &h, context)?
        } else {
            seg_blocks
                .iter()
                .try_fold(h, |h, b| forward_tracked(b, &h, context))?
        };
    }
    Ok(h)
}

/// One checkpointed segment: forward without a graph, keeping `x`; backward by the blocks'
/// [`Block::input_vjp`]s where they have them ([`segment_vjp`]), else by recomputing the segment
/// with a graph.
fn checkpoint_segment<B>(blocks: Vec<B>, x: &Tensor, context: &[Tensor]) -> Result<Tensor>
where
    B: Block + 'static,
{
    let ctx: Vec<Tensor> = context.iter().map(|t| t.detach()).collect();
    let out = forward_all(&blocks, &x.detach(), &ctx)?;
    let mut inputs = vec![x];
    inputs.extend(context);
    let lean = Arc::new(move |v: &Vjp| -> Result<Vec<Option<Tensor>>> {
        let (x, ctx) = (&v.inputs[0], &v.inputs[1..]);
        let context_tracks = (1..v.inputs.len()).any(|i| v.needs(i));
        if !context_tracks {
            if let Some(gx) = segment_vjp(&blocks, x, ctx, v.grad)? {
                let mut grads = vec![Some(gx)];
                grads.resize(v.inputs.len(), None);
                return Ok(grads);
            }
        }
        recompute_unchunked(v, &|_: &[Tensor], ins: &[Tensor]| {
            forward_all(&blocks, &ins[0], &ins[1..])
        })
    });
    attach("checkpoint", out, &inputs, lean)
}

/// The gradient of `Σ segment(x) ⊙ g` with respect to `x` by the blocks' hand-written VJPs, last
/// block first: the blocks' inputs are recomputed without a graph, and each is dropped once its
/// block's VJP has used it. `None`, before any recomputation, when a block has no hand-written VJP.
fn segment_vjp<B: Block>(
    blocks: &[B],
    x: &Tensor,
    ctx: &[Tensor],
    g: &Tensor,
) -> Result<Option<Tensor>> {
    if !blocks.iter().all(Block::has_input_vjp) {
        return Ok(None);
    }
    let mut xs = vec![x.clone()];
    for b in &blocks[..blocks.len().saturating_sub(1)] {
        let next = b.forward(&xs[xs.len() - 1], ctx)?;
        xs.push(next);
    }
    let mut g = g.clone();
    for b in blocks.iter().rev() {
        let Some(x) = xs.pop() else {
            candle_core::bail!("checkpointed segment: a block input is missing (bug)");
        };
        match b.input_vjp(&x, ctx, &g)? {
            Some(gx) => g = gx,
            None => return Ok(None),
        }
    }
    Ok(Some(g))
}

/// One block of a kept (not checkpointed) segment: where `x` tracks a gradient, `context` does not
/// and the block has a [`Block::forward_kept`], one graph node whose backward is that VJP; else the
/// block's recorded graph.
fn forward_tracked<B: Block>(b: &B, x: &Tensor, context: &[Tensor]) -> Result<Tensor> {
    if !x.track_op() || context.iter().any(Tensor::track_op) {
        return b.forward(x, context);
    }
    let Some((out, vjp)) = b.forward_kept(&x.detach(), context)? else {
        return b.forward(x, context);
    };
    let vjp = Mutex::new(Some(vjp));
    let back = Arc::new(move |v: &Vjp| -> Result<Vec<Option<Tensor>>> {
        let vjp = vjp
            .lock()
            .map_err(|_| candle_core::Error::Msg("kept block lock poisoned (bug)".into()))?
            .take()
            .ok_or_else(|| {
                candle_core::Error::Msg(
                    "a kept block's backward ran twice: its activations are freed by the first"
                        .into(),
                )
            })?;
        Ok(vec![Some(vjp(v.grad)?)])
    });
    attach("kept", out, &[x], back)
}

fn forward_all<B: Block>(blocks: &[B], x: &Tensor, context: &[Tensor]) -> Result<Tensor> {
    blocks
        .iter()
        .try_fold(x.clone(), |h, b| b.forward(&h, context))
}

/// Measures each block's [`BlockCost`] by running it once forward and backward from `x` under
/// the device's meter (CPU: the counting allocator; CUDA: the memory pool), and its hand-written
/// VJP when it has one and `context` tracks no gradient (else checkpointed segments recompute with
/// a graph). Returns `None` when the device has no high-water mark (`device::memory::has_peak`).
pub fn measure_costs<B: Block>(
    blocks: &[B],
    x: &Tensor,
    context: &[Tensor],
) -> Result<Option<Vec<BlockCost>>> {
    if !has_peak(x.device()) {
        return Ok(None);
    }
    let context_tracks = context.iter().any(|t| t.track_op());
    let mut costs = Vec::with_capacity(blocks.len());
    let mut h = x.detach();
    for b in blocks {
        let input_bytes = h.elem_count() * h.dtype().size_in_bytes();
        let var = Var::from_tensor(&h)?;
        let Some(meter) = SpanMeter::start(x.device())? else {
            return Ok(None);
        };
        let out = forward_tracked(b, var.as_tensor(), context)?;
        let graph_bytes = meter.live_above_base()?;
        let next = out.detach();
        let g = next.ones_like()?;
        drop(backward_with_grad(&out, &g)?);
        let backward_bytes = meter.peak_above_base()?.saturating_sub(graph_bytes);
        drop((out, var, meter));
        let vjp_bytes = if context_tracks {
            None
        } else {
            vjp_peak(b, &h, context, &g)?
        };
        costs.push(BlockCost {
            input_bytes,
            graph_bytes,
            backward_bytes,
            vjp_bytes,
        });
        h = next;
    }
    Ok(Some(costs))
}

/// Peak bytes above what is live while `b`'s hand-written VJP runs at `x` with output gradient
/// `g`; `None` when it has none.
fn vjp_peak<B: Block>(b: &B, x: &Tensor, context: &[Tensor], g: &Tensor) -> Result<Option<usize>> {
    if !b.has_input_vjp() {
        return Ok(None);
    }
    let Some(meter) = SpanMeter::start(x.device())? else {
        return Ok(None);
    };
    let gx = b.input_vjp(x, context, g)?;
    gx.map(|_| meter.peak_above_base()).transpose()
}
