//! Custom vector–Jacobian products inside candle's ordinary graph.
//!
//! [`attach`] takes an output that was computed *without* a graph (on detached inputs) and inserts
//! it into candle's autograd graph as one node whose backward is a closure of ours. This is the one
//! mechanism behind every differentiable building block here: fused LayerNorm and softmax with an
//! analytic backward, the frozen-weight linear (input gradient only, no dead weight gradient), and
//! checkpointed segments (the backward recomputes the segment). A plain `loss.backward()` drives it.
//!
//! candle's custom ops take at most three tensor arguments; with more differentiable inputs they
//! are flattened and concatenated into one packed argument (a copy of the inputs, not of the
//! activations inside the node).

use std::sync::{Arc, Mutex};

use candle_core::{backprop::GradStore, Shape, Storage, Tensor};
use candle_core::{CpuStorage, CudaStorage, CustomOp1, CustomOp2, CustomOp3, Layout, Result};

/// What a backward closure receives. All tensors are detached.
pub(crate) struct Vjp<'a> {
    /// The node's inputs, in the order given to [`attach`].
    pub(crate) inputs: &'a [Tensor],
    /// The node's output.
    pub(crate) output: &'a Tensor,
    /// The gradient of the loss with respect to the output.
    pub(crate) grad: &'a Tensor,
    needs: &'a [bool],
}

impl Vjp<'_> {
    /// Whether input `i` tracks a gradient (only those gradients are used; skip the others).
    pub(crate) fn needs(&self, i: usize) -> bool {
        self.needs.get(i).copied().unwrap_or(false)
    }
}

/// The backward closure: one gradient (or `None`) per input, same order as the inputs.
pub(crate) type VjpFn = dyn Fn(&Vjp) -> Result<Vec<Option<Tensor>>> + Send + Sync;

/// Inserts `output` (computed from `inputs` without a graph) into the autograd graph, with `vjp`
/// as its backward. If no input tracks a gradient, `output` is returned unchanged (no node).
///
/// The node keeps the inputs and the output alive, nothing else.
pub(crate) fn attach(
    name: &'static str,
    output: Tensor,
    inputs: &[&Tensor],
    vjp: Arc<VjpFn>,
) -> Result<Tensor> {
    let tracked: Vec<usize> = (0..inputs.len())
        .filter(|&i| inputs[i].track_op())
        .collect();
    if tracked.is_empty() {
        return Ok(output);
    }
    let output = output.detach();
    let op = Attached {
        name,
        out: Mutex::new(Some(output)),
        inputs: inputs.iter().map(|t| t.detach()).collect(),
        tracked: tracked.clone(),
        needs: inputs.iter().map(|t| t.track_op()).collect(),
        packed: tracked.len() > 3,
        vjp,
    };
    let args: Vec<&Tensor> = tracked.iter().map(|&i| inputs[i]).collect();
    match args.as_slice() {
        [a] => a.apply_op1(op),
        [a, b] => a.apply_op2(b, op),
        [a, b, c] => a.apply_op3(b, c, op),
        many => {
            let flat = many
                .iter()
                .map(|t| t.flatten_all())
                .collect::<Result<Vec<_>>>()?;
            Tensor::cat(&flat, 0)?.apply_op1(op)
        }
    }
}

/// The gradients of `Σ out ⊙ g` for everything behind `out`: candle's backward with `g` handed to
/// `out` as its gradient, instead of through the product and sum such a loss would build (two
/// `out`-sized tensors and their gradients fewer). The gradients are bitwise those of that loss.
pub(crate) fn backward_with_grad(out: &Tensor, g: &Tensor) -> Result<GradStore> {
    let g = g.detach();
    let seed = Tensor::zeros((), out.dtype(), out.device())?;
    attach(
        "seed",
        seed,
        &[out],
        Arc::new(move |_| Ok(vec![Some(g.clone())])),
    )?
    .backward()
}

/// Like [`attach`], with a closure instead of an `Arc`.
#[cfg(test)]
fn attach_fn<F>(name: &'static str, output: Tensor, inputs: &[&Tensor], vjp: F) -> Result<Tensor>
where
    F: Fn(&Vjp) -> Result<Vec<Option<Tensor>>> + Send + Sync + 'static,
{
    attach(name, output, inputs, Arc::new(vjp))
}

struct Attached {
    name: &'static str,
    /// The precomputed output, handed over to candle on the (single) forward call.
    out: Mutex<Option<Tensor>>,
    inputs: Vec<Tensor>,
    tracked: Vec<usize>,
    needs: Vec<bool>,
    packed: bool,
    vjp: Arc<VjpFn>,
}

impl Attached {
    fn take_output(&self) -> Result<(Storage, Shape)> {
        let out = self
            .out
            .lock()
            .map_err(|_| candle_core::Error::Msg("vjp output lock poisoned (bug)".into()))?
            .take()
            .ok_or_else(|| candle_core::Error::Msg("vjp node forwarded twice (bug)".into()))?;
        let out = if out.is_contiguous() && out.layout().start_offset() == 0 {
            out
        } else {
            out.copy()?
        };
        let n = out.elem_count();
        let (storage, layout) = out.storage_and_layout();
        let storage = match &*storage {
            Storage::Cpu(cpu) => Storage::Cpu(cpu_prefix(cpu, n)),
            other => other.try_clone(layout)?,
        };
        Ok((storage, out.shape().clone()))
    }

    fn cpu(&self) -> Result<(CpuStorage, Shape)> {
        match self.take_output()? {
            (Storage::Cpu(s), shape) => Ok((s, shape)),
            _ => candle_core::bail!("{}: output is not on the cpu like its inputs", self.name),
        }
    }

    fn cuda(&self) -> Result<(CudaStorage, Shape)> {
        match self.take_output()? {
            (Storage::Cuda(s), shape) => Ok((s, shape)),
            _ => candle_core::bail!("{}: output is not on cuda like its inputs", self.name),
        }
    }

    /// Runs the user closure and returns the gradients of the tracked inputs, in order.
    fn grads(&self, res: &Tensor, grad: &Tensor) -> Result<Vec<Option<Tensor>>> {
        let (output, grad) = (res.detach(), grad.detach());
        let grads = (self.vjp)(&Vjp {
            inputs: &self.inputs,
            output: &output,
            grad: &grad,
            needs: &self.needs,
        })?;
        if grads.len() != self.inputs.len() {
            candle_core::bail!(
                "{}: vjp returned {} gradients for {} inputs (bug)",
                self.name,
                grads.len(),
                self.inputs.len()
            );
        }
        let mut grads: Vec<Option<Tensor>> =
            grads.into_iter().map(|g| g.map(|g| g.detach())).collect();
        Ok(self.tracked.iter().map(|&i| grads[i].take()).collect())
    }

    fn packed_grad(&self, grads: Vec<Option<Tensor>>) -> Result<Option<Tensor>> {
        let flat = self
            .tracked
            .iter()
            .zip(grads)
            .map(|(&i, g)| match g {
                Some(g) => g.flatten_all(),
                None => self.inputs[i].zeros_like()?.flatten_all(),
            })
            .collect::<Result<Vec<_>>>()?;
        Tensor::cat(&flat, 0).map(Some)
    }
}

/// Copies the first `n` elements of a CPU storage (storages of fresh op outputs have exactly `n`).
fn cpu_prefix(cpu: &CpuStorage, n: usize) -> CpuStorage {
    macro_rules! prefix {
        ($($v:ident),*) => {
            match cpu {
                $(CpuStorage::$v(v) if v.len() > n => CpuStorage::$v(v[..n].to_vec()),)*
                other => other.clone(),
            }
        };
    }
    prefix!(U8, U32, I16, I32, I64, BF16, F16, F32, F64)
}

impl CustomOp1 for Attached {
    fn name(&self) -> &'static str {
        self.name
    }
    fn cpu_fwd(&self, _: &CpuStorage, _: &Layout) -> Result<(CpuStorage, Shape)> {
        self.cpu()
    }
    fn cuda_fwd(&self, _: &CudaStorage, _: &Layout) -> Result<(CudaStorage, Shape)> {
        self.cuda()
    }
    fn bwd(&self, _: &Tensor, res: &Tensor, grad: &Tensor) -> Result<Option<Tensor>> {
        let mut grads = self.grads(res, grad)?;
        if self.packed {
            self.packed_grad(grads)
        } else {
            Ok(grads.pop().flatten())
        }
    }
}

impl CustomOp2 for Attached {
    fn name(&self) -> &'static str {
        self.name
    }
    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        self.cpu()
    }
    fn cuda_fwd(
        &self,
        _: &CudaStorage,
        _: &Layout,
        _: &CudaStorage,
        _: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        self.cuda()
    }
    fn bwd(
        &self,
        _: &Tensor,
        _: &Tensor,
        res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let mut g = self.grads(res, grad)?.into_iter();
        Ok((g.next().flatten(), g.next().flatten()))
    }
}

impl CustomOp3 for Attached {
    fn name(&self) -> &'static str {
        self.name
    }
    fn cpu_fwd(
        &self,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
        _: &CpuStorage,
        _: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        self.cpu()
    }
    fn cuda_fwd(
        &self,
        _: &CudaStorage,
        _: &Layout,
        _: &CudaStorage,
        _: &Layout,
        _: &CudaStorage,
        _: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        self.cuda()
    }
    fn bwd(
        &self,
        _: &Tensor,
        _: &Tensor,
        _: &Tensor,
        res: &Tensor,
        grad: &Tensor,
    ) -> Result<(Option<Tensor>, Option<Tensor>, Option<Tensor>)> {
        let mut g = self.grads(res, grad)?.into_iter();
        Ok((g.next().flatten(), g.next().flatten(), g.next().flatten()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    /// y = x² computed outside the graph, with the vjp g·2x attached: backward gives 2x.
    #[test]
    fn attached_square_has_its_gradient() -> Result<()> {
        let x = Var::new(&[1f32, -2., 3.], &Device::Cpu)?;
        let y = x.as_tensor().detach().sqr()?;
        let y = attach_fn("square", y, &[x.as_tensor()], |v| {
            Ok(vec![Some((v.grad * (&v.inputs[0] * 2.0)?)?)])
        })?;
        assert!(y.track_op());
        let grads = y.sum_all()?.backward()?;
        let g = grads
            .get(&x)
            .expect("gradient reaches x")
            .to_vec1::<f32>()?;
        assert_eq!(g, vec![2., -4., 6.]);
        Ok(())
    }

    /// Five tracked inputs are packed into one argument; y = Σ_i c_i·x_i gives dy/dx_i = c_i.
    #[test]
    fn many_inputs_are_packed() -> Result<()> {
        let xs: Vec<Var> = (0..5)
            .map(|i| Var::new(&[i as f32, 1.0], &Device::Cpu))
            .collect::<Result<_>>()?;
        let ins: Vec<&Tensor> = xs.iter().map(|v| v.as_tensor()).collect();
        let mut y = Tensor::zeros(2, candle_core::DType::F32, &Device::Cpu)?;
        for (i, x) in ins.iter().enumerate() {
            y = (y + (x.detach() * (i as f64 + 1.0))?)?;
        }
        let y = attach_fn("weighted_sum", y, &ins, |v| {
            (0..v.inputs.len())
                .map(|i| Ok(Some((v.grad * (i as f64 + 1.0))?)))
                .collect()
        })?;
        let grads = y.sum_all()?.backward()?;
        for (i, x) in xs.iter().enumerate() {
            let g = grads.get(x).expect("every input gets a gradient");
            assert_eq!(g.to_vec1::<f32>()?, vec![i as f32 + 1.0; 2]);
        }
        Ok(())
    }

    #[test]
    fn untracked_inputs_build_no_node() -> Result<()> {
        let x = Tensor::new(&[1f32, 2.], &Device::Cpu)?;
        let y = attach_fn("noop", x.sqr()?, &[&x], |_| Ok(vec![None]))?;
        assert!(!y.track_op());
        Ok(())
    }
}
