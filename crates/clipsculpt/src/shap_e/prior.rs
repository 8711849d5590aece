//! The Shap-E prior: diffusers' `PriorTransformer` as configured for Shap-E (reference:
//! diffusers `models/transformers/prior_transformer.py`, `models/attention.py`; notes in
//! `docs/shap-e.md`, "Prior"). Fields are named after the checkpoint keys (`transformer_blocks.{i}.attn1.to_q`,
//! `ff.net.0.proj`, …). The blocks implement [`Block`] so that the stack runs under any
//! checkpoint [`Policy`]; everything is differentiable (our LayerNorm/softmax/linear).
//!
//! Token order: `[proj_embedding, time, latent tokens…]`; the positional embedding covers the
//! latent tokens only; no attention mask; output channels `[0, embedding_dim)` are the x0
//! prediction (the rest are the discarded variance logits).

use std::sync::{Arc, Mutex};

use candle_core::{DType, Module, Result, Tensor};
use candle_nn::VarBuilder;

use super::config::{Activation, NormType, PriorConfig};
use crate::autodiff::checkpoint::{
    measure_costs, run_chain, Block, BlockCost, KeptVjp, Plan, Policy,
};
use crate::autodiff::nn::{layer_norm, linear, param, LayerNorm, Linear};
use crate::autodiff::ops::{self, linear_input_grad};

const LN_EPS: f64 = 1e-5;
/// Block-input-sized tensors that the layers outside the blocks keep during a guided evaluation's backward
/// (measured at the published shape: a 2 GiB budget was exceeded by 44 MiB, about 5 inputs, without them).
const OUTER_INPUTS: usize = 8;

/// `attn1`: multi-head self-attention with biased q/k/v/out projections.
#[derive(Debug, Clone)]
pub(crate) struct Attention {
    to_q: Linear,
    to_k: Linear,
    to_v: Linear,
    /// `to_out.0` (`to_out.1` is dropout).
    to_out: Linear,
    heads: usize,
    head_dim: usize,
}

impl Attention {
    fn new(vb: VarBuilder, cfg: &PriorConfig) -> Result<Self> {
        let d = cfg.inner_dim();
        Ok(Self {
            to_q: linear(d, d, vb.pp("to_q"))?,
            to_k: linear(d, d, vb.pp("to_k"))?,
            to_v: linear(d, d, vb.pp("to_v"))?,
            to_out: linear(d, d, vb.pp("to_out").pp("0"))?,
            heads: cfg.num_attention_heads,
            head_dim: cfg.attention_head_dim,
        })
    }

    /// `q` (scaled), `k`, `v` of `x (n, t, d)`, each `(n, heads, t, head_dim)`.
    fn heads(&self, x: &Tensor) -> Result<[Tensor; 3]> {
        let split = |y: Tensor, scale| ops::split_heads(&y, self.heads, scale);
        let q = split(self.to_q.forward(x)?, Some(self.scale()))?;
        let k = split(self.to_k.forward(x)?, None)?;
        let v = split(self.to_v.forward(x)?, None)?;
        Ok([q, k, v])
    }

    fn scale(&self) -> f64 {
        (self.head_dim as f64).powf(-0.5)
    }

    /// The gradient reaching the attention's input from `g_out`, the gradient of its output;
    /// `q`, `k`, `v`, `o` as in the forward (consumed: each is dropped once used).
    fn input_grad(&self, qkvo: [Tensor; 4], g_out: &Tensor) -> Result<Tensor> {
        let [q, k, v, o] = qkvo;
        let g_o = linear_input_grad(g_out, self.to_out.weight(), g_out)?;
        let g_o = ops::split_heads(&g_o, self.heads, None)?;
        let [dq, dk, dv] = ops::attention_grads([&q, &k, &v], &o, &g_o)?;
        drop((q, k, v, o, g_o));
        let back = |d: Option<Tensor>, lin: &Linear, scale: Option<f64>| -> Result<Tensor> {
            let d = d.ok_or_else(|| {
                candle_core::Error::Msg("attention gradient missing (bug)".into())
            })?;
            linear_input_grad(&ops::merge_heads_scaled(&d, scale)?, lin.weight(), g_out)
        };
        // The order in which candle's backward accumulates the three contributions (v, k, q).
        let acc = back(dv, &self.to_v, None)?;
        let acc = (acc + back(dk, &self.to_k, None)?)?;
        acc + back(dq, &self.to_q, Some(self.scale()))?
    }
}

/// `ff`: `net.0.proj` → exact GELU → (`net.1` dropout) → `net.2`.
#[derive(Debug, Clone)]
pub(crate) struct FeedForward {
    net_0_proj: Linear,
    net_2: Linear,
}

impl FeedForward {
    fn new(vb: VarBuilder, d: usize) -> Result<Self> {
        let net = vb.pp("net");
        Ok(Self {
            net_0_proj: linear(d, 4 * d, net.pp("0").pp("proj"))?,
            net_2: linear(4 * d, d, net.pp("2"))?,
        })
    }
}

/// `transformer_blocks.{i}`: pre-LN self-attention and feed-forward (diffusers
/// `BasicTransformerBlock` without cross-attention, hence `norm1` and `norm3`).
#[derive(Debug, Clone)]
pub(crate) struct PriorBlock {
    norm1: LayerNorm,
    attn1: Attention,
    norm3: LayerNorm,
    ff: FeedForward,
}

impl PriorBlock {
    fn new(vb: VarBuilder, cfg: &PriorConfig) -> Result<Self> {
        let d = cfg.inner_dim();
        Ok(Self {
            norm1: layer_norm(d, LN_EPS, vb.pp("norm1"))?,
            attn1: Attention::new(vb.pp("attn1"), cfg)?,
            norm3: layer_norm(d, LN_EPS, vb.pp("norm3"))?,
            ff: FeedForward::new(vb.pp("ff"), d)?,
        })
    }
}

/// What [`PriorBlock`]'s VJP needs from its forward: `q`, `k`, `v`, the attention output, `h` (the
/// input plus attention) and the feed-forward's pre-activation; 9 block-input-sized tensors where
/// a recorded graph keeps 23.
struct Kept {
    qkvo: [Tensor; 4],
    h: Tensor,
    pre: Tensor,
}

impl PriorBlock {
    /// The forward up to the feed-forward's activation, keeping what the VJP needs.
    fn kept(&self, x: &Tensor) -> Result<Kept> {
        let [q, k, v] = self.attn1.heads(&self.norm1.forward(x)?)?;
        let o = ops::attention(&q, &k, &v)?;
        let h = (x + self.attn1.to_out.forward(&ops::merge_heads(&o)?)?)?;
        let pre = self.ff.net_0_proj.forward(&self.norm3.forward(&h)?)?;
        Ok(Kept {
            qkvo: [q, k, v, o],
            h,
            pre,
        })
    }

    /// The block's output from what [`Self::kept`] kept: the feed-forward's activation and
    /// down-projection, and the residual.
    fn output(&self, kept: &Kept) -> Result<Tensor> {
        let act = Activation::GeluErf.forward(&kept.pre)?;
        &kept.h + self.ff.net_2.forward(&act)?
    }

    /// The gradient reaching `x` from `g`, the output's; `kept` is consumed, each tensor dropped
    /// once used. Feed-forward first, then attention, each residual's gradient added as candle
    /// does.
    fn vjp(&self, kept: Kept, x: &Tensor, g: &Tensor) -> Result<Tensor> {
        let Kept { qkvo, h, pre } = kept;
        let g_act = linear_input_grad(g, self.ff.net_2.weight(), &pre)?;
        let g_pre = Activation::GeluErf.input_grad(&pre, &g_act)?;
        drop((g_act, pre));
        let g_a3 = linear_input_grad(&g_pre, self.ff.net_0_proj.weight(), &h)?;
        drop(g_pre);
        let g_h = (g + self.norm3.input_grad(&h, &g_a3)?)?;
        drop((h, g_a3));
        let g_a1 = self.attn1.input_grad(qkvo, &g_h)?;
        g_h + self.norm1.input_grad(x, &g_a1)?
    }

    /// Whether any of the block's weights tracks a gradient (training).
    fn weights_track(&self) -> bool {
        let a = &self.attn1;
        [
            &a.to_q,
            &a.to_k,
            &a.to_v,
            &a.to_out,
            &self.ff.net_0_proj,
            &self.ff.net_2,
        ]
        .iter()
        .any(|l| l.tracks())
            || self.norm1.tracks()
            || self.norm3.tracks()
    }
}

impl Block for PriorBlock {
    /// [`PriorBlock::kept`] then [`PriorBlock::output`]: one sequence of ops serves the forward,
    /// the kept forward and the VJP's recomputation.
    fn forward(&self, x: &Tensor, _context: &[Tensor]) -> Result<Tensor> {
        self.output(&self.kept(x)?)
    }

    /// The block's VJP by hand. A recorded graph keeps every intermediate until its backward
    /// ends; this recomputes the forward keeping only [`Kept`], and the backward drops each
    /// tensor once it is used. The operations are the graph's own, in its order, so the gradient
    /// is bitwise the graph's.
    fn input_vjp(&self, x: &Tensor, _context: &[Tensor], g: &Tensor) -> Result<Option<Tensor>> {
        let kept = self.kept(x)?;
        self.vjp(kept, x, g).map(Some)
    }

    fn has_input_vjp(&self) -> bool {
        true
    }

    fn forward_kept(&self, x: &Tensor, _context: &[Tensor]) -> Result<Option<(Tensor, KeptVjp)>> {
        if self.weights_track() {
            return Ok(None);
        }
        let kept = self.kept(x)?;
        let out = self.output(&kept)?;
        let (block, x) = (self.clone(), x.clone());
        Ok(Some((out, Box::new(move |g| block.vjp(kept, &x, g)))))
    }
}

/// `time_embedding`: `linear_1` → activation → `linear_2` on the sinusoidal timestep features.
#[derive(Debug, Clone)]
pub(crate) struct TimestepEmbedding {
    linear_1: Linear,
    linear_2: Linear,
    act: Activation,
}

/// Sinusoidal timestep features of width `dim` (`flip_sin_to_cos`, shift 0, max period 10000):
/// `[cos(t·f_k), sin(t·f_k)]` with `f_k = exp(−ln(10⁴)·k/(dim/2))`, computed in f32 like diffusers.
///
/// `t`: `(n)` fractional timesteps. Returns `(n, dim)`.
pub(crate) fn timestep_features(
    t: &[f32],
    dim: usize,
    dtype: DType,
    dev: &candle_core::Device,
) -> Result<Tensor> {
    let half = dim / 2;
    let ln = -(10000f64.ln()) as f32;
    let freqs: Vec<f32> = (0..half)
        .map(|k| ((ln * k as f32) / half as f32).exp())
        .collect();
    let mut v = Vec::with_capacity(t.len() * dim);
    for &ti in t {
        let args: Vec<f32> = freqs.iter().map(|f| ti * f).collect();
        v.extend(args.iter().map(|a| a.cos()));
        v.extend(args.iter().map(|a| a.sin()));
        v.extend(std::iter::repeat_n(0.0, dim - 2 * half));
    }
    Tensor::from_vec(v, (t.len(), dim), dev)?.to_dtype(dtype)
}

/// A block's measured cost and the input shape it was measured at.
type MeasuredCost = (Vec<usize>, BlockCost);

/// The Shap-E prior transformer.
#[derive(Debug, Clone)]
pub struct PriorTransformer {
    time_embedding: TimestepEmbedding,
    proj_in: Linear,
    embedding_proj_norm: Option<LayerNorm>,
    embedding_proj: Linear,
    positional_embedding: Tensor,
    norm_in: Option<LayerNorm>,
    transformer_blocks: Vec<PriorBlock>,
    norm_out: LayerNorm,
    proj_to_clip_embeddings: Linear,
    cfg: PriorConfig,
    /// One block's measured memory cost and the input shape it was measured at (budget plans).
    block_costs: Arc<Mutex<Option<MeasuredCost>>>,
}

impl PriorTransformer {
    /// Builds the prior from weights under `vb` (diffusers key names). `clip_mean`/`clip_std` in
    /// the checkpoint are deliberately not loaded (unused by the pipeline).
    pub fn new(vb: VarBuilder, cfg: &PriorConfig) -> Result<Self> {
        cfg.validate().map_err(candle_core::Error::Msg)?;
        let d = cfg.inner_dim();
        let te = vb.pp("time_embedding");
        let time_embedding = TimestepEmbedding {
            linear_1: linear(d, cfg.time_embed_dim(), te.pp("linear_1"))?,
            linear_2: linear(cfg.time_embed_dim(), d, te.pp("linear_2"))?,
            act: cfg.time_embed_act_fn,
        };
        let norm = |t: Option<NormType>, size: usize, name: &str| -> Result<Option<LayerNorm>> {
            t.map(|NormType::Layer| layer_norm(size, LN_EPS, vb.pp(name)))
                .transpose()
        };
        let blocks = vb.pp("transformer_blocks");
        Ok(Self {
            time_embedding,
            proj_in: linear(cfg.embedding_dim, d, vb.pp("proj_in"))?,
            embedding_proj_norm: norm(
                cfg.embedding_proj_norm_type,
                cfg.embedding_proj_dim(),
                "embedding_proj_norm",
            )?,
            embedding_proj: linear(cfg.embedding_proj_dim(), d, vb.pp("embedding_proj"))?,
            positional_embedding: param(
                &vb,
                (1, cfg.positional_rows(), d),
                "positional_embedding",
            )?,
            norm_in: norm(cfg.norm_in_type, d, "norm_in")?,
            transformer_blocks: (0..cfg.num_layers)
                .map(|i| PriorBlock::new(blocks.pp(i.to_string()), cfg))
                .collect::<Result<_>>()?,
            norm_out: layer_norm(d, LN_EPS, vb.pp("norm_out"))?,
            proj_to_clip_embeddings: linear(
                d,
                cfg.clip_embed_dim(),
                vb.pp("proj_to_clip_embeddings"),
            )?,
            cfg: cfg.clone(),
            block_costs: Arc::default(),
        })
    }

    /// The config.
    pub(crate) fn config(&self) -> &PriorConfig {
        &self.cfg
    }

    /// The transformer blocks.
    #[cfg(test)]
    pub(crate) fn blocks(&self) -> &[PriorBlock] {
        &self.transformer_blocks
    }

    /// One evaluation without checkpointing; see [`Self::forward_with_policy`].
    pub fn forward(&self, x: &Tensor, timestep: f32, proj_embedding: &Tensor) -> Result<Tensor> {
        self.forward_with_policy(x, timestep, proj_embedding, &Policy::None)
    }

    /// One evaluation with the blocks run under `policy`.
    ///
    /// `x`: `(n, num_embeddings, embedding_dim)` scaled latents; `timestep`: fractional training
    /// timestep; `proj_embedding`: `(n, embedding_proj_dim)` conditioning. Returns
    /// `(n, num_embeddings, clip_embed_dim)`; channels `[0, embedding_dim)` are the x0 prediction.
    pub fn forward_with_policy(
        &self,
        x: &Tensor,
        timestep: f32,
        proj_embedding: &Tensor,
        policy: &Policy,
    ) -> Result<Tensor> {
        let n = x.dim(0)?;
        self.forward_at(x, &vec![timestep; n], proj_embedding, policy)
    }

    /// [`Self::forward_with_policy`] with one timestep per batch item (training draws them).
    pub fn forward_at(
        &self,
        x: &Tensor,
        timesteps: &[f32],
        proj_embedding: &Tensor,
        policy: &Policy,
    ) -> Result<Tensor> {
        let cfg = &self.cfg;
        let (n, rows, width) = x.dims3()?;
        if timesteps.len() != n {
            candle_core::bail!("{} timesteps for a batch of {n}", timesteps.len());
        }
        if rows != cfg.num_embeddings || width != cfg.embedding_dim {
            candle_core::bail!(
                "prior input {:?} does not match the config ({} tokens × {})",
                x.shape(),
                cfg.num_embeddings,
                cfg.embedding_dim
            );
        }
        let d = cfg.inner_dim();
        let feats = timestep_features(timesteps, d, x.dtype(), x.device())?;
        let te = &self.time_embedding;
        let temb = te
            .linear_2
            .forward(&te.act.forward(&te.linear_1.forward(&feats)?)?)?;
        let mut cond = proj_embedding.clone();
        if let Some(norm) = &self.embedding_proj_norm {
            cond = norm.forward(&cond)?;
        }
        let cond = self.embedding_proj.forward(&cond)?;
        let h = self.proj_in.forward(x)?;
        let h = Tensor::cat(&[cond.unsqueeze(1)?, temb.unsqueeze(1)?, h], 1)?;
        let tokens = rows + 2;
        let pos_rows = cfg.positional_rows();
        let pos = if pos_rows < tokens {
            let pad = Tensor::zeros((1, tokens - pos_rows, d), h.dtype(), h.device())?;
            Tensor::cat(&[pad, self.positional_embedding.clone()], 1)?
        } else {
            self.positional_embedding.clone()
        };
        let mut h = h.broadcast_add(&pos)?;
        if let Some(norm) = &self.norm_in {
            h = norm.forward(&h)?;
        }
        let plan = self.plan(policy, &h)?;
        let h = run_chain(&self.transformer_blocks, &h, &[], &plan)?;
        let h = self.norm_out.forward(&h)?.narrow(1, 2, rows)?;
        self.proj_to_clip_embeddings.forward(&h)
    }

    /// The x0 prediction: the first `embedding_dim` output channels of
    /// [`Self::forward_with_policy`].
    pub(crate) fn predict_x0(
        &self,
        x: &Tensor,
        timestep: f32,
        proj_embedding: &Tensor,
        policy: &Policy,
    ) -> Result<Tensor> {
        self.forward_with_policy(x, timestep, proj_embedding, policy)?
            .narrow(2, 0, self.cfg.embedding_dim)
    }

    /// The checkpoint plan of the blocks for a batch of `batch` under `policy` (see
    /// [`Self::plan`]).
    pub fn block_plan(&self, policy: &Policy, batch: usize) -> Result<Plan> {
        let cfg = &self.cfg;
        let dtype = self.positional_embedding.dtype();
        let dev = self.positional_embedding.device();
        let h = Tensor::zeros((batch, cfg.num_embeddings + 2, cfg.inner_dim()), dtype, dev)?;
        self.plan(policy, &h)
    }

    /// The checkpoint plan of the blocks for input `h`. A byte budget needs the blocks' memory
    /// costs: every block has the same shape, so one block is measured (forward and backward, on
    /// the device's memory meter) and its cost, cached per input shape, stands for all. The
    /// layers around the blocks (input projection, output norm and projection to twice the width,
    /// the guidance combination) hold [`OUTER_INPUTS`] block inputs' worth of the budget.
    fn plan(&self, policy: &Policy, h: &Tensor) -> Result<Plan> {
        let n = self.transformer_blocks.len();
        let costs = match (policy, self.transformer_blocks.first()) {
            (Policy::Budget(_), Some(first)) => self.block_cost(first, h)?.map(|c| vec![c; n]),
            _ => None,
        };
        let policy = match (policy, &costs) {
            (Policy::Budget(b), Some(c)) => {
                Policy::Budget(b.saturating_sub(OUTER_INPUTS * c[0].input_bytes))
            }
            _ => *policy,
        };
        policy
            .plan(n, costs.as_deref())
            .map_err(|e| candle_core::Error::Msg(format!("prior checkpoint plan: {e}")))
    }

    /// One block's measured cost for inputs shaped like `h` (cached); `None` where the device
    /// has no high-water mark (a CPU without the counting allocator, a CUDA device without a
    /// memory pool).
    fn block_cost(&self, block: &PriorBlock, h: &Tensor) -> Result<Option<BlockCost>> {
        let mut cache = self
            .block_costs
            .lock()
            .map_err(|_| candle_core::Error::Msg("prior cost cache poisoned".into()))?;
        if let Some((_, cost)) = cache.as_ref().filter(|(s, _)| s == h.dims()) {
            return Ok(Some(*cost));
        }
        let cost =
            measure_costs(std::slice::from_ref(block), h, &[])?.and_then(|c| c.first().copied());
        if let Some(c) = cost {
            *cache = Some((h.dims().to_vec(), c));
        }
        Ok(cost)
    }
}
