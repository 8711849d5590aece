//! Diffusion training of the toy prior (the Shap-E [`PriorTransformer`], small config) on the
//! fitted decoder latents, conditioned on the toy CLIP's text embedding — Shap-E's objective:
//! x0 prediction under the "exp" schedule. A training timestep `t` is uniform over the
//! scheduler's `num_train_timesteps`; the model sees `x_t = (x0 + σ_t·ε)/√(σ_t² + 1)` (the
//! sampler's scaled input) at timestep `t` and is scored by `‖x̂0 − x0‖²`. The conditioning is
//! dropped (replaced by the zero embedding the sampler uses as its unconditional branch) with
//! probability `cond_dropout`, so classifier-free guidance works at sampling time.

use candle_core::{DType, Device, Result, Tensor};
use candle_nn::{AdamW, Optimizer, ParamsAdamW, VarBuilder, VarMap};

use clipsculpt::autodiff::checkpoint::Policy;
use clipsculpt::autodiff::rng::Rng;
use clipsculpt::guide::schedule::LrSchedule;
use clipsculpt::random::random_varmap;
use clipsculpt::shap_e::scheduler::training_sigmas;
use clipsculpt::shap_e::{sampler, PriorConfig, PriorTransformer, SchedulerConfig};

/// Settings of the diffusion training.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PriorTrainSettings {
    /// Adam steps.
    pub steps: usize,
    /// Peak learning rate (warm-up over a tenth of the steps, cosine decay).
    pub lr: f64,
    /// Copies of the training set per batch (each with its own caption, timestep and noise).
    pub repeats: usize,
    /// Pairs per batch, drawn at random with replacement; 0: the whole set `repeats` times (the
    /// shipped worlds).
    pub batch: usize,
    /// AdamW's decoupled weight decay (0 in the shipped worlds).
    pub weight_decay: f64,
    /// Training timesteps are `⌊T·u^p⌋` with `u ~ U(0, 1)`: 1 is uniform (Shap-E's objective, the
    /// shipped worlds); larger powers train more often at low noise, where instances of one
    /// caption can be told apart (Shap-E's schedule puts 90 % of its timesteps above σ = 1.5).
    pub timestep_power: f32,
    /// Min-SNR-γ loss weighting (Hang et al., 2023): each element's squared error is weighted by
    /// `min(1/σ², γ)/γ`, so errors at low noise, where reading the state pays, are no longer
    /// swamped by the irreducible ones at high noise. 0: uniform weights (Shap-E's objective, the
    /// shipped worlds).
    pub min_snr: f32,
    /// Probability of replacing the conditioning by the unconditional (zero) embedding.
    pub cond_dropout: f32,
    /// Probability that a batch element is a mixup: `λ·(latent, conditioning)` of its own pair plus
    /// `(1 − λ)·` another's, `λ ~ U(0, 1)`, the conditioning renormalised, which asks the map from
    /// conditioning to latent to be smooth between training pairs (0: plain pairs, the shipped
    /// worlds).
    pub mixup: f32,
    /// Seed of the initial weights and every draw.
    pub seed: u64,
}

impl PriorTrainSettings {
    /// Shap-E's objective over the whole set once per batch: uniform timesteps and weights, the
    /// conditioning dropped a tenth of the time, no weight decay and no mixup.
    pub fn shap_e(steps: usize, lr: f64, seed: u64) -> Self {
        Self {
            steps,
            lr,
            repeats: 1,
            batch: 0,
            weight_decay: 0.0,
            timestep_power: 1.0,
            min_snr: 0.0,
            cond_dropout: 0.1,
            mixup: 0.0,
            seed,
        }
    }
}

/// The trained prior's parameters and its loss per step.
pub struct PriorTraining {
    /// Parameters by checkpoint key.
    pub varmap: VarMap,
    /// The prior that was trained (the tests compare it with one rebuilt from `varmap`).
    #[cfg(test)]
    pub prior: PriorTransformer,
    /// Loss per step.
    pub losses: Vec<f32>,
}

/// Trains a prior of `cfg` on `latents (n, rows, d)`; `text_embeds[i]` holds the raw CLIP text
/// embeddings `(k_i, dim)` of latent `i`'s captions (one is drawn per use). A latent without
/// captions (`k_i = 0`) is always trained with the unconditional embedding.
pub fn train_prior(
    cfg: &PriorConfig,
    scheduler: &SchedulerConfig,
    latents: &Tensor,
    text_embeds: &[Tensor],
    s: &PriorTrainSettings,
    dev: &Device,
    mut on_step: impl FnMut(usize, f32),
) -> Result<PriorTraining> {
    let n = latents.dim(0)?;
    if text_embeds.len() != n {
        candle_core::bail!("{} caption sets for {n} latents", text_embeds.len());
    }
    let uncaptioned = text_embeds.iter().any(|t| t.dim(0).is_ok_and(|k| k == 0));
    if uncaptioned && s.mixup > 0.0 {
        candle_core::bail!("mixup needs a caption for every latent");
    }
    let varmap = random_varmap(s.seed, dev, |vb| PriorTransformer::new(vb, cfg))?;
    let prior = PriorTransformer::new(VarBuilder::from_varmap(&varmap, DType::F32, dev), cfg)?;
    let conds: Vec<Tensor> = text_embeds
        .iter()
        .map(|t| match t.dim(0)? {
            0 => Ok(t.clone()),
            _ => sampler::condition(t),
        })
        .collect::<Result<_>>()?;
    let sigmas = training_sigmas(scheduler);
    let mut rng = Rng::new(s.seed ^ 0x9e10);
    let mut opt = AdamW::new(
        varmap.all_vars(),
        ParamsAdamW {
            lr: s.lr,
            weight_decay: s.weight_decay,
            ..Default::default()
        },
    )?;
    let schedule = LrSchedule::warmup_cosine(s.lr, s.steps, 0.05);
    let b = if s.batch > 0 { s.batch } else { n * s.repeats };
    let all = Tensor::cat(&vec![latents.clone(); s.repeats], 0)?.detach();
    let mut losses = Vec::with_capacity(s.steps);
    for step in 0..s.steps {
        opt.set_learning_rate(schedule.at(step));
        let mut ts = Vec::with_capacity(b);
        let mut scale_noise = Vec::with_capacity(b);
        let mut scale_in = Vec::with_capacity(b);
        let mut weight = Vec::with_capacity(b);
        let mut cond = Vec::with_capacity(b);
        let mut mix = vec![0f32; b * n];
        let pick: Vec<usize> = if s.batch > 0 {
            (0..b).map(|_| rng.below(n)).collect()
        } else {
            (0..b).map(|i| i % n).collect()
        };
        for (i, &own) in pick.iter().enumerate() {
            let t = if s.timestep_power == 1.0 {
                rng.below(sigmas.len())
            } else {
                let u = rng.uniform().powf(s.timestep_power);
                ((u * sigmas.len() as f32) as usize).min(sigmas.len() - 1)
            };
            let sigma = sigmas[t];
            ts.push(t as f32);
            scale_noise.push(sigma);
            scale_in.push(1.0 / (sigma * sigma + 1.0).sqrt());
            weight.push(loss_weight(sigma, s.min_snr));
            mix[i * n + own] = 1.0;
            let c = &conds[own];
            let (k, dim) = c.dims2()?;
            if k == 0 {
                cond.push(Tensor::zeros(dim, c.dtype(), dev)?);
                continue;
            }
            let mut row = c.get(rng.below(k))?;
            if s.mixup > 0.0 && rng.uniform() < s.mixup {
                let (j, lambda) = (rng.below(n), rng.uniform());
                let other = conds[j].get(rng.below(conds[j].dim(0)?))?;
                // Renormalised, as every conditioning is (`sampler::condition`).
                let mixed = ((row * lambda as f64)? + (other * (1.0 - lambda) as f64)?)?;
                row = sampler::condition(&mixed)?;
                mix[i * n + own] = lambda;
                mix[i * n + j] += 1.0 - lambda;
            }
            cond.push(if rng.uniform() < s.cond_dropout {
                sampler::unconditional(&row)?
            } else {
                row
            });
        }
        let col = |v: Vec<f32>| Tensor::from_vec(v, (b, 1, 1), dev);
        let x0 = if s.mixup > 0.0 {
            let flat = latents.reshape((n, ()))?;
            let mut dims = latents.dims().to_vec();
            dims[0] = b;
            Tensor::from_vec(mix, (b, n), dev)?
                .matmul(&flat)?
                .reshape(dims)?
        } else if s.batch > 0 {
            let idx: Vec<u32> = pick.iter().map(|&i| i as u32).collect();
            latents
                .index_select(&Tensor::from_vec(idx, b, dev)?, 0)?
                .detach()
        } else {
            all.clone()
        };
        let eps = rng.normal_tensor(x0.dims(), dev)?;
        let x_t = (&x0 + eps.broadcast_mul(&col(scale_noise)?)?)?.broadcast_mul(&col(scale_in)?)?;
        let cond = Tensor::stack(&cond, 0)?;
        let pred =
            prior
                .forward_at(&x_t, &ts, &cond, &Policy::None)?
                .narrow(2, 0, cfg.embedding_dim)?;
        let loss = (pred - &x0)?
            .sqr()?
            .broadcast_mul(&col(weight)?)?
            .mean_all()?;
        let l = loss.to_scalar::<f32>()?;
        opt.backward_step(&loss)?;
        losses.push(l);
        on_step(step, l);
    }
    Ok(PriorTraining {
        varmap,
        #[cfg(test)]
        prior,
        losses,
    })
}

/// The weight of a training element at noise level `sigma` under min-SNR-`gamma` (1 when
/// `gamma` is 0).
fn loss_weight(sigma: f32, gamma: f32) -> f32 {
    if gamma > 0.0 {
        (1.0 / (sigma * sigma)).min(gamma) / gamma
    } else {
        1.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A one-block prior over 4 tokens of width 16, conditioned on 8-dim embeddings.
    fn tiny_config() -> Result<PriorConfig> {
        serde_json::from_value(serde_json::json!({
            "num_attention_heads": 2, "attention_head_dim": 8, "num_layers": 1, "embedding_dim": 16,
            "num_embeddings": 4, "additional_embeddings": 0, "dropout": 0.0, "time_embed_act_fn": "gelu",
            "norm_in_type": "layer", "embedding_proj_norm_type": null, "encoder_hid_proj_type": null,
            "added_emb_type": null, "time_embed_dim": 64, "embedding_proj_dim": 8, "clip_embed_dim": 32
        }))
        .map_err(|e| candle_core::Error::Msg(e.to_string()))
    }

    /// 150 steps over the whole set, 4 copies per batch, Shap-E's objective.
    fn short_training() -> PriorTrainSettings {
        PriorTrainSettings {
            repeats: 4,
            ..PriorTrainSettings::shap_e(150, 3e-3, 1)
        }
    }

    /// `n` random latents of the tiny config's shape `(n, 4, 16)`, uniform in ±0.8.
    fn random_latents(n: usize, rng: &mut Rng) -> Result<Tensor> {
        rng.uniform_tensor(&[n, 4, 16], &Device::Cpu)?
            .affine(1.6, -0.8)
    }

    /// Min-SNR-5: full weight up to σ = 1/√5, then 1/(5σ²); uniform when off.
    #[test]
    fn min_snr_weights_fall_above_the_knee() {
        assert_eq!(loss_weight(0.1, 5.0), 1.0);
        assert!((loss_weight(2.0, 5.0) - 0.05).abs() < 1e-7);
        assert!((loss_weight(1.0 / 5f32.sqrt(), 5.0) - 1.0).abs() < 1e-5);
        assert_eq!(loss_weight(40.0, 0.0), 1.0);
    }

    /// Two latents told apart by their conditioning: a short training lowers the loss, and the
    /// trained prior's samples land nearer their own latent than the other one.
    #[test]
    fn short_training_lowers_the_loss_and_follows_the_conditioning() -> Result<()> {
        let dev = Device::Cpu;
        let cfg = tiny_config()?;
        let mut rng = Rng::new(5);
        let latents = random_latents(2, &mut rng)?;
        let embeds = [
            rng.normal_tensor(&[3, 8], &dev)?.affine(0.1, 1.0)?,
            rng.normal_tensor(&[3, 8], &dev)?.affine(0.1, -1.0)?,
        ];
        let s = short_training();
        let sched = SchedulerConfig::shap_e();
        let out = train_prior(&cfg, &sched, &latents, &embeds, &s, &dev, |_, _| {})?;
        let mean = |v: &[f32]| v.iter().sum::<f32>() / v.len() as f32;
        let (first, last) = (mean(&out.losses[..15]), mean(&out.losses[135..]));
        assert!(last < 0.5 * first, "loss {first} → {last}");
        // The instance that was trained, against one rebuilt from the saved values.
        let prior = &out.prior;
        let rebuilt = PriorTransformer::new(
            VarBuilder::from_tensors(
                clipsculpt::random::varmap_tensors(&out.varmap)?,
                DType::F32,
                &dev,
            ),
            &cfg,
        )?;
        let c = sampler::condition(&embeds[0])?;
        let a = prior.forward(&latents.get(0)?.unsqueeze(0)?.repeat((3, 1, 1))?, 500.0, &c)?;
        let b = rebuilt.forward(&latents.get(0)?.unsqueeze(0)?.repeat((3, 1, 1))?, 500.0, &c)?;
        let diff = (a - b)?.abs()?.max_all()?.to_scalar::<f32>()?;
        assert!(diff < 1e-6, "rebuilt prior differs by {diff}");
        let text = Tensor::stack(&[embeds[0].get(0)?, embeds[1].get(0)?], 0)?;
        let noise = rng.normal_tensor(&[2, 64], &dev)?;
        let z = sampler::sample_latents_from(prior, &sched, &text, &noise, 16, 3.0)?;
        for i in 0..2 {
            let d = |j: usize| -> Result<f32> {
                (z.get(i)? - latents.get(j)?)?
                    .sqr()?
                    .mean_all()?
                    .to_scalar()
            };
            assert!(d(i)? < d(1 - i)?, "sample {i} is nearer the other latent");
        }
        Ok(())
    }

    /// Batches drawn at random (with weight decay) train too: the loss falls, and a decayed
    /// prior's weights are smaller than the same training's without decay.
    #[test]
    fn random_batches_with_weight_decay_train() -> Result<()> {
        let dev = Device::Cpu;
        let cfg = tiny_config()?;
        let mut rng = Rng::new(5);
        let latents = random_latents(3, &mut rng)?;
        let embeds: Vec<Tensor> = (0..3)
            .map(|_| rng.normal_tensor(&[2, 8], &dev))
            .collect::<Result<_>>()?;
        let sched = SchedulerConfig::shap_e();
        let norm = |decay: f64| -> Result<(f32, Vec<f32>)> {
            let s = PriorTrainSettings {
                steps: 120,
                repeats: 1,
                batch: 5,
                weight_decay: decay,
                timestep_power: 2.0,
                ..short_training()
            };
            let out = train_prior(&cfg, &sched, &latents, &embeds, &s, &dev, |_, _| {})?;
            let mut sq = 0f32;
            for v in out.varmap.all_vars() {
                sq += v.as_tensor().sqr()?.sum_all()?.to_scalar::<f32>()?;
            }
            Ok((sq.sqrt(), out.losses))
        };
        let (plain, losses) = norm(0.0)?;
        let mean = |v: &[f32]| v.iter().sum::<f32>() / v.len() as f32;
        let (first, last) = (mean(&losses[..12]), mean(&losses[108..]));
        assert!(last < 0.7 * first, "loss {first} → {last}");
        let (decayed, _) = norm(0.5)?;
        assert!(decayed < plain, "{decayed} vs {plain}");
        Ok(())
    }

    /// With mixup, the conditioning halfway between two pairs' gives a sample nearer the halfway
    /// latent than either latent: the mixed pairs were trained on.
    #[test]
    fn mixup_trains_the_map_between_pairs() -> Result<()> {
        let dev = Device::Cpu;
        let cfg = tiny_config()?;
        let mut rng = Rng::new(5);
        let latents = random_latents(2, &mut rng)?;
        let embeds = [
            rng.normal_tensor(&[1, 8], &dev)?,
            rng.normal_tensor(&[1, 8], &dev)?,
        ];
        let s = PriorTrainSettings {
            steps: 200,
            repeats: 8,
            cond_dropout: 0.0,
            mixup: 0.5,
            ..short_training()
        };
        let sched = SchedulerConfig::shap_e();
        let out = train_prior(&cfg, &sched, &latents, &embeds, &s, &dev, |_, _| {})?;
        let prior =
            PriorTransformer::new(VarBuilder::from_varmap(&out.varmap, DType::F32, &dev), &cfg)?;
        let half = (sampler::condition(&embeds[0])? + sampler::condition(&embeds[1])?)?;
        let noise = rng.normal_tensor(&[1, 64], &dev)?;
        let z = sampler::sample_latents_from(&prior, &sched, &half, &noise, 16, 1.0)?.get(0)?;
        let mid = ((latents.get(0)? + latents.get(1)?)? * 0.5)?;
        let d = |t: &Tensor| -> Result<f32> { (&z - t)?.sqr()?.mean_all()?.to_scalar() };
        let (to_mid, to_a, to_b) = (d(&mid)?, d(&latents.get(0)?)?, d(&latents.get(1)?)?);
        assert!(to_mid < to_a.min(to_b), "{to_mid} vs {to_a}, {to_b}");
        Ok(())
    }

    /// A latent without captions is trained with the unconditional embedding only: the
    /// unconditional prediction lands nearer it, the captioned latent's conditioning nearer its own
    /// latent; and mixup, which needs a caption for every latent, refuses such a set.
    #[test]
    fn an_uncaptioned_latent_is_learnt_unconditionally() -> Result<()> {
        let dev = Device::Cpu;
        let cfg = tiny_config()?;
        let mut rng = Rng::new(5);
        let latents = random_latents(2, &mut rng)?;
        let embeds = [
            rng.normal_tensor(&[3, 8], &dev)?.affine(0.1, 1.0)?,
            Tensor::zeros((0, 8), DType::F32, &dev)?,
        ];
        let mut s = short_training();
        let sched = SchedulerConfig::shap_e();
        let out = train_prior(&cfg, &sched, &latents, &embeds, &s, &dev, |_, _| {})?;
        let prior =
            PriorTransformer::new(VarBuilder::from_varmap(&out.varmap, DType::F32, &dev), &cfg)?;
        let c = sampler::condition(&embeds[0].get(0)?.unsqueeze(0)?)?;
        let x = rng.normal_tensor(&[1, 4, 16], &dev)?;
        for (cond, own) in [(c.clone(), 0), (sampler::unconditional(&c)?, 1)] {
            let pred = prior.forward(&x, 900.0, &cond)?.narrow(2, 0, 16)?.get(0)?;
            let d = |j: usize| -> Result<f32> {
                (&pred - latents.get(j)?)?.sqr()?.mean_all()?.to_scalar()
            };
            assert!(
                d(own)? < d(1 - own)?,
                "prediction {own} is nearer the other latent"
            );
        }
        s.mixup = 0.5;
        assert!(train_prior(&cfg, &sched, &latents, &embeds, &s, &dev, |_, _| {}).is_err());
        Ok(())
    }
}
