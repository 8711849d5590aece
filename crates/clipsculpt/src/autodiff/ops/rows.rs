//! The composed (device-generic) forms of the ops' backward, run over row chunks: each chunk's
//! temporaries are a slice of the full tensors', and each result is written into one output, so
//! a chain of candle ops peaks near its output's size instead of several times it. Every op in
//! those chains works row by row, so the result is bitwise the unchunked chain's.

use candle_core::{Device, Result, Tensor, D};

/// Elements per chunk: 4 MiB of f32.
const CHUNK_ELEMS: usize = 1 << 20;

/// Whether the CPU's fused kernels run. The `composite-ops` feature turns them off, so that the
/// CPU runs (and its heap counter measures) the composed ops every other device runs.
const CPU_FUSED: bool = !cfg!(feature = "composite-ops");

/// Whether an op on `device` runs the CPU's fused kernel ([`CPU_FUSED`] on the CPU) rather than
/// the composed ops.
pub(crate) fn fused_on(device: &Device) -> bool {
    CPU_FUSED && device.is_cpu()
}

/// `f` over row chunks of `inputs`, tensors of one shape `(.., n)` seen as `(rows, n)`; the
/// result has that shape and the dtype `f` returns.
pub(crate) fn by_rows(
    inputs: &[&Tensor],
    f: impl Fn(&[Tensor]) -> Result<Tensor>,
) -> Result<Tensor> {
    let Some(first) = inputs.first() else {
        candle_core::bail!("by_rows: no inputs (bug)");
    };
    let shape = first.shape().clone();
    let n = first.dim(D::Minus1)?.max(1);
    let rows = first.elem_count() / n;
    let step = (CHUNK_ELEMS / n).max(1);
    let whole: Vec<Tensor> = inputs.iter().map(|t| (*t).clone()).collect();
    if rows <= step {
        return f(&whole);
    }
    let flat = whole
        .iter()
        .map(|t| t.contiguous()?.reshape((rows, n)))
        .collect::<Result<Vec<_>>>()?;
    let mut out: Option<Tensor> = None;
    for start in (0..rows).step_by(step) {
        let len = step.min(rows - start);
        let parts = flat
            .iter()
            .map(|t| t.narrow(0, start, len))
            .collect::<Result<Vec<_>>>()?;
        let part = f(&parts)?.contiguous()?;
        let dst = match &out {
            Some(o) => o,
            None => out.insert(Tensor::zeros((rows, n), part.dtype(), part.device())?),
        };
        dst.slice_set(&part, 0, start)?;
    }
    match out {
        Some(o) => o.reshape(shape),
        None => candle_core::bail!("by_rows: no rows (bug)"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Chunked, a row-wise chain gives bitwise the unchunked result, for shapes of one and of
    /// several chunks (with a short last chunk).
    #[test]
    fn chunks_give_the_whole_result_bitwise() -> Result<()> {
        let dev = Device::Cpu;
        let f = |p: &[Tensor]| -> Result<Tensor> {
            let m = p[0].mean_keepdim(D::Minus1)?;
            (p[0].broadcast_sub(&m)?.exp()? * &p[1])?.sqr()
        };
        for (rows, n) in [(3, 5), (1500, 1024), (7, 1 << 20)] {
            let x = Tensor::randn(0f32, 1.0, (rows, n), &dev)?;
            let g = Tensor::randn(0f32, 1.0, (rows, n), &dev)?;
            let whole = f(&[x.clone(), g.clone()])?;
            let chunked = by_rows(&[&x, &g], f)?;
            assert_eq!(chunked.dims(), whole.dims());
            let diff = (chunked - whole)?.abs()?.max_all()?.to_scalar::<f32>()?;
            assert_eq!(diff, 0.0, "rows {rows}, n {n}");
        }
        Ok(())
    }
}
