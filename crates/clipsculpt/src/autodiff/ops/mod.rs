//! Differentiable replacements for candle-nn's fused ops that silently detach the gradient
//! (`layer_norm`, `softmax_last_dim`) and for ops without a backward (`upsample_bilinear2d`), plus attention
//! that recomputes its probabilities in backward instead of storing them.
//! Each runs candle's fast forward and attaches an analytic backward through [`super::vjp`].

mod activation;
mod attention;
mod heads;
mod layer_norm;
mod linear;
mod resize;
mod rows;
mod softmax;

pub(crate) use activation::Activation;
pub(crate) use attention::{attention, attention_grads};
pub(crate) use heads::{merge_heads, merge_heads_scaled, split_heads};
pub(crate) use layer_norm::{layer_norm, layer_norm_input_grad};
pub(crate) use linear::{batched_linear, linear, linear_input_grad};
pub(crate) use resize::resize_bilinear;
pub(crate) use softmax::softmax;

#[cfg(test)]
pub(crate) mod testing;

/// The contiguous part of a CPU storage that `l` describes, for the fused CPU kernels of the ops;
/// `op` names the caller in the error (a non-contiguous input is a bug: callers make it contiguous).
pub(crate) fn contiguous_slice<'a, T>(
    v: &'a [T],
    l: &candle_core::Layout,
    op: &str,
) -> candle_core::Result<&'a [T]> {
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&v[a..b]),
        None => candle_core::bail!("{op}: non-contiguous input (bug)"),
    }
}

/// `f` on the f32 data of contiguous CPU tensors.
pub(crate) fn with_f32<const N: usize, R>(
    ts: [&candle_core::Tensor; N],
    f: impl FnOnce([&[f32]; N]) -> R,
) -> candle_core::Result<R> {
    let guards = ts.map(|t| t.storage_and_layout());
    let mut slices: [&[f32]; N] = [&[]; N];
    for (slot, ((storage, layout), t)) in slices.iter_mut().zip(guards.iter().zip(ts)) {
        let (candle_core::Storage::Cpu(candle_core::CpuStorage::F32(v)), Some((a, b))) =
            (&**storage, layout.contiguous_offsets())
        else {
            candle_core::bail!("a contiguous f32 CPU tensor expected, got {t:?} (bug)");
        };
        *slot = &v[a..b];
    }
    Ok(f(slices))
}
