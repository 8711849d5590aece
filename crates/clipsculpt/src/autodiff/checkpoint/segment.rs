//! Checkpointed segments: the forward keeps only the segment's inputs, and backward recomputes the
//! segment (with a graph) and takes its vector–Jacobian product. The segment is one node in
//! candle's ordinary graph (see [`crate::autodiff::vjp`]), so a plain `loss.backward()` drives
//! every segment, nested ones included; nothing is wired by hand.
//!
//! The same node can split its batch ("width split", deferred backpropagation): evaluate all
//! chunks without a graph, and in backward recompute chunk by chunk, each with its slice of the
//! output gradient, accumulating the gradient of the shared inputs. Peak memory then depends on
//! the chunk size, not the batch size, at the price of one extra forward.
//!
//! Segments must be deterministic: draw random numbers outside (see [`crate::autodiff::rng`]) and
//! pass them in as inputs.

use std::sync::Arc;

use candle_core::{Result, Tensor, Var};

use crate::autodiff::vjp::{attach, backward_with_grad, Vjp};

/// A segment: `(batched slices, shared inputs) -> output` whose first dimension has one row per
/// batched row. For an unchunked segment `batched` is empty.
pub(crate) type SegmentFn = dyn Fn(&[Tensor], &[Tensor]) -> Result<Tensor> + Send + Sync;

/// A segment as the backward borrows it (any lifetime).
type RecomputeFn<'a> = dyn Fn(&[Tensor], &[Tensor]) -> Result<Tensor> + 'a;

/// Runs `f(inputs)` as a checkpointed segment: only `inputs` are kept; backward recomputes.
///
/// Inputs that track a gradient receive one; the others (masks, random draws) are passed through.
/// (Chains of blocks use [`super::chain`]'s segments, which prefer the blocks' hand-written VJPs;
/// this general form is what the mechanism's tests drive.)
#[cfg(test)]
pub(crate) fn checkpoint<F>(inputs: &[Tensor], f: F) -> Result<Tensor>
where
    F: Fn(&[Tensor]) -> Result<Tensor> + Send + Sync + 'static,
{
    chunked(
        &[],
        inputs,
        usize::MAX,
        Arc::new(move |_, shared| f(shared)),
    )
}

/// Runs `f` over row chunks of `batched` (split along dim 0 into pieces of `chunk` rows) with the
/// same `shared` inputs, concatenating the outputs along dim 0; backward recomputes one chunk at a
/// time. Gradients flow to every tracked batched and shared input.
pub(crate) fn chunked(
    batched: &[Tensor],
    shared: &[Tensor],
    chunk: usize,
    f: Arc<SegmentFn>,
) -> Result<Tensor> {
    let rows = match batched.first() {
        Some(t) => t.dim(0)?,
        None => 1,
    };
    for t in batched {
        if t.dim(0)? != rows {
            candle_core::bail!(
                "chunked segment: batched inputs disagree on rows ({rows} vs {:?})",
                t.shape()
            );
        }
    }
    let ranges = chunk_ranges(rows, chunk.max(1));
    let shared_d: Vec<Tensor> = shared.iter().map(|t| t.detach()).collect();
    let mut outs = Vec::with_capacity(ranges.len());
    for &(start, len) in &ranges {
        let slices = narrow_detached(batched, start, len)?;
        let out = f(&slices, &shared_d)?;
        if !batched.is_empty() && out.dim(0)? != len {
            candle_core::bail!(
                "chunked segment: a chunk of {len} rows produced {:?}",
                out.shape()
            );
        }
        outs.push(out.detach());
    }
    let output = if outs.len() == 1 {
        outs.remove(0)
    } else {
        Tensor::cat(&outs, 0)?
    };
    let inputs: Vec<&Tensor> = batched.iter().chain(shared).collect();
    let nb = batched.len();
    attach(
        "checkpoint",
        output,
        &inputs,
        Arc::new(move |v: &Vjp| recompute(v, nb, &ranges, f.as_ref())),
    )
}

/// The backward of an unchunked segment `f(inputs)`: recompute with a graph, take the VJP.
pub(crate) fn recompute_unchunked(v: &Vjp, f: &RecomputeFn) -> Result<Vec<Option<Tensor>>> {
    recompute(v, 0, &chunk_ranges(1, usize::MAX), f)
}

/// The backward: per chunk, recompute with `Var` inputs and take the VJP with the gradient slice.
fn recompute(
    v: &Vjp,
    nb: usize,
    ranges: &[(usize, usize)],
    f: &RecomputeFn,
) -> Result<Vec<Option<Tensor>>> {
    let (batched, shared) = v.inputs.split_at(nb);
    let shared_vars: Vec<Option<Var>> = (0..shared.len())
        .map(|i| {
            v.needs(nb + i)
                .then(|| Var::from_tensor(&shared[i]))
                .transpose()
        })
        .collect::<Result<_>>()?;
    let shared_in: Vec<Tensor> = shared_vars
        .iter()
        .zip(shared)
        .map(|(var, t)| {
            var.as_ref()
                .map_or_else(|| t.clone(), |var| var.as_tensor().clone())
        })
        .collect();
    let mut shared_grads: Vec<Option<Tensor>> = vec![None; shared.len()];
    let mut batched_grads: Vec<Vec<Tensor>> = vec![Vec::new(); nb];
    for &(start, len) in ranges {
        let slice_vars: Vec<Option<Var>> = (0..nb)
            .map(|i| {
                v.needs(i)
                    .then(|| Var::from_tensor(&batched[i].narrow(0, start, len)?))
                    .transpose()
            })
            .collect::<Result<_>>()?;
        let slices: Vec<Tensor> = (0..nb)
            .map(|i| match &slice_vars[i] {
                Some(var) => Ok(var.as_tensor().clone()),
                None => batched[i].narrow(0, start, len),
            })
            .collect::<Result<_>>()?;
        let g = if nb == 0 {
            v.grad.clone()
        } else {
            v.grad.narrow(0, start, len)?
        };
        let grads = backward_with_grad(&f(&slices, &shared_in)?, &g)?;
        for (i, var) in slice_vars.iter().enumerate() {
            if let Some(var) = var {
                let gi = grads
                    .get(var)
                    .cloned()
                    .map_or_else(|| var.zeros_like(), Ok)?;
                batched_grads[i].push(gi);
            }
        }
        for (acc, var) in shared_grads.iter_mut().zip(&shared_vars) {
            if let Some(g) = var.as_ref().and_then(|v| grads.get(v)) {
                *acc = Some(match acc.take() {
                    Some(a) => (a + g)?,
                    None => g.clone(),
                });
            }
        }
    }
    let mut out: Vec<Option<Tensor>> = batched_grads
        .into_iter()
        .map(|parts| match parts.len() {
            0 => Ok(None),
            1 => Ok(parts.into_iter().next()),
            _ => Tensor::cat(&parts, 0).map(Some),
        })
        .collect::<Result<_>>()?;
    out.extend(shared_grads);
    Ok(out)
}

fn narrow_detached(ts: &[Tensor], start: usize, len: usize) -> Result<Vec<Tensor>> {
    ts.iter()
        .map(|t| Ok(t.narrow(0, start, len)?.detach()))
        .collect()
}

/// `(start, len)` pieces of `rows` of at most `chunk` rows each.
pub(crate) fn chunk_ranges(rows: usize, chunk: usize) -> Vec<(usize, usize)> {
    (0..rows.div_ceil(chunk))
        .map(|i| (i * chunk, chunk.min(rows - i * chunk)))
        .collect()
}
