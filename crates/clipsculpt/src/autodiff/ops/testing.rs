//! Test helpers: seeded random tensors, an f32 tensor's bits (for bitwise comparisons) and a central
//! finite-difference gradient check (in f64).

use candle_core::{DType, Device, Result, Tensor, Var};

use crate::autodiff::rng::Rng;

/// A seeded standard-normal f32 tensor.
pub(crate) fn randn(shape: &[usize], seed: u64, dev: &Device) -> Result<Tensor> {
    Rng::new(seed).normal_tensor(shape, dev)
}

/// The bits of an f32 tensor's elements, in order.
pub(crate) fn bits(t: &Tensor) -> Result<Vec<u32>> {
    Ok(t.flatten_all()?
        .to_vec1::<f32>()?
        .into_iter()
        .map(f32::to_bits)
        .collect())
}

/// Checks `d/dx Σ c ⊙ f(x)` for every input against central differences, all in f64.
/// `c` is a fixed random weighting so that every output element matters.
pub(crate) fn check_grad(inputs: &[Tensor], f: impl Fn(&[Tensor]) -> Result<Tensor>) -> Result<()> {
    let inputs: Vec<Tensor> = inputs
        .iter()
        .map(|t| t.to_dtype(DType::F64))
        .collect::<Result<_>>()?;
    let vars: Vec<Var> = inputs.iter().map(Var::from_tensor).collect::<Result<_>>()?;
    let tensors: Vec<Tensor> = vars.iter().map(|v| v.as_tensor().clone()).collect();
    let out = f(&tensors)?;
    let c = randn(out.dims(), 99, out.device())?.to_dtype(DType::F64)?;
    let loss = |ts: &[Tensor]| -> Result<f64> { (f(ts)? * &c)?.sum_all()?.to_scalar::<f64>() };
    let grads = (&out * &c)?.sum_all()?.backward()?;
    let eps = 1e-5;
    for (i, var) in vars.iter().enumerate() {
        let analytic = grads
            .get(var)
            .unwrap_or_else(|| panic!("input {i} received no gradient"))
            .flatten_all()?
            .to_vec1::<f64>()?;
        let base = inputs[i].flatten_all()?.to_vec1::<f64>()?;
        for j in 0..base.len() {
            let probe = |delta: f64| -> Result<f64> {
                let mut v = base.clone();
                v[j] += delta;
                let mut ts = inputs.clone();
                ts[i] = Tensor::from_vec(v, inputs[i].shape(), inputs[i].device())?;
                loss(&ts)
            };
            let numeric = (probe(eps)? - probe(-eps)?) / (2.0 * eps);
            let err = (numeric - analytic[j]).abs() / (1.0 + numeric.abs());
            assert!(
                err < 1e-6,
                "input {i}[{j}]: analytic {} vs numeric {numeric}",
                analytic[j]
            );
        }
    }
    Ok(())
}
