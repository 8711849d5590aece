//! Contrastive training of the toy CLIP (the same [`ClipModel`] as real CLIP, small config) on
//! volume renders of the toy world ([`crate::render`]) and the captions of *all* combinations.
//!
//! Each step takes one rendered view of every combination in the training set, composites it over
//! a random background with a random crop (guidance's own augmentations, [`clipsculpt::guide::augment`]),
//! pairs it with a random paraphrase of its caption, and minimises the symmetric InfoNCE loss with
//! CLIP's learned temperature. One image per combination means a batch never holds a false
//! negative. With `blends > 0`, each step also shows that many objects between two shapes
//! ([`crate::blend`]) as hard negatives: images that no caption names, which every caption must
//! rank below its own clean object. A fixed validation set of views reports image → caption top-1
//! accuracy.

use candle_core::{DType, Device, Result, Tensor, D};
use candle_nn::{AdamW, Optimizer, ParamsAdamW, VarBuilder, VarMap};

use crate::blend::Blend;
use crate::caption::{caption, captions};
use crate::render::{random_camera, render_object, DensityModel, View};
use crate::world::{Colour, Shape, WorldObject};
use clipsculpt::autodiff::checkpoint::Policy;
use clipsculpt::autodiff::rng::Rng;
use clipsculpt::clip::{preprocess, scorer::normalize, ClipConfig, ClipModel, ClipTokenizer};
use clipsculpt::guide::augment;
use clipsculpt::guide::schedule::LrSchedule;

/// Settings of the contrastive training.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ClipTrainSettings {
    /// Adam steps.
    pub steps: usize,
    /// Peak learning rate (linear warm-up over a tenth of the steps, cosine decay).
    pub lr: f64,
    /// Rendered views per combination in the training pool.
    pub views: usize,
    /// Rendered views per combination in the validation set.
    pub val_views: usize,
    /// Render side in pixels, also the vision tower's input side (guidance renders at this size
    /// too).
    pub render_size: usize,
    /// Patch side of the vision tower.
    pub patch: usize,
    /// Samples per ray.
    pub samples: usize,
    /// Smallest crop side as a fraction of the render.
    pub min_crop: f32,
    /// Hard-negative images per step, drawn from a pool of shape blends (0: none).
    #[serde(default)]
    pub blends: usize,
    /// Seed of the pool, the initial weights and every draw.
    pub seed: u64,
}

/// The trained CLIP's parameters and what the training measured.
pub struct ClipTraining {
    /// Parameters by checkpoint key.
    pub varmap: VarMap,
    /// The model that was trained (the tests compare it with one rebuilt from `varmap`).
    #[cfg(test)]
    pub model: ClipModel,
    /// Loss per step.
    pub losses: Vec<f32>,
    /// `(step, top-1 accuracy)` on the validation views.
    pub accuracy: Vec<(usize, f32)>,
    /// `(step, share)` of validation views that their own caption scores above a blend of the
    /// same object with another shape (measured with or without blends in training).
    pub blend_preference: Vec<(usize, f32)>,
}

/// The pre-rendered views of one combination.
struct Pool {
    combo: (Shape, Colour),
    views: Vec<View>,
}

/// `n` views of every combination; of a blend of each object with another shape when `blends`.
fn render_pool(
    combos: &[(Shape, Colour)],
    n: usize,
    blends: bool,
    s: &ClipTrainSettings,
    density: DensityModel,
    rng: &mut Rng,
    dev: &Device,
) -> Result<Vec<Pool>> {
    combos
        .iter()
        .map(|&(shape, colour)| {
            let views = (0..n)
                .map(|_| {
                    let obj = WorldObject::random(shape, colour, rng);
                    let cam = random_camera(s.render_size, rng);
                    if blends {
                        let blend = Blend::random(obj, rng);
                        render_object(&blend, &cam, s.samples, density, rng, dev)
                    } else {
                        render_object(&obj, &cam, s.samples, density, rng, dev)
                    }
                })
                .collect::<Result<_>>()?;
            Ok(Pool {
                combo: (shape, colour),
                views,
            })
        })
        .collect()
}

/// One augmented image `(3, size, size)` of `view`.
fn augmented(view: &View, s: &ClipTrainSettings, size: usize, rng: &mut Rng) -> Result<Tensor> {
    let kind = augment::random_background(rng);
    let draw = augment::draw(
        kind,
        s.render_size,
        s.render_size,
        s.min_crop,
        rng,
        view.rgb.device(),
    )?;
    augment::apply(&view.rgb, &view.alpha, &draw, size)
}

/// Row-wise `logsumexp(x) − x[i, i]`, averaged: cross-entropy with the diagonal as the targets
/// (`logits` may have more columns than rows: the extra ones are negatives only).
fn diagonal_cross_entropy(logits: &Tensor) -> Result<Tensor> {
    let n = logits.dim(0)?;
    let max = logits.max_keepdim(D::Minus1)?.detach();
    let lse = (logits
        .broadcast_sub(&max)?
        .exp()?
        .sum_keepdim(D::Minus1)?
        .log()?
        + max)?;
    let eye = Tensor::eye(n, logits.dtype(), logits.device())?;
    let diag = (logits.narrow(1, 0, n)? * eye)?.sum_keepdim(D::Minus1)?;
    (lse - diag)?.mean_all()
}

/// How many times a run measures validation accuracy.
const ACCURACY_CHECKS: usize = 10;

/// Trains a CLIP of `cfg` on `combos` (every combination of the world, normally).
pub fn train_clip(
    cfg: &ClipConfig,
    tokenizer: &ClipTokenizer,
    combos: &[(Shape, Colour)],
    density: DensityModel,
    s: &ClipTrainSettings,
    dev: &Device,
    mut on_step: impl FnMut(usize, f32),
) -> Result<ClipTraining> {
    let varmap = clipsculpt::random::random_varmap(s.seed, dev, |vb| ClipModel::new(vb, cfg))?;
    let model = ClipModel::new(VarBuilder::from_varmap(&varmap, DType::F32, dev), cfg)?;
    let logit_scale = varmap
        .data()
        .lock()
        .map_err(|_| candle_core::Error::Msg("variable map lock poisoned (bug)".into()))?
        .get("logit_scale")
        .cloned()
        .ok_or_else(|| candle_core::Error::Msg("the CLIP has no logit_scale (bug)".into()))?;
    let mut rng = Rng::new(s.seed ^ 0xc11b);
    let pool = render_pool(combos, s.views, false, s, density, &mut rng.fork(1), dev)?;
    let val = render_pool(
        combos,
        s.val_views,
        false,
        s,
        density,
        &mut rng.fork(2),
        dev,
    )?;
    let val_blends = render_pool(combos, s.val_views, true, s, density, &mut rng.fork(4), dev)?;
    let blend_pool = match s.blends {
        0 => Vec::new(),
        _ => render_pool(
            combos,
            (s.views / 4).max(1),
            true,
            s,
            density,
            &mut rng.fork(5),
            dev,
        )?,
    };
    let size = cfg.vision_config.image_size;

    // Every paraphrase of every combination, tokenized once.
    let paraphrases: Vec<Vec<String>> = combos.iter().map(|&(sh, c)| captions(sh, c)).collect();
    let mut opt = AdamW::new(
        varmap.all_vars(),
        ParamsAdamW {
            lr: s.lr,
            weight_decay: 0.0,
            beta2: 0.98,
            ..Default::default()
        },
    )?;
    let schedule = LrSchedule::warmup_cosine(s.lr, s.steps, 0.05);
    let mut losses = Vec::with_capacity(s.steps);
    let (mut accuracy, mut blend_preference) = (Vec::new(), Vec::new());
    for step in 0..s.steps {
        opt.set_learning_rate(schedule.at(step));
        let mut images = Vec::with_capacity(pool.len());
        let mut texts = Vec::with_capacity(pool.len());
        for (p, para) in pool.iter().zip(&paraphrases) {
            let view = &p.views[rng.below(p.views.len())];
            images.push(augmented(view, s, size, &mut rng)?);
            texts.push(para[rng.below(para.len())].as_str());
        }
        for _ in 0..s.blends {
            let p = &blend_pool[rng.below(blend_pool.len())];
            images.push(augmented(
                &p.views[rng.below(p.views.len())],
                s,
                size,
                &mut rng,
            )?);
        }
        let images = Tensor::stack(&images, 0)?;
        let (ids, _) = tokenizer
            .encode_batch(&texts, dev)
            .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        let img = normalize(&model.image_features(&preprocess(&images, size)?, &Policy::None)?)?;
        let txt = normalize(&model.text_features(&ids)?)?;
        let scale = logit_scale.as_tensor().exp()?;
        let logits = img.matmul(&txt.t()?)?.broadcast_mul(&scale)?;
        // Images → captions over the clean images only; captions → images over all of them.
        let clean = logits.narrow(0, 0, pool.len())?;
        let loss =
            ((diagonal_cross_entropy(&clean)? + diagonal_cross_entropy(&logits.t()?)?)? * 0.5)?;
        let l = loss.to_scalar::<f32>()?;
        let grads = loss.backward()?;
        if step == 0 {
            let missing: Vec<String> = {
                let data = varmap.data().lock().map_err(|_| {
                    candle_core::Error::Msg("variable map lock poisoned (bug)".into())
                })?;
                data.iter()
                    .filter(|(_, v)| grads.get(v).is_none())
                    .map(|(k, _)| k.clone())
                    .collect()
            };
            if !missing.is_empty() {
                candle_core::bail!("no gradient reached {missing:?} (bug)");
            }
        }
        opt.step(&grads)?;
        // CLIP clamps its temperature at 100.
        logit_scale.set(&logit_scale.as_tensor().clamp(0f32, 100f32.ln())?)?;
        losses.push(l);
        on_step(step, l);
        if (step + 1) % (s.steps / ACCURACY_CHECKS).max(1) == 0 || step + 1 == s.steps {
            accuracy.push((
                step + 1,
                top1(&model, tokenizer, &val, s, size, &mut rng.fork(3))?,
            ));
            let prefer = prefers_clean(&model, tokenizer, &val, &val_blends, s, size, &rng)?;
            blend_preference.push((step + 1, prefer));
        }
    }
    Ok(ClipTraining {
        varmap,
        #[cfg(test)]
        model,
        losses,
        accuracy,
        blend_preference,
    })
}

/// Share of validation views whose canonical caption scores them above the blend view at the
/// same index (seeded augmentations).
fn prefers_clean(
    model: &ClipModel,
    tokenizer: &ClipTokenizer,
    val: &[Pool],
    blends: &[Pool],
    s: &ClipTrainSettings,
    size: usize,
    rng: &Rng,
) -> Result<f32> {
    let dev = model.device().clone();
    let (mut right, mut total) = (0usize, 0usize);
    let mut rng = rng.fork(6);
    for (clean, blend) in val.iter().zip(blends) {
        let (ids, _) = tokenizer
            .encode_batch(&[caption(clean.combo.0, clean.combo.1).as_str()], &dev)
            .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        let txt = normalize(&model.text_features(&ids)?.detach())?;
        let images = clean
            .views
            .iter()
            .chain(&blend.views)
            .map(|v| augmented(v, s, size, &mut rng))
            .collect::<Result<Vec<_>>>()?;
        let img = normalize(
            &model
                .image_features(
                    &preprocess(&Tensor::stack(&images, 0)?, size)?,
                    &Policy::None,
                )?
                .detach(),
        )?;
        let scores = img.matmul(&txt.t()?)?.flatten_all()?.to_vec1::<f32>()?;
        let (c, b) = scores.split_at(clean.views.len());
        right += c.iter().zip(b).filter(|(c, b)| c > b).count();
        total += c.len();
    }
    Ok(right as f32 / total.max(1) as f32)
}

/// Image → canonical caption top-1 accuracy over the validation views (fixed augmentations).
fn top1(
    model: &ClipModel,
    tokenizer: &ClipTokenizer,
    val: &[Pool],
    s: &ClipTrainSettings,
    size: usize,
    rng: &mut Rng,
) -> Result<f32> {
    let dev = model.device().clone();
    let texts: Vec<String> = val.iter().map(|p| caption(p.combo.0, p.combo.1)).collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let (ids, _) = tokenizer
        .encode_batch(&refs, &dev)
        .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
    let txt = normalize(&model.text_features(&ids)?.detach())?;
    let (mut right, mut total) = (0usize, 0usize);
    for (i, p) in val.iter().enumerate() {
        let images = p
            .views
            .iter()
            .map(|v| augmented(v, s, size, rng))
            .collect::<Result<Vec<_>>>()?;
        let images = Tensor::stack(&images, 0)?;
        let img = normalize(
            &model
                .image_features(&preprocess(&images, size)?, &Policy::None)?
                .detach(),
        )?;
        let best = img.matmul(&txt.t()?)?.argmax(D::Minus1)?.to_vec1::<u32>()?;
        right += best.iter().filter(|&&b| b as usize == i).count();
        total += best.len();
    }
    Ok(right as f32 / total.max(1) as f32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clipsculpt::clip::tokenizer::SpecialTokens;
    use clipsculpt::random::{toy_clip_config, varmap_tensors};

    /// Extra columns are negatives: one row of equal logits over two columns costs ln 2, a
    /// confident right column nothing; square logits keep the symmetric loss.
    #[test]
    fn cross_entropy_counts_extra_columns_as_negatives() -> Result<()> {
        let dev = Device::Cpu;
        let loss = |v: &[f32], cols: usize| -> Result<f32> {
            let t = Tensor::from_slice(v, (v.len() / cols, cols), &dev)?;
            diagonal_cross_entropy(&t)?.to_scalar::<f32>()
        };
        assert!((loss(&[0.0, 0.0], 2)? - 2f32.ln()).abs() < 1e-6);
        assert!(loss(&[30.0, 0.0], 2)? < 1e-6);
        assert!(loss(&[0.0, 30.0], 2)? > 29.0);
        // Two rows, three columns: row i's target is column i.
        let l = loss(&[1.0, 0.0, 0.0, 0.0, 1.0, 0.0], 3)?;
        let want = (1f32.exp() + 2.0).ln() - 1.0;
        assert!((l - want).abs() < 1e-5, "{l} vs {want}");
        Ok(())
    }

    /// Training on two combinations takes the loss well below chance (ln 2: two clean pairs, no
    /// blends) and every validation view to its own caption, and a CLIP rebuilt from the saved
    /// values embeds exactly like the trained instance (no stale copies of trained weights).
    /// Measured (seed 4): loss 0.82 over the first 20 steps, 0.021 over the last 20; with lr 0,
    /// 0.84 → 0.86. This small a CLIP learns at lr 1e-2 (not at 3e-3 or 3e-2, nor with blends as
    /// negatives, which keep it at chance), in 200 steps (about a second).
    #[test]
    fn short_training_lowers_the_loss_and_saves_what_it_trained() -> Result<()> {
        let dev = Device::Cpu;
        let cfg: ClipConfig = serde_json::from_value(toy_clip_config(16, 1, 16, 4))
            .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        let tok = tokenizers::Tokenizer::from_bytes(crate::toy_tokenizer_json().as_bytes())
            .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        let tokenizer = ClipTokenizer::new(tok, 77, &SpecialTokens::default())
            .map_err(candle_core::Error::Msg)?;
        let combos = [(Shape::Sphere, Colour::Red), (Shape::Cube, Colour::Blue)];
        let s = ClipTrainSettings {
            steps: 200,
            lr: 1e-2,
            views: 2,
            val_views: 1,
            render_size: 16,
            patch: 4,
            samples: 16,
            min_crop: 0.8,
            blends: 0,
            seed: 4,
        };
        let density = DensityModel {
            sharpness: 8.0,
            density: 20.0,
        };
        let out = train_clip(&cfg, &tokenizer, &combos, density, &s, &dev, |_, _| {})?;
        let mean = |v: &[f32]| v.iter().sum::<f32>() / v.len() as f32;
        let (first, last) = (mean(&out.losses[..20]), mean(&out.losses[180..]));
        let chance = 2f32.ln();
        assert!(
            last < 0.5 * chance,
            "loss {first} → {last}, chance {chance}"
        );
        assert_eq!(
            out.accuracy.last().map(|a| a.1),
            Some(1.0),
            "{:?}",
            out.accuracy
        );
        // The instance that was trained, against one rebuilt from the saved values.
        let trained = &out.model;
        let rebuilt = ClipModel::new(
            VarBuilder::from_tensors(varmap_tensors(&out.varmap)?, DType::F32, &dev),
            &cfg,
        )?;
        let (ids, _) = tokenizer
            .encode_batch(&["a red sphere"], &dev)
            .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        let img = Rng::new(1).uniform_tensor(&[1, 3, 16, 16], &dev)?;
        for (a, b) in [
            (trained.text_features(&ids)?, rebuilt.text_features(&ids)?),
            (
                trained.image_features(&img, &Policy::None)?,
                rebuilt.image_features(&img, &Policy::None)?,
            ),
        ] {
            let diff = (a - b)?.abs()?.max_all()?.to_scalar::<f32>()?;
            assert!(diff < 1e-6, "rebuilt CLIP differs by {diff}");
        }
        Ok(())
    }
}
