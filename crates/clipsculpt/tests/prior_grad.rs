//! The Shap-E prior's vector-Jacobian product under every checkpoint policy is bitwise equal to
//! the unchecked one (whose blocks keep their activations, bitwise the recorded graph:
//! `src/tests/prior_grad.rs`). Its own test binary: `budget:` policies measure a block's cost with
//! the process-wide heap counter, which the crate's many concurrent unit tests would disturb (the
//! other VJP checks are in `src/tests/prior_grad.rs`).

use candle_core::{DType, Device, Result, Tensor, Var};
use clipsculpt::autodiff::checkpoint::Policy;
use clipsculpt::autodiff::rng::Rng;
use clipsculpt::random::random_frozen_in;
use clipsculpt::shap_e::config::PriorConfig;
use clipsculpt::shap_e::PriorTransformer;

/// Counts heap bytes so that `budget:` policies can measure a block's cost.
#[global_allocator]
static ALLOC: clipsculpt::autodiff::memory::CountingAlloc =
    clipsculpt::autodiff::memory::CountingAlloc;

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

/// A random prior of `layers` blocks (2 heads × 8, 12 tokens of 8 channels) in `dtype`.
fn random_prior(layers: usize, dtype: DType) -> Result<PriorTransformer> {
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

/// Every policy gives the unchecked gradient bitwise, and recomputes the blocks its plan names:
/// `budget:128KiB` (below the store-all peak) checkpoints, so its check compares a recomputed
/// graph; `budget:1GiB` (above it) recomputes nothing and is the control.
#[test]
fn every_checkpoint_policy_gives_the_unchecked_gradient_bitwise() -> Result<()> {
    let layers = 6;
    let prior = random_prior(layers, DType::F32)?;
    let (x, proj, w) = inputs(DType::F32)?;
    let t = 207.5;
    let (rx, rp) = vjp(&prior, &x, t, &proj, &w, &Policy::None)?;
    let bits = |t: &Tensor| -> Result<Vec<u32>> {
        Ok(t.flatten_all()?
            .to_vec1::<f32>()?
            .into_iter()
            .map(f32::to_bits)
            .collect())
    };
    // (policy, blocks it recomputes; `None`: some, fewer than all)
    let policies = [
        (Policy::BLOCKS, Some(layers)),
        (Policy::EveryK(2), Some(layers)),
        (Policy::EveryK(4), Some(layers)),
        (Policy::Sqrt, Some(layers)),
        (Policy::LastN(2), Some(2)),
        (Policy::LastN(layers), Some(layers)),
        (Policy::Budget(128 << 10), None),
        (Policy::Budget(1 << 30), Some(0)),
    ];
    for (p, recomputed) in policies {
        let plan = prior.block_plan(&p, x.dim(0)?)?;
        let n = plan.recomputed_blocks();
        match recomputed {
            Some(want) => assert_eq!(n, want, "{p}: {plan:?}"),
            None => assert!(n > 0 && n < layers, "{p} recomputes {n} blocks: {plan:?}"),
        }
        let (gx, gp) = vjp(&prior, &x, t, &proj, &w, &p)?;
        assert!(bits(&gx)? == bits(&rx)?, "{p}: d/dx differs from none");
        assert!(bits(&gp)? == bits(&rp)?, "{p}: d/dproj differs from none");
    }
    Ok(())
}
