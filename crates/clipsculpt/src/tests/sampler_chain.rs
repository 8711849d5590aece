//! The sampler's last Heun steps as a differentiable chain (`shap_e::sampler_chain`): its forward
//! is the sampler's, bit for bit; under nested checkpointing (sampler steps, and the prior's blocks
//! inside them) its gradient with respect to the state is bitwise equal to the un-checkpointed
//! graph's, and the conditioning's is equal up to the order in which the steps' shares are summed;
//! both match central finite differences in f64.

use candle_core::{DType, Device, Result, Tensor, Var};

use super::prior_grad::random_prior;
use crate::autodiff::checkpoint::Policy;
use crate::autodiff::rng::Rng;
use crate::shap_e::sampler::sample_latents_from;
use crate::shap_e::{
    Denoiser, HeunDiscreteScheduler, PriorTransformer, SamplerChain, SchedulerConfig,
};

const STEPS: usize = 6;
const FIRST: usize = 3;
const GUIDANCE: f32 = 3.0;

/// A random prior, its 6-step schedule, text embeddings `(1, 6)` and noise.
fn setup(dtype: DType) -> Result<(PriorTransformer, HeunDiscreteScheduler, Tensor, Tensor)> {
    let prior = random_prior(2, dtype)?;
    let sched = HeunDiscreteScheduler::new(&SchedulerConfig::shap_e(), STEPS)?;
    let mut rng = Rng::new(21);
    let dev = Device::Cpu;
    let embeds = rng.normal_tensor(&[1, 6], &dev)?.to_dtype(dtype)?;
    let noise = rng.normal_tensor(&[1, 12 * 8], &dev)?.to_dtype(dtype)?;
    Ok((prior, sched, embeds, noise))
}

/// The unguided state at the start of Heun step `FIRST`.
fn state_at_first(
    prior: &PriorTransformer,
    sched: &HeunDiscreteScheduler,
    embeds: &Tensor,
    noise: &Tensor,
) -> Result<Tensor> {
    let denoiser = Denoiser::new(prior, embeds, GUIDANCE)?;
    let mut sched = sched.clone();
    let mut x = denoiser.initial_state(&sched, noise)?;
    while !(sched.starts_step() && sched.step_number() == FIRST) {
        let x0 = denoiser.x0(&sched, &x, &Policy::None)?;
        x = sched.step(&x0, &x)?;
    }
    Ok(x)
}

fn bits(t: &Tensor) -> Result<Vec<u64>> {
    Ok(t.to_dtype(DType::F64)?
        .flatten_all()?
        .to_vec1::<f64>()?
        .into_iter()
        .map(f64::to_bits)
        .collect())
}

#[test]
fn the_chain_is_the_samplers_last_steps_bit_for_bit() -> Result<()> {
    let (prior, sched, embeds, noise) = setup(DType::F32)?;
    let whole = sample_latents_from(
        &prior,
        &SchedulerConfig::shap_e(),
        &embeds,
        &noise,
        STEPS,
        GUIDANCE,
    )?;
    let x = state_at_first(&prior, &sched, &embeds, &noise)?;
    let chain = SamplerChain::new(&prior, &sched, FIRST, GUIDANCE, Policy::BLOCKS)?;
    assert_eq!(chain.len(), STEPS - FIRST);
    for policy in [Policy::None, Policy::BLOCKS] {
        let z = chain.run(&x, &embeds, &policy)?;
        assert_eq!(bits(&z)?, bits(&whole)?, "steps under {policy}");
    }
    Ok(())
}

/// Gradients of `Σ w ⊙ chain(x, embeds)` with respect to `x` and `embeds`.
fn chain_vjp(
    chain: &SamplerChain,
    x: &Tensor,
    embeds: &Tensor,
    w: &Tensor,
    step_policy: &Policy,
) -> Result<(Tensor, Tensor)> {
    let (xv, ev) = (Var::from_tensor(x)?, Var::from_tensor(embeds)?);
    let z = chain.run(xv.as_tensor(), ev.as_tensor(), step_policy)?;
    let grads = (z * w)?.sum_all()?.backward()?;
    let get = |v: &Var| {
        grads
            .get(v)
            .cloned()
            .ok_or_else(|| candle_core::Error::Msg("no gradient reached an input".into()))
    };
    Ok((get(&xv)?, get(&ev)?))
}

#[test]
fn nested_checkpointing_is_bitwise_equal_to_the_graph() -> Result<()> {
    let (prior, sched, embeds, noise) = setup(DType::F32)?;
    let x = state_at_first(&prior, &sched, &embeds, &noise)?;
    let w = Rng::new(4).normal_tensor(x.dims(), &Device::Cpu)?;
    let plain = SamplerChain::new(&prior, &sched, FIRST, GUIDANCE, Policy::None)?;
    let (gx, ge) = chain_vjp(&plain, &x, &embeds, &w, &Policy::None)?;
    assert!(gx.abs()?.sum_all()?.to_scalar::<f32>()? > 0.0);
    assert!(ge.abs()?.sum_all()?.to_scalar::<f32>()? > 0.0);
    for prior_policy in [Policy::None, Policy::BLOCKS, Policy::LastN(1)] {
        let chain = SamplerChain::new(&prior, &sched, FIRST, GUIDANCE, prior_policy)?;
        for step_policy in [Policy::None, Policy::BLOCKS, Policy::Sqrt, Policy::LastN(2)] {
            let (cx, ce) = chain_vjp(&chain, &x, &embeds, &w, &step_policy)?;
            let what = format!("steps {step_policy}, prior blocks {prior_policy}");
            assert_eq!(bits(&cx)?, bits(&gx)?, "d/dx, {what}");
            if step_policy == Policy::None {
                assert_eq!(bits(&ce)?, bits(&ge)?, "d/dembeds, {what}");
            } else {
                // Every step adds its share to the conditioning's gradient; checkpointed steps
                // add theirs in another order than the graph does, so the sum may differ in
                // the last bit.
                let rel = ((&ce - &ge)?.sqr()?.sum_all()?.sqrt()?
                    / ge.sqr()?.sum_all()?.sqrt()?)?
                .to_scalar::<f32>()?;
                assert!(rel <= 1e-6, "d/dembeds, {what}: rel {rel:e}");
            }
        }
    }
    Ok(())
}

#[test]
fn chain_gradients_match_finite_differences() -> Result<()> {
    let (prior, sched, embeds, noise) = setup(DType::F64)?;
    let x = state_at_first(&prior, &sched, &embeds, &noise)?;
    let dev = Device::Cpu;
    let w = Rng::new(4)
        .normal_tensor(x.dims(), &dev)?
        .to_dtype(DType::F64)?;
    let chain = SamplerChain::new(&prior, &sched, FIRST, GUIDANCE, Policy::BLOCKS)?;
    let (gx, ge) = chain_vjp(&chain, &x, &embeds, &w, &Policy::BLOCKS)?;
    let loss = |x: &Tensor, e: &Tensor| -> Result<f64> {
        (chain.run(x, e, &Policy::None)? * &w)?
            .sum_all()?
            .to_scalar::<f64>()
    };
    let mut rng = Rng::new(78);
    for k in 0..3 {
        let vx = rng.normal_tensor(x.dims(), &dev)?.to_dtype(DType::F64)?;
        let ve = rng
            .normal_tensor(embeds.dims(), &dev)?
            .to_dtype(DType::F64)?;
        let (ex, ee) = (1e-3 * chain.sigma() as f64, 1e-5);
        let fd_x = (loss(&(&x + (&vx * ex)?)?, &embeds)? - loss(&(&x - (&vx * ex)?)?, &embeds)?)
            / (2.0 * ex);
        let fd_e = (loss(&x, &(&embeds + (&ve * ee)?)?)? - loss(&x, &(&embeds - (&ve * ee)?)?)?)
            / (2.0 * ee);
        let an_x = (&gx * &vx)?.sum_all()?.to_scalar::<f64>()?;
        let an_e = (&ge * &ve)?.sum_all()?.to_scalar::<f64>()?;
        eprintln!("direction {k}: x fd {fd_x:.9} vjp {an_x:.9}; embeds fd {fd_e:.9} vjp {an_e:.9}");
        for (fd, an) in [(fd_x, an_x), (fd_e, an_e)] {
            assert!(
                (fd - an).abs() <= 1e-5 * an.abs().max(1.0),
                "finite difference {fd} vs vjp {an}"
            );
        }
    }
    Ok(())
}
