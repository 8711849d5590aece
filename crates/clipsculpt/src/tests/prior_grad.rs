//! The Shap-E prior's vector-Jacobian product: against PyTorch autograd on diffusers'
//! `PriorTransformer` (fixture from `tests/fixtures/shap_e/make_prior_vjp.py`), against central
//! finite differences in f64. Unchecked, the blocks keep their activations and give the recorded
//! graph's gradient bitwise. Under every checkpoint policy it is bitwise equal to the unchecked one:
//! `tests/prior_grad.rs`, in a process of its own, since `budget:` policies measure a block with the
//! process-wide heap counter.

use std::path::{Path, PathBuf};

use crate::autodiff::checkpoint::{run_chain, Block, Policy};
use crate::autodiff::ops::testing::{bits, randn};
use crate::autodiff::rng::Rng;
use crate::random::random_frozen_in;
use crate::shap_e::config::PriorConfig;
use crate::shap_e::decoder::load_prior;
use crate::shap_e::PriorTransformer;
use candle_core::{DType, Device, Result, Tensor, Var};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/shap_e")
}

fn rel_err(a: &Tensor, b: &Tensor) -> f32 {
    let num = (a - b).unwrap().sqr().unwrap().sum_all().unwrap();
    let den = b.sqr().unwrap().sum_all().unwrap();
    (num.to_scalar::<f32>().unwrap() / den.to_scalar::<f32>().unwrap().max(1e-30)).sqrt()
}

/// Gradients of `Σ w ⊙ prior(x, t, proj)` with respect to `x` and `proj`.
fn vjp(
    prior: &PriorTransformer,
    x: &Tensor,
    t: f32,
    proj: &Tensor,
    w: &Tensor,
    policy: &Policy,
) -> Result<(Tensor, Tensor)> {
    let (xv, pv) = (Var::from_tensor(x)?, Var::from_tensor(proj)?);
    let out = prior.forward_with_policy(xv.as_tensor(), t, pv.as_tensor(), policy)?;
    let grads = (out * w)?.sum_all()?.backward()?;
    let get = |v: &Var| {
        grads
            .get(v)
            .cloned()
            .ok_or_else(|| candle_core::Error::Msg("no gradient reached an input".into()))
    };
    Ok((get(&xv)?, get(&pv)?))
}

#[test]
fn prior_vjp_matches_pytorch_autograd() -> Result<()> {
    let fx = candle_core::safetensors::load(dir().join("prior_vjp.safetensors"), &Device::Cpu)?;
    for name in ["a", "b"] {
        let prior = load_prior(
            &dir().join(format!("prior_{name}")),
            DType::F32,
            &Device::Cpu,
        )
        .map_err(candle_core::Error::wrap)?
        .model;
        let k = |s: &str| &fx[&format!("{name}.vjp.{s}")];
        let t = k("t").to_vec1::<f32>()?[0];
        for policy in [Policy::None, Policy::BLOCKS] {
            let (gx, gp) = vjp(&prior, k("x"), t, k("proj"), k("w"), &policy)?;
            let (ex, ep) = (rel_err(&gx, k("grad_x")), rel_err(&gp, k("grad_proj")));
            eprintln!("prior_{name} ({policy}): d/dx rel {ex:e}, d/dproj rel {ep:e}");
            assert!(ex <= 1e-5 && ep <= 1e-5, "prior_{name} {policy}: {ex} {ep}");
        }
    }
    Ok(())
}

/// A random prior of `layers` blocks (2 heads × 8, 12 tokens of 8 channels) in `dtype`.
pub(super) fn random_prior(layers: usize, dtype: DType) -> Result<PriorTransformer> {
    let cfg: PriorConfig = serde_json::from_value(serde_json::json!({
        "num_attention_heads": 2, "attention_head_dim": 8, "embedding_dim": 8,
        "num_embeddings": 12, "embedding_proj_dim": 6, "time_embed_dim": 32,
        "num_layers": layers, "clip_embed_dim": 16, "additional_embeddings": 0,
        "time_embed_act_fn": "gelu", "norm_in_type": "layer",
        "encoder_hid_proj_type": null, "added_emb_type": null
    }))
    .map_err(candle_core::Error::wrap)?;
    random_frozen_in(5, &Device::Cpu, dtype, |vb| PriorTransformer::new(vb, &cfg))
}

/// Inputs `(x, proj, w)` for [`random_prior`] with batch 2.
fn inputs(dtype: DType) -> Result<(Tensor, Tensor, Tensor)> {
    let mut rng = Rng::new(9);
    let dev = Device::Cpu;
    let x = rng.normal_tensor(&[2, 12, 8], &dev)?.to_dtype(dtype)?;
    let proj = (rng.normal_tensor(&[2, 6], &dev)? * 2.0)?.to_dtype(dtype)?;
    let w = rng.normal_tensor(&[2, 12, 16], &dev)?.to_dtype(dtype)?;
    Ok((x, proj, w))
}

/// Unchecked, the prior's blocks keep the activations of their hand-written VJPs instead of their
/// recorded graphs, and give the graph's output and input gradient bitwise.
#[test]
fn kept_blocks_give_the_recorded_graphs_gradient_bitwise() -> Result<()> {
    let prior = random_prior(4, DType::F32)?;
    let blocks = prior.blocks();
    let dev = Device::Cpu;
    let h = Var::from_tensor(&randn(&[2, 14, 16], 3, &dev)?)?;
    let w = randn(&[2, 14, 16], 4, &dev)?;
    assert!(blocks[0].forward_kept(h.as_tensor(), &[])?.is_some());
    let grad = |out: &Tensor| -> Result<Tensor> {
        let grads = (out * &w)?.sum_all()?.backward()?;
        grads
            .get(&h)
            .cloned()
            .ok_or_else(|| candle_core::Error::Msg("no gradient reached h".into()))
    };
    let graph = blocks
        .iter()
        .try_fold(h.as_tensor().clone(), |x, b| b.forward(&x, &[]))?;
    let plan = Policy::None
        .plan(blocks.len(), None)
        .map_err(candle_core::Error::wrap)?;
    let kept = run_chain(blocks, h.as_tensor(), &[], &plan)?;
    assert_eq!(bits(&kept)?, bits(&graph)?, "outputs differ");
    assert_eq!(
        bits(&grad(&kept)?)?,
        bits(&grad(&graph)?)?,
        "gradients differ"
    );
    Ok(())
}

#[test]
fn prior_vjp_matches_finite_differences() -> Result<()> {
    let prior = random_prior(3, DType::F64)?;
    let (x, proj, w) = inputs(DType::F64)?;
    let t = 612.75;
    let (gx, gp) = vjp(&prior, &x, t, &proj, &w, &Policy::BLOCKS)?;
    let loss = |x: &Tensor, p: &Tensor| -> Result<f64> {
        (prior.forward(x, t, p)? * &w)?
            .sum_all()?
            .to_scalar::<f64>()
    };
    // Directional derivatives along random directions, central differences.
    let mut rng = Rng::new(77);
    for k in 0..3 {
        let vx = rng
            .normal_tensor(x.dims(), &Device::Cpu)?
            .to_dtype(DType::F64)?;
        let vp = rng
            .normal_tensor(proj.dims(), &Device::Cpu)?
            .to_dtype(DType::F64)?;
        let eps = 1e-4;
        let fd_x = (loss(&(&x + (&vx * eps)?)?, &proj)? - loss(&(&x - (&vx * eps)?)?, &proj)?)
            / (2.0 * eps);
        let fd_p = (loss(&x, &(&proj + (&vp * eps)?)?)? - loss(&x, &(&proj - (&vp * eps)?)?)?)
            / (2.0 * eps);
        let an_x = (&gx * &vx)?.sum_all()?.to_scalar::<f64>()?;
        let an_p = (&gp * &vp)?.sum_all()?.to_scalar::<f64>()?;
        eprintln!("direction {k}: x fd {fd_x:.9} vjp {an_x:.9}; proj fd {fd_p:.9} vjp {an_p:.9}");
        for (fd, an) in [(fd_x, an_x), (fd_p, an_p)] {
            assert!(
                (fd - an).abs() <= 1e-5 * an.abs().max(1.0),
                "finite difference {fd} vs vjp {an}"
            );
        }
    }
    Ok(())
}
