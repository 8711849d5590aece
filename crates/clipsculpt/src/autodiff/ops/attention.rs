//! Unmasked scaled-dot-product attention `o = softmax(q·kᵀ)·v` that never stores its probabilities.
//!
//! The forward and the backward walk the (batch × head) pairs in chunks of at most [`CHUNK_BYTES`] of
//! probabilities, so a `t × t` matrix per pair exists only for one chunk at a time. The node keeps `q`, `k`, `v`
//! and `o`; the backward recomputes each chunk's probabilities `p` and uses
//! `dv = pᵀ·g`, `ds = p ⊙ (g·vᵀ − rowsum(g ⊙ o))`, `dq = ds·k`, `dk = dsᵀ·q`
//! (`rowsum(g ⊙ o)` equals `rowsum(p ⊙ g·vᵀ)`, the softmax backward's row term, and is computed once).
//! The scale is the caller's: fold it into `q`. On the CPU in f32 both run the plain-array kernels
//! of [`crate::kernels::attention`] (pairs in parallel, one thread per pair); elsewhere candle's ops.

use std::sync::Arc;

use candle_core::{DType, Result, Tensor, D};

use super::rows::fused_on;
use super::softmax::softmax_last_dim;
use super::with_f32;
use crate::autodiff::vjp::{attach, Vjp};
use crate::kernels::attention::{attention_f32, attention_grads_f32, Pairs};

/// The most bytes of probabilities (one `t × t` matrix per pair) alive at once, forward or backward.
/// At the published prior's 1026 tokens that is one pair per chunk: the backward's four `t × t`
/// temporaries then take 16 MiB (64 MiB with 16 MiB chunks), at no measurable cost in time.
pub(crate) const CHUNK_BYTES: usize = 4 << 20;

/// `softmax(q·kᵀ)·v` over `(…, t, d)` tensors (same leading dimensions), differentiable in all three.
pub(crate) fn attention(q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor> {
    let dims = q.dims().to_vec();
    let (t, d) = (dims[dims.len() - 2], dims[dims.len() - 1]);
    let pairs = q.elem_count() / (t * d);
    let flat = |x: &Tensor| x.detach().contiguous()?.reshape((pairs, t, d));
    let (qf, kf, vf) = (flat(q)?, flat(k)?, flat(v)?);
    let step = chunk_pairs(t, q.dtype().size_in_bytes());
    let o = if runs_fused(q) {
        let s = Pairs { pairs, t, d };
        let o = with_f32([&qf, &kf, &vf], |[q, k, v]| attention_f32(q, k, v, s))?;
        Tensor::from_vec(o, (pairs, t, d), q.device())?
    } else {
        let o = qf.zeros_like()?;
        for start in (0..pairs).step_by(step) {
            let n = step.min(pairs - start);
            let p = probabilities(&qf.narrow(0, start, n)?, &kf.narrow(0, start, n)?)?;
            o.slice_set(&p.matmul(&vf.narrow(0, start, n)?)?, 0, start)?;
        }
        o
    };
    let o = o.reshape(dims.as_slice())?;
    attach(
        "attention",
        o,
        &[q, k, v],
        Arc::new(move |vjp: &Vjp| backward(vjp, pairs, t, d, step)),
    )
}

/// Whether [`attention`] of `q` runs the CPU's f32 kernels.
fn runs_fused(q: &Tensor) -> bool {
    fused_on(q.device()) && q.dtype() == DType::F32
}

/// Pairs per chunk: as many `t × t` matrices as fit in [`CHUNK_BYTES`], at least one.
fn chunk_pairs(t: usize, elem_bytes: usize) -> usize {
    (CHUNK_BYTES / (t * t * elem_bytes).max(1)).max(1)
}

/// `softmax(q·kᵀ)` for `(n, t, d)` chunks.
fn probabilities(q: &Tensor, k: &Tensor) -> Result<Tensor> {
    softmax_last_dim(&q.matmul(&k.t()?)?)
}

fn backward(v: &Vjp, pairs: usize, t: usize, d: usize, step: usize) -> Result<Vec<Option<Tensor>>> {
    let inputs = [&v.inputs[0], &v.inputs[1], &v.inputs[2]];
    let needs = [v.needs(0), v.needs(1), v.needs(2)];
    let [dq, dk, dv] = gradients(inputs, v.output, v.grad, needs, (pairs, t, d, step))?;
    Ok(vec![dq, dk, dv])
}

/// The gradients of [`attention`] for `q`, `k`, `v` (those in `needs`), given its output `o` and
/// the output gradient `g`: bitwise what its node's backward gives (for hand-written VJPs).
pub(crate) fn attention_grads(
    qkv: [&Tensor; 3],
    o: &Tensor,
    g: &Tensor,
) -> Result<[Option<Tensor>; 3]> {
    let dims = qkv[0].dims().to_vec();
    let (t, d) = (dims[dims.len() - 2], dims[dims.len() - 1]);
    let pairs = qkv[0].elem_count() / (t * d);
    let step = chunk_pairs(t, qkv[0].dtype().size_in_bytes());
    gradients(qkv, o, g, [true; 3], (pairs, t, d, step))
}

/// The backward over chunks of `step` pairs; `sizes` is `(pairs, t, d, step)`.
fn gradients(
    qkv: [&Tensor; 3],
    o: &Tensor,
    g: &Tensor,
    needs: [bool; 3],
    sizes: (usize, usize, usize, usize),
) -> Result<[Option<Tensor>; 3]> {
    let (pairs, t, d, step) = sizes;
    let shape = qkv[0].shape().clone();
    let flat = |x: &Tensor| x.contiguous()?.reshape((pairs, t, d));
    let (q, k, val) = (flat(qkv[0])?, flat(qkv[1])?, flat(qkv[2])?);
    let (g, o) = (flat(g)?, flat(o)?);
    let shaped = |t: Option<Tensor>| t.map(|t| t.reshape(&shape)).transpose();
    if runs_fused(&q) {
        let s = Pairs { pairs, t, d };
        let grads = with_f32([&q, &k, &val, &o, &g], |[q, k, v, o, g]| {
            attention_grads_f32([q, k, v], o, g, s)
        })?;
        let mut out = [None, None, None];
        for ((slot, grad), need) in out.iter_mut().zip(grads).zip(needs) {
            if need {
                *slot = shaped(Some(Tensor::from_vec(grad, (pairs, t, d), q.device())?))?;
            }
        }
        return Ok(out);
    }
    let row = (&g * &o)?.sum_keepdim(D::Minus1)?;
    // The gradients are written chunk by chunk into their final tensors (no parts to join).
    let grad = |i: usize| needs[i].then(|| q.zeros_like()).transpose();
    let (dq, dk, dv) = (grad(0)?, grad(1)?, grad(2)?);
    for start in (0..pairs).step_by(step) {
        let n = step.min(pairs - start);
        let at = |x: &Tensor| x.narrow(0, start, n);
        let (qc, kc, vc, gc) = (at(&q)?, at(&k)?, at(&val)?, at(&g)?);
        let p = probabilities(&qc, &kc)?;
        if let Some(dv) = &dv {
            dv.slice_set(&p.t()?.matmul(&gc)?, 0, start)?;
        }
        let ds = (&p * gc.matmul(&vc.t()?)?.broadcast_sub(&at(&row)?)?)?;
        drop(p);
        if let Some(dq) = &dq {
            dq.slice_set(&ds.matmul(&kc)?, 0, start)?;
        }
        if let Some(dk) = &dk {
            dk.slice_set(&ds.t()?.matmul(&qc)?, 0, start)?;
        }
    }
    Ok([shaped(dq)?, shaped(dk)?, shaped(dv)?])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autodiff::ops::softmax;
    use crate::autodiff::ops::testing::{check_grad, randn};
    use candle_core::{Device, Var};

    fn composed(q: &Tensor, k: &Tensor, v: &Tensor) -> Result<Tensor> {
        softmax(&q.matmul(&k.t()?)?, D::Minus1)?.matmul(v)
    }

    #[test]
    fn gradient_matches_finite_differences() -> Result<()> {
        let dev = Device::Cpu;
        let (q, k, v) = (
            randn(&[2, 3, 5, 4], 1, &dev)?,
            randn(&[2, 3, 5, 4], 2, &dev)?,
            randn(&[2, 3, 5, 4], 3, &dev)?,
        );
        check_grad(&[q, k, v], |x| attention(&x[0], &x[1], &x[2]))
    }

    /// Chunked over many pairs (the published prior's shape per pair is 1027 tokens: several chunks) and equal
    /// to softmax-then-matmul with a graph, forward and backward.
    #[test]
    fn matches_the_composed_graph_across_chunks() -> Result<()> {
        let dev = Device::Cpu;
        let t = 1100;
        assert!(chunk_pairs(t, 4) < 6, "the test must span several chunks");
        let shape = [2, 3, t, 8];
        let vars: Vec<Var> = (0..3)
            .map(|s| Var::from_tensor(&randn(&shape, 10 + s, &dev)?))
            .collect::<Result<_>>()?;
        let w = randn(&shape, 20, &dev)?;
        let [q, k, v] = [0, 1, 2].map(|i| vars[i].as_tensor().clone());
        let ours = attention(&q, &k, &v)?;
        let theirs = composed(&q, &k, &v)?;
        let max_err = |a: &Tensor, b: &Tensor| -> Result<f32> {
            let scale = b.abs()?.max_all()?.to_scalar::<f32>()?;
            Ok((a - b)?.abs()?.max_all()?.to_scalar::<f32>()? / scale)
        };
        assert!(max_err(&ours, &theirs)? < 1e-5);
        let g_ours = (&ours * &w)?.sum_all()?.backward()?;
        let g_theirs = (&theirs * &w)?.sum_all()?.backward()?;
        for (i, var) in vars.iter().enumerate() {
            let (a, b) = (g_ours.get(var), g_theirs.get(var));
            let (Some(a), Some(b)) = (a, b) else {
                panic!("input {i} received no gradient");
            };
            let err = max_err(a, b)?;
            assert!(err < 1e-4, "input {i}: relative error {err}");
        }
        Ok(())
    }
}
