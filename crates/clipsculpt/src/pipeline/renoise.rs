//! Starting the sampler from a saved latent (SDEdit): `vary` and `edit` re-noise the latent to the σ that a
//! strength picks on the sampler's Karras schedule and sample the remaining steps, so that the result keeps what
//! the noise did not cover.
//!
//! A strength `s ∈ [0, 1]` starts at Heun step `k = N − round(s·N)` of the `N` steps (diffusers' img2img rule):
//! `s = 0` takes no step and returns the latent bit for bit; `s = 1` starts from pure noise, the run's own initial
//! noise (the stream [`stream::PRIOR`]), so it is `generate` from that seed; in between the state is the latent plus
//! fresh noise (stream [`stream::RENOISE`]) of that step's σ. The Karras schedule spends most steps at small σ:
//! with 64 steps, `s = 0.3` starts at σ ≈ 3.4 and `s = 0.5` at σ ≈ 20 (σ runs from 403 down to 0.11).

use anyhow::{bail, Result};
use candle_core::{Device, Tensor};

use super::models::Models;
use super::settings::RunSettings;
use super::stream;
use crate::autodiff::rng::Rng;
use crate::guide::{self, GuideMode, SamplingTrace, Score, Target};
use crate::shap_e::{initial_noise, Denoiser};

/// The strength `vary` and `edit` use unless told otherwise (chosen before any measurement: σ ≈ 3.4 of 64 steps).
pub const DEFAULT_STRENGTH: f64 = 0.3;

/// A saved latent to start from, and how much of it to re-noise.
#[derive(Debug, Clone)]
pub struct Renoise {
    /// The latent `(1, rows, d)`.
    pub latent: Tensor,
    /// The strength, within `[0, 1]`.
    pub strength: f64,
}

impl Renoise {
    /// `latent` at `strength`, checked against `models`' latent shape.
    pub fn new(latent: Tensor, strength: f64, models: &Models) -> Result<Self> {
        check_strength(strength)?;
        check_latent(&latent, models)?;
        Ok(Self { latent, strength })
    }
}

/// Refuses a strength outside `[0, 1]`.
pub fn check_strength(strength: f64) -> Result<()> {
    if !(0.0..=1.0).contains(&strength) {
        bail!(
            "--strength must lie within 0..1 (0 keeps the latent, 1 is pure noise), not {strength}"
        );
    }
    Ok(())
}

/// Refuses a latent whose shape is not the one `models`' prior samples.
pub fn check_latent(latent: &Tensor, models: &Models) -> Result<()> {
    let cfg = models.shap_e.prior.config();
    let want = [1, cfg.num_embeddings, cfg.embedding_dim];
    if latent.dims() != want {
        bail!(
            "the latent has shape {:?} but the model {} makes latents of shape {want:?}: it comes from another \
             model (pass that model with --model)",
            latent.dims(),
            models.sources.shap_e
        );
    }
    Ok(())
}

/// The Heun step a run of `steps` starts from at `strength`: `steps` (none) at 0, 0 (the start) at 1.
pub fn start_step(strength: f64, steps: usize) -> usize {
    steps - ((strength.clamp(0.0, 1.0) * steps as f64).round() as usize).min(steps)
}

impl Models {
    /// The prior's sample of a run that starts from `from` (see the module docs) toward `target`'s prompt, guided as
    /// `s.mode` says: through the sampler (with the keep guard against the unguided sample from the same re-noised
    /// state) in the sampling modes, plainly otherwise. The third element is the latent's held-aside score, when the
    /// keep guard computed it. End-to-end guidance is refused.
    pub fn resample(
        &self,
        target: &Target,
        s: &RunSettings,
        (from, rng): (&Renoise, &Rng),
        device: &Device,
        on_step: impl FnMut(usize, f32),
    ) -> Result<(Tensor, SamplingTrace, Option<Score>)> {
        if s.mode == GuideMode::EndToEnd {
            bail!("--guide end-to-end cannot start from a saved latent; use sampling, latent, both or off");
        }
        let k = start_step(from.strength, s.prior_steps);
        if k >= s.prior_steps {
            return Ok((from.latent.clone(), SamplingTrace::default(), None));
        }
        let (run, noise) = self.sampling_run(target, s, rng, device)?;
        let denoiser = Denoiser::new(run.prior, &run.text_embeds, run.guidance_scale)?;
        let mut sched = run.sched.at_step(k)?;
        let state = if k == 0 {
            denoiser.initial_state(&run.sched, &noise)?
        } else {
            let eps = initial_noise(run.prior, &run.text_embeds, &mut rng.fork(stream::RENOISE))?
                .reshape(from.latent.dims())?;
            let sigma = f64::from(sched.current_sigma());
            (from.latent.to_dtype(eps.dtype())? + (eps * sigma)?)?
        };
        if !s.mode.guides_sampling() {
            return Ok((
                denoiser.finish(&mut sched, state)?,
                SamplingTrace::default(),
                None,
            ));
        }
        let loss = self.view_loss(target, s);
        let sampling = rng.fork(stream::SAMPLING);
        let (z, mut trace, fork) = guide::guided_sample(
            &denoiser,
            &mut sched,
            state,
            &s.sampling,
            &loss,
            &sampling,
            on_step,
        )?;
        let Some(mut fork) = fork.filter(|_| !trace.steps.is_empty()) else {
            return Ok((z, trace, None));
        };
        let unguided = || Ok((denoiser.finish(&mut fork.sched, fork.x.clone())?, None));
        let (z, kept, score) = self.keep(target, s, unguided, z)?;
        trace.keep = kept;
        Ok((z, trace, score))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 0 takes no step, 1 every step; the rounding in between.
    #[test]
    fn strength_picks_the_start_step() {
        assert_eq!(start_step(0.0, 64), 64);
        assert_eq!(start_step(1.0, 64), 0);
        assert_eq!(start_step(0.3, 64), 45);
        assert_eq!(start_step(0.5, 10), 5);
        assert!(check_strength(2.0).is_err() && check_strength(f64::NAN).is_err());
        assert!(check_strength(0.0).is_ok() && check_strength(1.0).is_ok());
    }
}
