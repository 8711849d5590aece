//! The pre-LN transformer encoder shared by the text and vision towers (transformers'
//! `CLIPAttention`, `CLIPMLP`, `CLIPEncoderLayer`, `CLIPEncoder` in `models/clip/modeling_clip.py`).
//!
//! Every op is differentiable (our LayerNorm and softmax, frozen-weight linears), and each layer is a
//! checkpoint [`Block`], so the stack runs under any [`Policy`].

use candle_core::{DType, Device, Module, Result, Tensor, D};
use candle_nn::VarBuilder;

use super::config::{Activation, EncoderConfig};
use super::fused::FusedLayer;
use crate::autodiff::checkpoint::{measure_costs, run_chain, Block, Policy};
use crate::autodiff::nn::{layer_norm, linear, LayerNorm, Linear};
use crate::autodiff::ops;

/// Multi-head self-attention (`self_attn`: `q_proj`, `k_proj`, `v_proj`, `out_proj`).
#[derive(Debug, Clone)]
pub(crate) struct Attention {
    q_proj: Linear,
    k_proj: Linear,
    v_proj: Linear,
    out_proj: Linear,
    num_heads: usize,
    head_dim: usize,
}

impl Attention {
    /// Loads the four projections under `vb` (`…self_attn`).
    pub(crate) fn new(vb: VarBuilder, cfg: &EncoderConfig) -> Result<Self> {
        let d = cfg.hidden_size;
        if cfg.num_attention_heads == 0 || !d.is_multiple_of(cfg.num_attention_heads) {
            candle_core::bail!(
                "hidden_size {d} is not divisible by num_attention_heads {}",
                cfg.num_attention_heads
            );
        }
        Ok(Self {
            q_proj: linear(d, d, vb.pp("q_proj"))?,
            k_proj: linear(d, d, vb.pp("k_proj"))?,
            v_proj: linear(d, d, vb.pp("v_proj"))?,
            out_proj: linear(d, d, vb.pp("out_proj"))?,
            num_heads: cfg.num_attention_heads,
            head_dim: d / cfg.num_attention_heads,
        })
    }

    /// Attention of the queries of `queries (batch, q, hidden)` over the keys and values of
    /// `x (batch, tokens, hidden)` → `(batch, q, hidden)`; `mask (q, tokens)` is added to the
    /// scores.
    pub(crate) fn attend(
        &self,
        queries: &Tensor,
        x: &Tensor,
        mask: Option<&Tensor>,
    ) -> Result<Tensor> {
        let (b, tq, d) = queries.dims3()?;
        let heads = |y: Tensor| -> Result<Tensor> {
            let t = y.dim(1)?;
            y.reshape((b, t, self.num_heads, self.head_dim))?
                .transpose(1, 2)?
                .contiguous()
        };
        // softmax(q·kᵀ / √head_dim + mask) · v, with the scale folded into q.
        let q = heads((self.q_proj.forward(queries)? * (self.head_dim as f64).powf(-0.5))?)?;
        let k = heads(self.k_proj.forward(x)?)?;
        let v = heads(self.v_proj.forward(x)?)?;
        let mut scores = q.matmul(&k.t()?)?;
        if let Some(mask) = mask {
            scores = scores.broadcast_add(mask)?;
        }
        let probs = ops::softmax(&scores, D::Minus1)?;
        let y = probs.matmul(&v)?.transpose(1, 2)?.reshape((b, tq, d))?;
        self.out_proj.forward(&y)
    }
}

/// The feed-forward block (`mlp`: `fc1`, activation, `fc2`).
#[derive(Debug, Clone)]
pub(crate) struct Mlp {
    fc1: Linear,
    fc2: Linear,
    act: Activation,
}

impl Mlp {
    /// Loads `fc1` and `fc2` under `vb` (`…mlp`).
    pub(crate) fn new(vb: VarBuilder, cfg: &EncoderConfig) -> Result<Self> {
        Ok(Self {
            fc1: linear(cfg.hidden_size, cfg.intermediate_size, vb.pp("fc1"))?,
            fc2: linear(cfg.intermediate_size, cfg.hidden_size, vb.pp("fc2"))?,
            act: cfg.hidden_act,
        })
    }
}

impl Module for Mlp {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let h = self.fc1.forward(x)?;
        let h = self.act.forward(&h)?;
        self.fc2.forward(&h)
    }
}

/// One pre-LN layer: `x + attn(ln1(x))`, then `h + mlp(ln2(h))`.
///
/// Frozen f32/f64 layers on the CPU run as one fused graph node ([`FusedLayer`]); the others
/// (trainable weights, other devices and dtypes) compose candle ops.
#[derive(Debug, Clone)]
pub(crate) struct EncoderLayer {
    self_attn: Attention,
    layer_norm1: LayerNorm,
    mlp: Mlp,
    layer_norm2: LayerNorm,
    fused: Option<FusedLayer>,
}

impl EncoderLayer {
    /// Loads one layer under `vb` (`…encoder.layers.{i}`).
    pub(crate) fn new(vb: VarBuilder, cfg: &EncoderConfig) -> Result<Self> {
        let (d, eps) = (cfg.hidden_size, cfg.layer_norm_eps);
        let self_attn = Attention::new(vb.pp("self_attn"), cfg)?;
        let layer_norm1 = layer_norm(d, eps, vb.pp("layer_norm1"))?;
        let mlp = Mlp::new(vb.pp("mlp"), cfg)?;
        let layer_norm2 = layer_norm(d, eps, vb.pp("layer_norm2"))?;
        let a = &self_attn;
        let fused = FusedLayer::new(
            [
                (layer_norm1.weight(), layer_norm1.bias()),
                (a.q_proj.weight(), a.q_proj.bias()),
                (a.k_proj.weight(), a.k_proj.bias()),
                (a.v_proj.weight(), a.v_proj.bias()),
                (a.out_proj.weight(), a.out_proj.bias()),
                (layer_norm2.weight(), layer_norm2.bias()),
                (mlp.fc1.weight(), mlp.fc1.bias()),
                (mlp.fc2.weight(), mlp.fc2.bias()),
            ],
            eps,
            cfg.num_attention_heads,
            cfg.hidden_act,
        );
        Ok(Self {
            self_attn,
            layer_norm1,
            mlp,
            layer_norm2,
            fused,
        })
    }

    /// The layer's output for the first `rows` tokens only `(batch, rows, hidden)`; keys and
    /// values still come from every token, so the rows equal those of the full output. A read-out
    /// of the class token needs only this from the last layer (~1/tokens of its queries, output
    /// projection and MLP).
    pub(crate) fn forward_first(
        &self,
        x: &Tensor,
        rows: usize,
        mask: Option<&Tensor>,
    ) -> Result<Tensor> {
        if let Some(fused) = &self.fused {
            if let Some(y) = fused.forward(x, rows, mask)? {
                return Ok(y);
            }
        }
        self.composed(x, rows, mask)
    }

    /// [`EncoderLayer::forward_first`] composed from candle ops.
    fn composed(&self, x: &Tensor, rows: usize, mask: Option<&Tensor>) -> Result<Tensor> {
        let normed = self.layer_norm1.forward(x)?;
        let (queries, residual, mask) = if rows == x.dim(1)? {
            (normed.clone(), x.clone(), mask.cloned())
        } else {
            (
                normed.narrow(1, 0, rows)?,
                x.narrow(1, 0, rows)?,
                mask.map(|m| m.narrow(0, 0, rows)).transpose()?,
            )
        };
        let h = self.self_attn.attend(&queries, &normed, mask.as_ref())?;
        let x = (residual + h)?;
        let h = self.mlp.forward(&self.layer_norm2.forward(&x)?)?;
        x + h
    }
}

impl Block for EncoderLayer {
    /// `context` is empty, or holds the additive attention mask `(tokens, tokens)`.
    fn forward(&self, x: &Tensor, context: &[Tensor]) -> Result<Tensor> {
        self.forward_first(x, x.dim(1)?, context.first())
    }
}

/// The layer stack (`encoder.layers.{i}`).
#[derive(Debug, Clone)]
pub(crate) struct Encoder {
    layers: Vec<EncoderLayer>,
}

impl Encoder {
    /// Loads `num_hidden_layers` layers under `vb` (`…encoder`).
    pub(crate) fn new(vb: VarBuilder, cfg: &EncoderConfig) -> Result<Self> {
        let vb = vb.pp("layers");
        let layers = (0..cfg.num_hidden_layers)
            .map(|i| EncoderLayer::new(vb.pp(i), cfg))
            .collect::<Result<_>>()?;
        Ok(Self { layers })
    }

    /// Runs the stack on `x (batch, tokens, hidden)` with an optional additive `mask`, checkpointed
    /// as `policy` says (a byte budget measures each layer first, on the CPU).
    pub(crate) fn forward(
        &self,
        x: &Tensor,
        mask: Option<&Tensor>,
        policy: &Policy,
    ) -> Result<Tensor> {
        run_layers(&self.layers, x, mask, policy)
    }

    /// The stack's output for the first `rows` tokens only `(batch, rows, hidden)`: every layer
    /// but the last runs as in [`Encoder::forward`] (under `policy`), the last one computes only
    /// those rows ([`EncoderLayer::forward_first`]).
    pub(crate) fn forward_first(
        &self,
        x: &Tensor,
        rows: usize,
        mask: Option<&Tensor>,
        policy: &Policy,
    ) -> Result<Tensor> {
        match self.layers.split_last() {
            Some((last, [])) => last.forward_first(x, rows, mask),
            Some((last, rest)) => {
                last.forward_first(&run_layers(rest, x, mask, policy)?, rows, mask)
            }
            None => x.narrow(1, 0, rows),
        }
    }
}

/// Runs `layers` on `x` under `policy` (a byte budget measures each layer first, on the CPU).
fn run_layers(
    layers: &[EncoderLayer],
    x: &Tensor,
    mask: Option<&Tensor>,
    policy: &Policy,
) -> Result<Tensor> {
    let context: Vec<Tensor> = mask.into_iter().cloned().collect();
    let costs = match policy {
        Policy::Budget(_) => measure_costs(layers, x, &context)?,
        _ => None,
    };
    let plan = policy
        .plan(layers.len(), costs.as_deref())
        .map_err(candle_core::Error::wrap)?;
    run_chain(layers, x, &context, &plan)
}

/// The causal mask `(tokens, tokens)`: 0 on and below the diagonal, −∞ above it.
pub(crate) fn causal_mask(tokens: usize, dtype: DType, device: &Device) -> Result<Tensor> {
    let mask: Vec<f32> = (0..tokens)
        .flat_map(|i| (0..tokens).map(move |j| if j > i { f32::NEG_INFINITY } else { 0.0 }))
        .collect();
    Tensor::from_vec(mask, (tokens, tokens), device)?.to_dtype(dtype)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autodiff::ops::testing::{check_grad, randn};
    use std::collections::HashMap;

    fn tiny(act: Activation) -> EncoderConfig {
        EncoderConfig {
            hidden_size: 8,
            intermediate_size: 6,
            num_hidden_layers: 2,
            num_attention_heads: 2,
            hidden_act: act,
            layer_norm_eps: 1e-5,
        }
    }

    /// Random weights in `dtype` for every key the encoder asks for (recorded from a zero-init
    /// builder).
    fn random_tensors(cfg: &EncoderConfig, dtype: DType) -> Result<HashMap<String, Tensor>> {
        let dev = Device::Cpu;
        let varmap = candle_nn::VarMap::new();
        let vb = VarBuilder::from_varmap(&varmap, DType::F64, &dev);
        Encoder::new(vb, cfg)?;
        let mut ts = HashMap::new();
        let mut names: Vec<(String, Vec<usize>)> = varmap
            .data()
            .lock()
            .unwrap()
            .iter()
            .map(|(name, var)| (name.clone(), var.dims().to_vec()))
            .collect();
        names.sort();
        for (i, (name, dims)) in names.into_iter().enumerate() {
            let t = (randn(&dims, i as u64 + 10, &dev)? * 0.5)?;
            ts.insert(name, t.to_dtype(dtype)?);
        }
        Ok(ts)
    }

    /// A random f64 encoder.
    fn random_encoder(cfg: &EncoderConfig) -> Result<Encoder> {
        let ts = random_tensors(cfg, DType::F64)?;
        Encoder::new(VarBuilder::from_tensors(ts, DType::F64, &Device::Cpu), cfg)
    }

    /// d/dx of the whole causal stack, both activations, against central differences.
    #[test]
    fn encoder_gradient_matches_finite_differences() -> Result<()> {
        for act in [Activation::QuickGelu, Activation::GeluErf] {
            let enc = random_encoder(&tiny(act))?;
            let x = randn(&[2, 3, 8], 1, &Device::Cpu)?;
            let mask = causal_mask(3, DType::F64, &Device::Cpu)?;
            check_grad(&[x], |t| enc.forward(&t[0], Some(&mask), &Policy::None))?;
        }
        Ok(())
    }

    /// With the causal mask, token i sees only tokens ≤ i: changing the last token leaves the
    /// first outputs unchanged.
    #[test]
    fn causal_mask_hides_the_future() -> Result<()> {
        let enc = random_encoder(&tiny(Activation::QuickGelu))?;
        let dev = Device::Cpu;
        let mask = causal_mask(4, DType::F64, &dev)?;
        let x = randn(&[1, 4, 8], 2, &dev)?.to_dtype(DType::F64)?;
        let bump = Tensor::cat(
            &[
                Tensor::zeros((1, 3, 8), DType::F64, &dev)?,
                Tensor::ones((1, 1, 8), DType::F64, &dev)?,
            ],
            1,
        )?;
        let a = enc.forward(&x, Some(&mask), &Policy::None)?;
        let b = enc.forward(&(&x + bump)?, Some(&mask), &Policy::None)?;
        let diff = (a - b)?.abs()?;
        let head = diff.narrow(1, 0, 3)?.max_all()?.to_scalar::<f64>()?;
        let tail = diff.narrow(1, 3, 1)?.max_all()?.to_scalar::<f64>()?;
        assert!(head < 1e-12 && tail > 1e-6, "head {head}, tail {tail}");
        Ok(())
    }

    /// The fused CPU layer equals the composed one, in value and in the input gradient, with and
    /// without the causal mask, all rows and the first rows only: f64 values to rounding, the
    /// rest to f32 precision (the composed LayerNorm's backward computes in f32). The fused
    /// gradient also matches central finite differences in f64.
    #[test]
    fn fused_layer_equals_the_composed_layer() -> Result<()> {
        let dev = Device::Cpu;
        let cfg = EncoderConfig {
            hidden_size: 16,
            intermediate_size: 24,
            num_attention_heads: 4,
            ..tiny(Activation::QuickGelu)
        };
        let enc = random_encoder(&cfg)?;
        let layer = &enc.layers[1];
        assert!(layer.fused.is_some(), "the layer has no fused form");
        for (dtype, tol, gtol) in [(DType::F64, 1e-12, 1e-6), (DType::F32, 2e-5, 2e-5)] {
            let layer = EncoderLayer::new(
                VarBuilder::from_tensors(random_tensors(&cfg, dtype)?, dtype, &dev)
                    .pp("layers")
                    .pp(0),
                &cfg,
            )?;
            let mask = causal_mask(6, dtype, &dev)?;
            for mask in [None, Some(&mask)] {
                for rows in [6, 2] {
                    let x = candle_core::Var::from_tensor(
                        &randn(&[3, 6, 16], 11, &dev)?.to_dtype(dtype)?,
                    )?;
                    let w = randn(&[3, rows, 16], 12, &dev)?.to_dtype(dtype)?;
                    let run = |fused: bool| -> Result<(Tensor, Tensor)> {
                        let y = if fused {
                            let f = layer.fused.as_ref().expect("fused form");
                            f.forward(x.as_tensor(), rows, mask)?
                                .expect("fused applies")
                        } else {
                            layer.composed(x.as_tensor(), rows, mask)?
                        };
                        let grads = (&y * &w)?.sum_all()?.backward()?;
                        let g = grads.get(&x).cloned().expect("gradient reaches x");
                        Ok((y, g))
                    };
                    let ((yf, gf), (yc, gc)) = (run(true)?, run(false)?);
                    let rel = |a: &Tensor, b: &Tensor| -> Result<f64> {
                        let a = a.to_dtype(DType::F64)?;
                        let b = b.to_dtype(DType::F64)?;
                        let scale = b.abs()?.max_all()?.to_scalar::<f64>()?.max(1e-30);
                        Ok((a - b)?.abs()?.max_all()?.to_scalar::<f64>()? / scale)
                    };
                    let (dy, dg) = (rel(&yf, &yc)?, rel(&gf, &gc)?);
                    let m = mask.is_some();
                    assert!(
                        dy < tol,
                        "{dtype:?} mask {m} rows {rows}: values differ by {dy}"
                    );
                    assert!(
                        dg < gtol,
                        "{dtype:?} mask {m} rows {rows}: gradients differ by {dg}"
                    );
                    if dtype == DType::F64 {
                        let f = layer.fused.as_ref().expect("fused form");
                        check_grad(&[x.as_tensor().clone()], |t| {
                            f.forward(&t[0], rows, mask)?
                                .ok_or_else(|| candle_core::Error::Msg("not fused".into()))
                        })?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The first-rows path equals the same rows of the full stack, in value and in the gradient
    /// to the input (f64, with and without the causal mask, checkpointed and not), and matches
    /// finite differences.
    #[test]
    fn first_rows_equal_the_full_stack_and_its_gradient() -> Result<()> {
        let dev = Device::Cpu;
        for layers in [1, 3] {
            let enc = random_encoder(&EncoderConfig {
                num_hidden_layers: layers,
                ..tiny(Activation::QuickGelu)
            })?;
            let mask = causal_mask(5, DType::F64, &dev)?;
            for mask in [None, Some(&mask)] {
                for policy in [Policy::None, Policy::BLOCKS] {
                    let x = candle_core::Var::from_tensor(
                        &randn(&[2, 5, 8], 3, &dev)?.to_dtype(DType::F64)?,
                    )?;
                    let full = enc.forward(x.as_tensor(), mask, &policy)?.narrow(1, 0, 2)?;
                    let first = enc.forward_first(x.as_tensor(), 2, mask, &policy)?;
                    let dv = (&full - &first)?.abs()?.max_all()?.to_scalar::<f64>()?;
                    assert!(dv < 1e-12, "{layers} layers: values differ by {dv}");
                    let w = randn(&[2, 2, 8], 4, &dev)?.to_dtype(DType::F64)?;
                    let g = |y: &Tensor| -> Result<Tensor> {
                        let grads = (y * &w)?.sum_all()?.backward()?;
                        grads.get(&x).cloned().ok_or_else(|| {
                            candle_core::Error::Msg("no gradient reached the input".into())
                        })
                    };
                    let dg = (g(&full)? - g(&first)?)?
                        .abs()?
                        .max_all()?
                        .to_scalar::<f64>()?;
                    assert!(dg < 1e-12, "{layers} layers: gradients differ by {dg}");
                }
            }
            let x = randn(&[1, 4, 8], 5, &dev)?.to_dtype(DType::F64)?;
            check_grad(&[x], |t| enc.forward_first(&t[0], 1, None, &Policy::None))?;
        }
        Ok(())
    }
}
