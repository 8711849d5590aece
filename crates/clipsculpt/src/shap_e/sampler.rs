//! The sampling loop (diffusers `pipelines/shap_e/pipeline_shap_e.py`, `docs/shap-e.md`, "Sampling loop"):
//! conditioning, classifier-free guidance on the prior's x0 prediction (unconditional branch
//! first, zero embedding), clipping after guidance (inside the scheduler), Heun steps.

use candle_core::{Result, Tensor, D};

use super::config::SchedulerConfig;
use super::prior::PriorTransformer;
use super::scheduler::HeunDiscreteScheduler;
use crate::autodiff::checkpoint::Policy;
use crate::autodiff::rng::Rng;

/// Guidance scale used by every documented Shap-E example (the pipeline's own default is 4).
pub(crate) const DEFAULT_GUIDANCE_SCALE: f32 = 15.0;

/// The prior's conditioning from CLIP `text_embeds (B, dim)`: each row L2-normalised, then
/// multiplied by `sqrt(dim)`. Returns `(B, dim)`.
pub fn condition(text_embeds: &Tensor) -> Result<Tensor> {
    let dim = text_embeds.dim(D::Minus1)?;
    let norm = text_embeds.sqr()?.sum_keepdim(D::Minus1)?.sqrt()?;
    text_embeds.broadcast_div(&norm)? * (dim as f64).sqrt()
}

/// The unconditional embedding: zeros shaped like the conditioning (not an empty-prompt encoding).
pub fn unconditional(cond: &Tensor) -> Result<Tensor> {
    cond.zeros_like()
}

/// Standard-normal starting noise `(B, num_embeddings·embedding_dim)` for `text_embeds (B, dim)`,
/// in their dtype and on their device.
pub fn initial_noise(
    prior: &PriorTransformer,
    text_embeds: &Tensor,
    rng: &mut Rng,
) -> Result<Tensor> {
    let cfg = prior.config();
    rng.normal_tensor(
        &[text_embeds.dim(0)?, cfg.num_embeddings * cfg.embedding_dim],
        text_embeds.device(),
    )?
    .to_dtype(text_embeds.dtype())
}

/// The classifier-free-guided denoiser of one sampling run: the prior with the prompts'
/// conditioning and (when guided) the zero embedding, both branches evaluated as one batch.
pub struct Denoiser<'a> {
    prior: &'a PriorTransformer,
    /// `[unconditional; conditional]` (guided) or the conditioning alone, `(2B or B, dim)`.
    embeds: Tensor,
    batch: usize,
    guidance_scale: f32,
}

impl<'a> Denoiser<'a> {
    /// The denoiser for raw CLIP `text_embeds (B, dim)` with classifier-free guidance
    /// `guidance_scale` (off when ≤ 1).
    pub fn new(
        prior: &'a PriorTransformer,
        text_embeds: &Tensor,
        guidance_scale: f32,
    ) -> Result<Self> {
        let batch = text_embeds.dim(0)?;
        let want = prior.config().embedding_proj_dim();
        if text_embeds.dim(1)? != want {
            candle_core::bail!(
                "text embeddings {:?} do not match the prior's embedding_proj_dim {want}",
                text_embeds.shape()
            );
        }
        let cond = condition(text_embeds)?;
        let embeds = if guidance_scale > 1.0 {
            Tensor::cat(&[unconditional(&cond)?, cond], 0)?
        } else {
            cond
        };
        Ok(Self {
            prior,
            embeds,
            batch,
            guidance_scale,
        })
    }

    /// The sampler state `(B, num_embeddings, embedding_dim)` at the first step: standard-normal
    /// `noise (B, num_embeddings·embedding_dim)` times the initial sigma (as diffusers does).
    pub fn initial_state(&self, sched: &HeunDiscreteScheduler, noise: &Tensor) -> Result<Tensor> {
        let cfg = self.prior.config();
        noise.reshape((self.batch, cfg.num_embeddings, cfg.embedding_dim))?
            * sched.init_noise_sigma() as f64
    }

    /// The guided x0 prediction (before the scheduler clips it) for the state `x` at the
    /// scheduler's current timestep, the prior's blocks run under `policy`. Differentiable with
    /// respect to `x` when `x` tracks a gradient.
    pub fn x0(&self, sched: &HeunDiscreteScheduler, x: &Tensor, policy: &Policy) -> Result<Tensor> {
        let t = sched.current_timestep()?;
        let guided = self.guidance_scale > 1.0;
        let input = if guided {
            Tensor::cat(&[x, x], 0)?
        } else {
            x.clone()
        };
        let out =
            self.prior
                .predict_x0(&sched.scale_model_input(&input)?, t, &self.embeds, policy)?;
        if guided {
            let b = self.batch;
            let (u, c) = (out.narrow(0, 0, b)?, out.narrow(0, b, b)?);
            &u + ((c - &u)? * self.guidance_scale as f64)?
        } else {
            Ok(out)
        }
    }

    /// Runs the remaining evaluations of `sched` from state `x`, unguided: from the first step,
    /// the whole unguided sampling run.
    pub(crate) fn finish(
        &self,
        sched: &mut HeunDiscreteScheduler,
        mut x: Tensor,
    ) -> Result<Tensor> {
        while !sched.done() {
            let out = self.x0(sched, &x, &Policy::None)?;
            x = sched.step(&out, &x)?;
        }
        Ok(x)
    }
}

/// Samples latents `(B, num_embeddings, embedding_dim)` in `[−1, 1]` for `text_embeds (B, dim)`
/// (raw CLIP text embeddings) with `scheduler`, `steps` Heun steps and classifier-free guidance
/// `guidance_scale` (off when ≤ 1), from standard-normal `noise`
/// `(B, num_embeddings·embedding_dim)` ([`initial_noise`]). `ShapE::sample` draws the noise and
/// uses the pipeline's scheduler.
pub fn sample_latents_from(
    prior: &PriorTransformer,
    scheduler: &SchedulerConfig,
    text_embeds: &Tensor,
    noise: &Tensor,
    steps: usize,
    guidance_scale: f32,
) -> Result<Tensor> {
    let denoiser = Denoiser::new(prior, text_embeds, guidance_scale)?;
    let mut sched = HeunDiscreteScheduler::new(scheduler, steps)?;
    let x = denoiser.initial_state(&sched, noise)?;
    denoiser.finish(&mut sched, x)
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::Device;

    /// A row (3, 4) has norm 5: normalised (0.6, 0.8), times √2.
    #[test]
    fn condition_normalises_and_scales() {
        let e = Tensor::new(&[[3f32, 4.0]], &Device::Cpu).unwrap();
        let c = condition(&e).unwrap().to_vec2::<f32>().unwrap();
        let s = 2f32.sqrt();
        assert!((c[0][0] - 0.6 * s).abs() < 1e-6 && (c[0][1] - 0.8 * s).abs() < 1e-6);
        let u = unconditional(&e).unwrap().to_vec2::<f32>().unwrap();
        assert_eq!(u, vec![vec![0.0, 0.0]]);
    }
}
