//! AdamW whose moments can be saved and restored (`train-toy --resume`): candle's [`AdamW`]
//! update, op for op (so training is bit for bit what it was with candle's), over the named
//! variables of a [`VarMap`], with the moments by name.
//!
//! [`AdamW`]: candle_nn::AdamW

use std::collections::HashMap;

use candle_core::{Result, Tensor, Var};
use candle_nn::{ParamsAdamW, VarMap};

/// One variable and its moments.
struct Slot {
    name: String,
    var: Var,
    m: Var,
    v: Var,
}

/// AdamW over a [`VarMap`]'s variables, with the moments exposed by name ([`NamedAdamW::state`]).
pub struct NamedAdamW {
    slots: Vec<Slot>,
    step_t: usize,
    params: ParamsAdamW,
}

/// Prefixes of the moments' keys in [`NamedAdamW::state`].
const FIRST: &str = "adamw.m.";
const SECOND: &str = "adamw.v.";

impl NamedAdamW {
    /// An optimizer of every float variable of `varmap`, moments at zero.
    pub fn new(varmap: &VarMap, params: ParamsAdamW) -> Result<Self> {
        let data = varmap
            .data()
            .lock()
            .map_err(|_| candle_core::Error::Msg("the VarMap's lock is poisoned".into()))?;
        let mut slots: Vec<Slot> = data
            .iter()
            .filter(|(_, var)| var.dtype().is_float())
            .map(|(name, var)| {
                Ok(Slot {
                    name: name.clone(),
                    var: var.clone(),
                    m: Var::zeros(var.shape(), var.dtype(), var.device())?,
                    v: Var::zeros(var.shape(), var.dtype(), var.device())?,
                })
            })
            .collect::<Result<_>>()?;
        slots.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(Self {
            slots,
            step_t: 0,
            params,
        })
    }

    /// Sets the learning rate of the next steps.
    pub fn set_learning_rate(&mut self, lr: f64) {
        self.params.lr = lr;
    }

    /// Backpropagates `loss` and takes one step (candle's `Optimizer::backward_step`).
    pub fn backward_step(&mut self, loss: &Tensor) -> Result<()> {
        let grads = loss.backward()?;
        self.step_t += 1;
        let p = &self.params;
        let (lr, beta1, beta2) = (p.lr, p.beta1, p.beta2);
        let scale_m = 1f64 / (1f64 - beta1.powi(self.step_t as i32));
        let scale_v = 1f64 / (1f64 - beta2.powi(self.step_t as i32));
        for s in &self.slots {
            let Some(g) = grads.get(&s.var) else {
                continue;
            };
            let next_m = ((s.m.as_tensor() * beta1)? + (g * (1.0 - beta1))?)?;
            let next_v = ((s.v.as_tensor() * beta2)? + (g.sqr()? * (1.0 - beta2))?)?;
            let m_hat = (&next_m * scale_m)?;
            let v_hat = (&next_v * scale_v)?;
            let next_theta = (s.var.as_tensor() * (1f64 - lr * p.weight_decay))?;
            let adjusted = (m_hat / (v_hat.sqrt()? + p.eps)?)?;
            let next_theta = (next_theta - (adjusted * lr)?)?;
            s.m.set(&next_m)?;
            s.v.set(&next_v)?;
            s.var.set(&next_theta)?;
        }
        Ok(())
    }

    /// The steps taken and a copy of every moment, keyed `adamw.m.NAME` / `adamw.v.NAME`.
    pub fn state(&self) -> Result<(usize, HashMap<String, Tensor>)> {
        let mut out = HashMap::new();
        for s in &self.slots {
            out.insert(format!("{FIRST}{}", s.name), s.m.as_tensor().copy()?);
            out.insert(format!("{SECOND}{}", s.name), s.v.as_tensor().copy()?);
        }
        Ok((self.step_t, out))
    }

    /// Restores [`NamedAdamW::state`]: an error names a missing moment.
    pub fn restore(&mut self, step_t: usize, tensors: &HashMap<String, Tensor>) -> Result<()> {
        for s in &self.slots {
            for (prefix, moment) in [(FIRST, &s.m), (SECOND, &s.v)] {
                let key = format!("{prefix}{}", s.name);
                let t = tensors
                    .get(&key)
                    .ok_or_else(|| candle_core::Error::Msg(format!("no moment {key}")))?;
                moment.set(t)?;
            }
        }
        self.step_t = step_t;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{DType, Device};
    use candle_nn::{AdamW, Optimizer, VarBuilder};

    /// A two-layer map trained for `steps` by `step`, from seeded weights; its final weights.
    fn train(steps: usize, mut step: impl FnMut(&VarMap, &Tensor)) -> Result<Vec<Vec<f32>>> {
        let dev = Device::Cpu;
        let varmap = clipsculpt::random::random_varmap(7, &dev, |vb| {
            Ok((
                candle_nn::linear(8, 16, vb.pp("a"))?,
                candle_nn::linear(16, 4, vb.pp("b"))?,
            ))
        })?;
        let vb = VarBuilder::from_varmap(&varmap, DType::F32, &dev);
        let (a, b) = (
            candle_nn::linear(8, 16, vb.pp("a"))?,
            candle_nn::linear(16, 4, vb.pp("b"))?,
        );
        let mut rng = clipsculpt::autodiff::rng::Rng::new(3);
        for _ in 0..steps {
            let x = rng.normal_tensor(&[5, 8], &dev)?;
            let y = candle_nn::Module::forward(&b, &candle_nn::Module::forward(&a, &x)?.tanh()?)?;
            step(&varmap, &y.sqr()?.mean_all()?);
        }
        let mut names: Vec<String> = varmap.data().lock().unwrap().keys().cloned().collect();
        names.sort();
        let data = varmap.data().lock().unwrap();
        names
            .iter()
            .map(|n| data[n].as_tensor().flatten_all()?.to_vec1::<f32>())
            .collect()
    }

    fn params() -> ParamsAdamW {
        ParamsAdamW {
            lr: 1e-2,
            weight_decay: 0.1,
            ..Default::default()
        }
    }

    /// The same training through candle's AdamW and through this one ends at bit-identical
    /// weights; and one stopped after 3 steps and restored from its state into a fresh optimizer
    /// goes on to the same weights too.
    #[test]
    fn matches_candles_adamw_and_resumes_bit_for_bit() -> Result<()> {
        let mut candle_opt: Option<AdamW> = None;
        let theirs = train(6, |vm, loss| {
            let opt =
                candle_opt.get_or_insert_with(|| AdamW::new(vm.all_vars(), params()).unwrap());
            opt.backward_step(loss).unwrap();
        })?;
        let mut ours_opt: Option<NamedAdamW> = None;
        let ours = train(6, |vm, loss| {
            let opt = ours_opt.get_or_insert_with(|| NamedAdamW::new(vm, params()).unwrap());
            opt.backward_step(loss).unwrap();
        })?;
        assert_eq!(theirs, ours);
        let (mut k, mut saved) = (0, None);
        let resumed = train(6, |vm, loss| {
            let mut opt = NamedAdamW::new(vm, params()).unwrap();
            if let Some((t, state)) = &saved {
                opt.restore(*t, state).unwrap();
            }
            opt.backward_step(loss).unwrap();
            k += 1;
            // A fresh optimizer every step, from the saved state: as resuming after each step.
            saved = Some(opt.state().unwrap());
        })?;
        assert_eq!(k, 6);
        assert_eq!(resumed, ours);
        Ok(())
    }
}
