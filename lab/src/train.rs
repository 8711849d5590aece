//! `clipsculpt train-toy`: the embedded default, reproduced from a seed. Three stages, each in its
//! own module:
//!
//! 1. [`fit_decoder`](crate::fit_decoder): decoder + one latent per shape × colour (auto-decoding);
//! 2. [`train_clip`](crate::train_clip): the toy CLIP, contrastively, on renders of every combination;
//! 3. [`train_prior`](crate::train_prior): the prior, by diffusion on the latents of the combinations
//!    not in [`HELD_OUT`], conditioned on the trained CLIP's text embedding
//!    (`--prior-uncaptioned-held-out`: the held-out ones too, always unconditionally).
//!
//! The result is written in the loaders' layouts (`shap_e/` in diffusers' layout with the toy CLIP's
//! text tower as its `text_encoder/`, `clip/` in transformers' layout), with `train_log.json`
//! (settings, loss curves, accuracy, seconds per stage) and `MANIFEST.json` (settings and checksums).

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use candle_core::{DType, Device, Result, Tensor};
use candle_nn::VarBuilder;
use serde_json::json;

use crate::caption::{caption, captions};
use crate::checkpoint::{Checkpoint, CHECKPOINT_DIR};
use crate::distractors::{self, DistractorSettings, DISTRACTORS_FILE, DISTRACTORS_JSON};
use crate::fit_decoder::{fit_decoder, FitSettings};
use crate::render::DensityModel;
use crate::split::HELD_OUT_FILE;
use crate::train_clip::{train_clip, ClipTrainSettings};
use crate::train_prior::{
    train_prior_from, Checkpointing, PriorSnapshot, PriorTrainSettings, PriorTraining,
};
use crate::world::{combinations, Colour, Shape, WorldObject, HELD_OUT};
use clipsculpt::atomic::write_atomic;
use clipsculpt::clip::tokenizer::SpecialTokens;
use clipsculpt::clip::{ClipConfig, ClipTextModelWithProjection, ClipTokenizer};
use clipsculpt::random::{
    save_tensors, toy_clip_config, varmap_tensors, write_random_shap_e, ShapESizes,
};
use clipsculpt::shap_e::{
    PriorConfig, RendererConfig, SamplingDefaults, SchedulerConfig, SAMPLING_FILE,
};

/// Sizes of the embedded default.
pub const TOY_SIZES: ShapESizes = ShapESizes {
    d_hidden: 16,
    d_latent: 32,
    prior_layers: 2,
    prior_width: Some(128),
    text_width: TOY_CLIP_WIDTH,
};
/// Width of the toy CLIP (both towers and the projection; 2 text layers, as the prior's text encoder).
pub const TOY_CLIP_WIDTH: usize = 64;
/// Layers of the toy CLIP's vision tower.
pub const TOY_VISION_LAYERS: usize = 4;
/// Input side of the toy CLIP's vision tower.
pub const TOY_IMAGE_SIZE: usize = 32;
/// Patch side of the toy CLIP's vision tower.
pub const TOY_PATCH: usize = 4;

/// The toy CLIP's `config.json` for training settings `s`: width [`TOY_CLIP_WIDTH`] (both
/// towers), 2 text layers, [`TOY_VISION_LAYERS`] vision layers, input side `s.render_size`,
/// patch `s.patch`.
pub fn toy_clip_json(s: &ClipTrainSettings) -> serde_json::Value {
    let mut json = toy_clip_config(TOY_CLIP_WIDTH, 2, s.render_size, s.patch);
    json["vision_config"]["num_hidden_layers"] = json!(TOY_VISION_LAYERS);
    json
}

/// The training log (not checksummed: it holds timings).
pub const LOG_FILE: &str = "train_log.json";
/// The fitted latents `(combos · instances, rows, d_latent)`, in the order of the settings'
/// `combos` (each combination's instances together).
pub const LATENTS_FILE: &str = "latents.safetensors";

/// The caption of every combination, one per line, beside the scoring CLIP's weights: for
/// experiments only (`--negatives clip/caption-grid.txt`); guidance does not read it by default,
/// because it lists the evaluation's own captions.
pub const CAPTION_GRID_FILE: &str = "caption-grid.txt";

/// Everything `train-toy` does, from one seed.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ToyTrainSettings {
    /// Root seed; every stage derives its own.
    pub seed: u64,
    /// The combinations to train on (all of them, or a subset for `--quick`).
    pub combos: Vec<(Shape, Colour)>,
    /// Objects per combination: 1 is the canonical object (the shipped worlds); more are drawn
    /// with the world's random size, yaw and shade ([`ToyTrainSettings::with_instances`]).
    pub instances: usize,
    /// Decoder fit.
    pub decoder: FitSettings,
    /// Contrastive training of the conditioning CLIP, whose text tower is the prior's
    /// `text_encoder/` (and which scores guidance too when `scorer` is `None`).
    pub clip: ClipTrainSettings,
    /// A separate scoring CLIP for guidance (`clip/`), trained by the same recipe with its own
    /// settings after the prior; `None`: the conditioning CLIP is the scorer. As with real weights,
    /// the prior's text encoder and the scorer are then different models.
    pub scorer: Option<ClipTrainSettings>,
    /// Prior diffusion training.
    pub prior: PriorTrainSettings,
    /// Recommended sampling settings written to `shap_e/sampling.json`.
    pub sampling: SamplingDefaults,
    /// Keep the CLIP already in the output folder (and its logged losses) instead of training it
    /// again: the CLIP stage depends only on its own settings and seed, not on the decoder, so
    /// this only saves its time when the decoder or prior stages change.
    pub reuse_clip: bool,
    /// Train only the scoring CLIP into an existing world in the output folder, keeping its
    /// decoder, latents, text encoder and prior (and their logged curves).
    pub only_scorer: bool,
    /// The combinations the prior does not train on (written to `shap_e/held_out.txt`).
    pub held_out: Vec<(Shape, Colour)>,
    /// Train only the prior into an existing world in the output folder (for another held-out
    /// split), keeping its decoder, latents and CLIPs.
    pub only_prior: bool,
    /// With `only_prior`: first make the scoring CLIP's text tower (`clip/`) the prior's text
    /// encoder, so the prior is conditioned by the CLIP that tells captions apart best.
    pub prior_text_from_scorer: bool,
    /// With `only_prior`: the prior's transformer blocks, rewritten into its config before it is
    /// trained (`None`: the world's config as it is).
    pub prior_layers: Option<usize>,
    /// The prior also trains on the held-out combinations' latents, always with the unconditional
    /// embedding: it can make those objects, but none of their captions ever reaches it.
    pub held_out_uncaptioned: bool,
    /// Uncaptioned shape blends in the prior's unconditional branch (`--prior-distractors`).
    pub distractors: DistractorSettings,
    /// Go on from the checkpoint in the output folder, if there is one (`--resume`; the result
    /// is the same, so it is not recorded).
    #[serde(skip)]
    pub resume: bool,
    /// Prior steps between two checkpoints ([`crate::checkpoint::EVERY`]).
    #[serde(skip)]
    pub checkpoint_every: usize,
}

impl ToyTrainSettings {
    /// The settings of the committed embedded default.
    pub fn full(seed: u64) -> Self {
        Self {
            seed,
            combos: combinations(),
            instances: 1,
            decoder: FitSettings {
                steps: 1000,
                points: 1024,
                lr: 5e-3,
                sharpness: 8.0,
                density: 20.0,
                latent_rms: 0.4,
                seed: seed + 1,
                restarts: 3,
                restart_steps: 300,
                factorized: true,
                instance_rms: 0.0,
                instance_factors: false,
            },
            clip: ClipTrainSettings {
                steps: 4000,
                lr: 2e-3,
                views: 32,
                val_views: 4,
                render_size: TOY_IMAGE_SIZE,
                patch: TOY_PATCH,
                samples: 64,
                min_crop: 0.8,
                blends: 0,
                seed: seed + 2,
            },
            scorer: None,
            prior: PriorTrainSettings::shap_e(2000, 1e-3, seed + 3),
            // The toy prior memorises its 30 latents; extrapolating beyond the conditional
            // prediction (scale > 1) overshoots them.
            sampling: SamplingDefaults {
                guidance_scale: 1.0,
            },
            reuse_clip: false,
            only_scorer: false,
            held_out: HELD_OUT.to_vec(),
            only_prior: false,
            prior_text_from_scorer: false,
            held_out_uncaptioned: false,
            prior_layers: None,
            distractors: DistractorSettings::protocol(0),
            resume: false,
            checkpoint_every: crate::checkpoint::EVERY,
        }
    }

    /// A few combinations (one of them held out) and a few steps of each stage: checks the
    /// whole command in seconds.
    pub fn quick(seed: u64) -> Self {
        let mut s = Self::full(seed);
        s.combos = vec![
            (Shape::Sphere, Colour::Red),
            (Shape::Cube, Colour::Green),
            (Shape::Sphere, Colour::Green),
            (Shape::Cube, Colour::Red),
        ];
        s.decoder.steps = 40;
        s.decoder.points = 256;
        // Fewer steps, or lr 2e-3 (the full run's), leave this CLIP at chance (loss ln 4).
        s.clip.steps = 120;
        s.clip.lr = 5e-3;
        s.clip.views = 3;
        s.clip.val_views = 2;
        s.clip.samples = 16;
        s.prior.steps = 30;
        s.distractors.steps = 40;
        s
    }

    /// `k` instances of every combination, each with the world's random size, yaw and shade, so
    /// that a caption names a distribution rather than one latent (`train-toy --instances K`;
    /// the prior's samples still vary little with the seed, docs/toy-world.md). Each instance's latent adds a free instance code
    /// of row RMS 0.2 to its shape's and colour's codes; the decoder fit draws `1/k` of the points
    /// per object, so a step costs what it did; the prior draws 30 pairs per batch (a step costs
    /// what it did) and is regularised by AdamW weight decay 0.1.
    pub fn with_instances(mut self, k: usize) -> Self {
        self.instances = k.max(1);
        if k > 1 {
            self.decoder.points = (self.decoder.points / k).max(32);
            self.decoder.instance_rms = 0.2;
            self.prior.batch = 30;
            self.prior.weight_decay = 0.1;
        }
        self
    }

    /// Adds a separate scoring CLIP trained by the conditioning CLIP's recipe on `side`-pixel
    /// renders, with the patch scaled to keep its token count and a pool of twice as many views
    /// per combination (the conditioning CLIP's 32 views let it tell shapes apart on only ~72 %
    /// of its validation views) (`train-toy --scorer-size`).
    pub fn with_scorer(mut self, side: usize) -> Self {
        let scale = (side / self.clip.render_size).max(1);
        self.scorer = Some(ClipTrainSettings {
            render_size: side,
            patch: self.clip.patch * scale,
            views: 2 * self.clip.views,
            seed: self.seed + 4,
            ..self.clip.clone()
        });
        self
    }
}

/// What a training run measured (also written to [`LOG_FILE`]).
#[derive(Debug, Clone, serde::Serialize)]
pub struct TrainLog {
    /// The settings.
    pub settings: ToyTrainSettings,
    /// Decoder fit loss per step (joint fit, then the refits of collapsed latents).
    pub decoder_loss: Vec<f32>,
    /// Indices (into the settings' `combos`) refitted in each refit round.
    pub decoder_refits: Vec<Vec<usize>>,
    /// Conditioning CLIP loss per step.
    pub clip_loss: Vec<f32>,
    /// `(step, accuracy)` of the conditioning CLIP on its validation views.
    pub clip_accuracy: Vec<(usize, f32)>,
    /// Prior loss per step.
    pub prior_loss: Vec<f32>,
    /// How often the prior's batches drew each kind of latent (`None` in logs from before it
    /// was counted).
    pub prior_draws: Option<PriorDraws>,
    /// Scoring CLIP loss per step (empty without a separate scorer).
    pub scorer_loss: Vec<f32>,
    /// `(step, accuracy)` of the scoring CLIP on its validation views.
    pub scorer_accuracy: Vec<(usize, f32)>,
    /// `(step, share)` of the scoring CLIP's validation views that their caption scores above a
    /// shape blend ([`crate::blend`]).
    pub scorer_blend_preference: Vec<(usize, f32)>,
    /// Seconds per stage: decoder, conditioning CLIP, prior, scoring CLIP.
    pub seconds: [f64; 4],
}

/// Progress of a run.
pub enum TrainProgress {
    /// A stage starts, with its step count.
    Stage(&'static str, usize),
    /// A step finished with this loss.
    Step(f32),
}

fn msg(e: impl std::fmt::Display) -> candle_core::Error {
    candle_core::Error::Msg(e.to_string())
}

fn write_json(path: &Path, value: &serde_json::Value) -> Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(msg)?;
    write_atomic(path, text.as_bytes()).map_err(msg)
}

/// The training log of an earlier run in `out` (`Null` when there is none or it does not parse).
fn earlier_log(out: &Path) -> serde_json::Value {
    std::fs::read_to_string(out.join(LOG_FILE))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

/// The keys of a full CLIP checkpoint that make up its text tower with projection (the prior's
/// `text_encoder/`).
fn is_text_key(key: &str) -> bool {
    key.starts_with("text_model.") || key.starts_with("text_projection.")
}

/// One trained CLIP: its weights, loss curve, validation accuracy and seconds.
struct TrainedClip {
    tensors: HashMap<String, Tensor>,
    loss: Vec<f32>,
    accuracy: Vec<(usize, f32)>,
    blend_preference: Vec<(usize, f32)>,
    seconds: f64,
}

impl TrainedClip {
    /// The CLIP an earlier run trained (`--reuse-clip`): its tensors, with its log's curves and seconds.
    fn from_earlier(tensors: HashMap<String, Tensor>, earlier: &serde_json::Value) -> Self {
        Self {
            tensors,
            loss: serde_json::from_value(earlier["clip_loss"].clone()).unwrap_or_default(),
            accuracy: serde_json::from_value(earlier["clip_accuracy"].clone()).unwrap_or_default(),
            blend_preference: Vec::new(),
            seconds: earlier["seconds"][1].as_f64().unwrap_or(0.0),
        }
    }

    /// The text tower's tensors (the prior's `text_encoder/`).
    fn text_tower(&self) -> HashMap<String, Tensor> {
        self.tensors
            .iter()
            .filter(|(k, _)| is_text_key(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }
}

/// Trains a toy CLIP with `s`, reporting progress under `stage`.
fn train_toy_clip(
    stage: &'static str,
    s: &ClipTrainSettings,
    combos: &[(Shape, Colour)],
    density: DensityModel,
    tokenizer: &ClipTokenizer,
    dev: &Device,
    on_progress: &mut impl FnMut(TrainProgress),
) -> Result<TrainedClip> {
    let t = Instant::now();
    on_progress(TrainProgress::Stage(stage, s.steps));
    let cfg: ClipConfig = serde_json::from_value(toy_clip_json(s)).map_err(msg)?;
    let clip = train_clip(&cfg, tokenizer, combos, density, s, dev, |_, l| {
        on_progress(TrainProgress::Step(l))
    })?;
    Ok(TrainedClip {
        tensors: varmap_tensors(&clip.varmap)?,
        loss: clip.losses,
        accuracy: clip.accuracy,
        blend_preference: clip.blend_preference,
        seconds: t.elapsed().as_secs_f64(),
    })
}

/// Writes a full CLIP (`config.json` for `s`, weights, tokenizer, the world's captions as
/// negatives) to `dir`.
fn write_clip_dir(
    dir: &Path,
    s: &ClipTrainSettings,
    tensors: &HashMap<String, Tensor>,
    combos: &[(Shape, Colour)],
) -> Result<()> {
    std::fs::create_dir_all(dir).map_err(msg)?;
    write_json(&dir.join("config.json"), &toy_clip_json(s))?;
    write_atomic(
        &dir.join("tokenizer.json"),
        crate::toy_tokenizer_json().as_bytes(),
    )
    .map_err(msg)?;
    let negatives: Vec<String> = combos.iter().map(|&(sh, c)| caption(sh, c)).collect();
    write_atomic(
        &dir.join(CAPTION_GRID_FILE),
        (negatives.join("\n") + "\n").as_bytes(),
    )
    .map_err(msg)?;
    save_tensors(tensors, &dir.join("model.safetensors"))
}

/// Trains the scoring CLIP with `s` and writes it to `dir` ([`write_clip_dir`]).
fn train_scorer(
    dir: &Path,
    s: &ClipTrainSettings,
    combos: &[(Shape, Colour)],
    density: DensityModel,
    tokenizer: &ClipTokenizer,
    dev: &Device,
    on_progress: &mut impl FnMut(TrainProgress),
) -> Result<TrainedClip> {
    let clip = train_toy_clip(
        "training the scoring CLIP",
        s,
        combos,
        density,
        tokenizer,
        dev,
        on_progress,
    )?;
    write_clip_dir(dir, s, &clip.tensors, combos)?;
    Ok(clip)
}

/// The toy tokenizer.
fn toy_tokenizer() -> Result<ClipTokenizer> {
    let tok =
        tokenizers::Tokenizer::from_bytes(crate::toy_tokenizer_json().as_bytes()).map_err(msg)?;
    ClipTokenizer::new(tok, 77, &SpecialTokens::default()).map_err(msg)
}

/// Trains the toy world with `s` and writes it to `out` (created; existing model files replaced).
pub fn train_toy(
    out: &Path,
    s: &ToyTrainSettings,
    dev: &Device,
    mut on_progress: impl FnMut(TrainProgress),
) -> Result<TrainLog> {
    if s.only_scorer {
        return train_scorer_only(out, s, dev, on_progress);
    }
    if s.only_prior {
        return train_prior_only(out, s, dev, on_progress);
    }
    let shap_e_dir = out.join("shap_e");
    let clip_dir = out.join("clip");
    let earlier = earlier_log(out);
    // The conditioning CLIP's text tower, read before the random layout below replaces it.
    let reused_text = reused_text_tower(&shap_e_dir, s, dev)?;
    let layouts = Layouts::write(&shap_e_dir, s)?;
    let tokenizer = toy_tokenizer()?;

    // 1. Decoder and latents.
    let t = Instant::now();
    let fit = decoder_stage(out, &layouts.renderer, s, dev, &mut on_progress)?;
    let t_decoder = t.elapsed().as_secs_f64();

    // 2. The conditioning CLIP (the scorer too, without a separate one).
    let density = DensityModel {
        sharpness: s.decoder.sharpness,
        density: s.decoder.density,
    };
    let conditioning = match reused_text {
        Some(tensors) => TrainedClip::from_earlier(tensors, &earlier),
        None => conditioning_clip(&clip_dir, s, density, &tokenizer, dev, &mut on_progress)?,
    };
    let text_tensors = conditioning.text_tower();
    save_tensors(
        &text_tensors,
        &shap_e_dir.join("text_encoder").join("model.safetensors"),
    )?;

    // 3. Prior, on the combinations that are not held out.
    let t = Instant::now();
    let text_model = ClipTextModelWithProjection::new(
        VarBuilder::from_tensors(text_tensors, DType::F32, dev),
        &layouts.clip.text_config,
        layouts.clip.projection_dim,
    )?;
    let (prior, prior_draws) = prior_stage(
        out,
        s,
        fit.latents.as_tensor(),
        &text_model,
        (&layouts.prior, &layouts.scheduler),
        dev,
        &mut on_progress,
    )?;
    let t_prior = t.elapsed().as_secs_f64();

    // 4. The scoring CLIP (without a new one, `--reuse-clip` keeps the earlier run's `clip/`).
    let scorer = match &s.scorer {
        Some(sc) => Some(train_scorer(
            &clip_dir,
            sc,
            &s.combos,
            density,
            &tokenizer,
            dev,
            &mut on_progress,
        )?),
        None => None,
    };

    // Without a new scorer, `--reuse-clip` keeps the earlier `clip/` and so its logged curves.
    let kept = kept_log(out, s);
    let (scorer_loss, scorer_accuracy, scorer_blend_preference, scorer_seconds) =
        match (&scorer, s.reuse_clip) {
            (Some(c), _) => (
                c.loss.clone(),
                c.accuracy.clone(),
                c.blend_preference.clone(),
                c.seconds,
            ),
            (None, true) => (
                kept.scorer_loss,
                kept.scorer_accuracy,
                kept.scorer_blend_preference,
                kept.seconds[3],
            ),
            (None, false) => Default::default(),
        };
    let log = TrainLog {
        settings: s.clone(),
        decoder_loss: fit.losses,
        decoder_refits: fit.refits,
        clip_loss: conditioning.loss,
        clip_accuracy: conditioning.accuracy,
        prior_loss: prior.losses,
        prior_draws: Some(prior_draws),
        scorer_loss,
        scorer_accuracy,
        scorer_blend_preference,
        seconds: [t_decoder, conditioning.seconds, t_prior, scorer_seconds],
    };
    finish(out, s, &log, None)?;
    Ok(log)
}

/// Trains the conditioning CLIP; it is also the scorer (written to `clip_dir`) when `s` asks for no separate one.
fn conditioning_clip(
    clip_dir: &Path,
    s: &ToyTrainSettings,
    density: DensityModel,
    tokenizer: &ClipTokenizer,
    dev: &Device,
    on_progress: &mut impl FnMut(TrainProgress),
) -> Result<TrainedClip> {
    let clip = train_toy_clip(
        "training the CLIP",
        &s.clip,
        &s.combos,
        density,
        tokenizer,
        dev,
        on_progress,
    )?;
    if s.scorer.is_none() {
        write_clip_dir(clip_dir, &s.clip, &clip.tensors, &s.combos)?;
    }
    Ok(clip)
}

/// With `--reuse-clip`, the text tower an earlier run left in `shap_e_dir/text_encoder`.
fn reused_text_tower(
    shap_e_dir: &Path,
    s: &ToyTrainSettings,
    dev: &Device,
) -> Result<Option<HashMap<String, Tensor>>> {
    if !s.reuse_clip {
        return Ok(None);
    }
    let weights = shap_e_dir.join("text_encoder").join("model.safetensors");
    candle_core::safetensors::load(&weights, dev)
        .map(Some)
        .map_err(|e| {
            msg(format!(
                "--reuse-clip needs the text encoder of an earlier run in {}: {e}",
                weights.display()
            ))
        })
}

/// The configs of the toy's models, as written into its layouts.
struct Layouts {
    clip: ClipConfig,
    renderer: RendererConfig,
    prior: PriorConfig,
    scheduler: SchedulerConfig,
}

impl Layouts {
    /// Writes the layouts and configs into `shap_e_dir`, with random weights that the stages replace, and reads
    /// their configs back.
    fn write(shap_e_dir: &Path, s: &ToyTrainSettings) -> Result<Self> {
        write_random_shap_e(shap_e_dir, TOY_SIZES, s.seed)?;
        write_json(
            &shap_e_dir.join(SAMPLING_FILE),
            &serde_json::to_value(s.sampling).map_err(msg)?,
        )?;
        fn read<T: serde::de::DeserializeOwned>(p: &Path) -> Result<T> {
            serde_json::from_str(&std::fs::read_to_string(p).map_err(msg)?).map_err(msg)
        }
        Ok(Self {
            clip: serde_json::from_value(toy_clip_json(&s.clip)).map_err(msg)?,
            renderer: read(&shap_e_dir.join("shap_e_renderer").join("config.json"))?,
            prior: read(&shap_e_dir.join("prior").join("config.json"))?,
            scheduler: read(&shap_e_dir.join("scheduler").join("scheduler_config.json"))?,
        })
    }
}

/// Fits the decoder and the latents of `s.combos`; writes the decoder's weights and `latents.safetensors`.
fn decoder_stage(
    out: &Path,
    renderer: &RendererConfig,
    s: &ToyTrainSettings,
    dev: &Device,
    on_progress: &mut impl FnMut(TrainProgress),
) -> Result<crate::fit_decoder::DecoderFit> {
    on_progress(TrainProgress::Stage("fitting the decoder", s.decoder.steps));
    let objects = world_objects(s);
    let fit = fit_decoder(renderer, &objects, &s.decoder, dev, |_, l| {
        on_progress(TrainProgress::Step(l))
    })?;
    save_tensors(
        &varmap_tensors(&fit.varmap)?,
        &out.join("shap_e")
            .join("shap_e_renderer")
            .join("diffusion_pytorch_model.safetensors"),
    )?;
    clipsculpt::shap_e::save_latent(&out.join(LATENTS_FILE), fit.latents.as_tensor())
        .map_err(msg)?;
    Ok(fit)
}

/// The objects the decoder is fitted to, combination-major: `s.instances` of each of `s.combos`
/// (the canonical object when there is one instance).
fn world_objects(s: &ToyTrainSettings) -> Vec<WorldObject> {
    if s.instances <= 1 {
        return s
            .combos
            .iter()
            .map(|&(sh, c)| WorldObject::canonical(sh, c))
            .collect();
    }
    let mut rng = clipsculpt::autodiff::rng::Rng::new(s.decoder.seed ^ 0x1257);
    s.combos
        .iter()
        .flat_map(|&(sh, c)| (0..s.instances).map(move |_| (sh, c)))
        .map(|(sh, c)| WorldObject::random(sh, c, &mut rng))
        .collect()
}

/// Trains the prior on the latents `(combos · instances, rows, d)` of `s.combos` that are not in
/// `s.held_out`, conditioned on `text_model`'s embeddings of their captions (and, with
/// `s.held_out_uncaptioned`, on the held-out ones without captions, and on `s.distractors`);
/// writes its weights and `held_out.txt` into `out/shap_e` (and the distractors beside
/// `latents.safetensors`). Goes on from, and saves, `out`'s checkpoint.
fn prior_stage(
    out: &Path,
    s: &ToyTrainSettings,
    all_latents: &Tensor,
    text_model: &ClipTextModelWithProjection,
    (prior_cfg, scheduler): (&PriorConfig, &SchedulerConfig),
    dev: &Device,
    on_progress: &mut impl FnMut(TrainProgress),
) -> Result<(PriorTraining, PriorDraws)> {
    let n = all_latents.dim(0)?;
    if n == 0 || n % s.combos.len() != 0 {
        candle_core::bail!("{n} latents for {} combinations", s.combos.len());
    }
    let ck = Checkpoint::new(out, &command_line(s));
    if !s.resume {
        ck.remove()?;
    } else if !ck.exists() {
        tracing::info!(
            "--resume: no checkpoint in {}, starting afresh",
            out.display()
        );
    }
    let distractors = distractor_stage(out, s, all_latents, &ck, dev, on_progress)?;
    on_progress(TrainProgress::Stage("training the prior", s.prior.steps));
    let set = PriorSet::build(
        s,
        all_latents,
        text_model,
        prior_cfg.clip_embed_dim(),
        distractors.as_ref(),
        dev,
    )?;
    let mut save = |snap: &PriorSnapshot| ck.save_prior(snap);
    let checkpointing = Checkpointing {
        start: if s.resume { ck.prior(dev)? } else { None },
        every: s.checkpoint_every,
        save: &mut save,
    };
    let prior = train_prior_from(
        prior_cfg,
        scheduler,
        &Tensor::stack(&set.latents, 0)?,
        &set.embeds,
        &s.prior,
        checkpointing,
        dev,
        |_, l| on_progress(TrainProgress::Step(l)),
    )?;
    let shap_e_dir = out.join("shap_e");
    save_tensors(
        &varmap_tensors(&prior.varmap)?,
        &shap_e_dir
            .join("prior")
            .join("diffusion_pytorch_model.safetensors"),
    )?;
    let held: Vec<String> = s.held_out.iter().map(|&(sh, c)| caption(sh, c)).collect();
    write_atomic(
        &shap_e_dir.join(HELD_OUT_FILE),
        (held.join("\n") + "\n").as_bytes(),
    )
    .map_err(msg)?;
    if let Some((latents, json)) = &distractors {
        clipsculpt::shap_e::save_latent(&out.join(DISTRACTORS_FILE), latents).map_err(msg)?;
        write_atomic(&out.join(DISTRACTORS_JSON), json.as_bytes()).map_err(msg)?;
    }
    let draws = PriorDraws::count(&prior.draws, &set.group);
    Ok((prior, draws))
}

/// The prior's training set: latents, their caption embeddings (none for an uncaptioned one)
/// and which row of [`PriorDraws`] each belongs to.
struct PriorSet {
    latents: Vec<Tensor>,
    embeds: Vec<Tensor>,
    group: Vec<DrawGroup>,
}

impl PriorSet {
    fn build(
        s: &ToyTrainSettings,
        all_latents: &Tensor,
        text_model: &ClipTextModelWithProjection,
        embed_dim: usize,
        distractors: Option<&(Tensor, String)>,
        dev: &Device,
    ) -> Result<Self> {
        let tokenizer = toy_tokenizer()?;
        let per_combo = all_latents.dim(0)? / s.combos.len();
        let none = Tensor::zeros((0, embed_dim), DType::F32, dev)?;
        let mut set = Self {
            latents: Vec::new(),
            embeds: Vec::new(),
            group: Vec::new(),
        };
        for (i, &(sh, c)) in s.combos.iter().enumerate() {
            let (embed, group) = if !s.held_out.contains(&(sh, c)) {
                let texts = captions(sh, c);
                let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
                let (ids, _) = tokenizer.encode_batch(&refs, dev).map_err(msg)?;
                (text_model.forward(&ids)?.1.detach(), DrawGroup::Seen)
            } else if s.held_out_uncaptioned {
                // No captions: trained with the unconditional embedding only.
                (none.clone(), DrawGroup::HeldOut)
            } else {
                continue;
            };
            for k in 0..per_combo {
                set.push(
                    all_latents.get(i * per_combo + k)?.detach(),
                    embed.clone(),
                    group,
                );
            }
        }
        if set.latents.is_empty() {
            candle_core::bail!("every combination is held out: nothing to train the prior on");
        }
        if let Some((latents, _)) = distractors {
            for k in 0..latents.dim(0)? {
                set.push(
                    latents.get(k)?.detach(),
                    none.clone(),
                    DrawGroup::Distractor,
                );
            }
        }
        Ok(set)
    }

    fn push(&mut self, latent: Tensor, embed: Tensor, group: DrawGroup) {
        self.latents.push(latent);
        self.embeds.push(embed);
        self.group.push(group);
    }
}

/// What a latent of the prior's training set is.
#[derive(Debug, Clone, Copy, PartialEq)]
enum DrawGroup {
    Seen,
    HeldOut,
    Distractor,
}

/// How often the prior's batches drew each row of the protocol's §1 table
/// (`lab/docs/replication-u-protocol.md`), in `train_log.json`.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PriorDraws {
    /// A seen latent with its caption.
    pub seen_captioned: u64,
    /// A seen latent with its caption dropped.
    pub seen_unconditional: u64,
    /// A held-out latent (always unconditional).
    pub held_out: u64,
    /// A distractor (always unconditional).
    pub distractors: u64,
}

impl PriorDraws {
    fn count(draws: &[[u64; 2]], group: &[DrawGroup]) -> Self {
        let mut out = Self::default();
        for (d, g) in draws.iter().zip(group) {
            match g {
                DrawGroup::Seen => {
                    out.seen_captioned += d[0];
                    out.seen_unconditional += d[1];
                }
                DrawGroup::HeldOut => out.held_out += d[0] + d[1],
                DrawGroup::Distractor => out.distractors += d[0] + d[1],
            }
        }
        out
    }
}

/// With `s.distractors.count` > 0: the distractors' latents and description, from `ck` or
/// drawn, checked and fitted against the decoder in `out` (then saved to `ck`).
fn distractor_stage(
    out: &Path,
    s: &ToyTrainSettings,
    all_latents: &Tensor,
    ck: &Checkpoint,
    dev: &Device,
    on_progress: &mut impl FnMut(TrainProgress),
) -> Result<Option<(Tensor, String)>> {
    let ds = &s.distractors;
    if ds.count == 0 {
        return Ok(None);
    }
    if s.resume {
        if let Some(kept) = ck.distractors(dev)? {
            return Ok(Some(kept));
        }
    }
    on_progress(TrainProgress::Stage("fitting the distractors", ds.steps));
    let decoder = frozen_decoder(out, dev)?;
    let grid = ds.check_grid;
    let judge = |b: &_| distractors::judge(b, grid);
    let kinds = distractors::types(&s.combos, &s.held_out);
    let mut probe_rng =
        clipsculpt::autodiff::rng::Rng::new(s.prior.seed ^ distractors::PROBE_STREAM);
    let (kinds, excluded) = distractors::probe(&kinds, &s.held_out, ds, &mut probe_rng, judge)?;
    let mut rng = clipsculpt::autodiff::rng::Rng::new(s.prior.seed ^ distractors::DRAW_STREAM);
    let mut blends = distractors::draw(&kinds, &s.held_out, ds, &mut rng, judge)?;
    let per_combo = all_latents.dim(0)? / s.combos.len();
    let latent_of = |sh, c| -> Result<Tensor> {
        let i = s
            .combos
            .iter()
            .position(|&x| x == (sh, c))
            .ok_or_else(|| msg("no latent"))?;
        all_latents.get(i * per_combo)
    };
    let fs = distractors::fit_settings(&s.decoder);
    let mut redraw_rng =
        clipsculpt::autodiff::rng::Rng::new(s.prior.seed ^ distractors::COLLAPSE_STREAM);
    let (fitted, collapses) = distractors::fit_redrawing(
        &mut blends,
        &s.held_out,
        ds,
        &mut redraw_rng,
        judge,
        |sub| {
            let starts = distractors::starts(sub, latent_of, fs.latent_rms)?;
            distractors::fit(&decoder, sub, &starts, ds, &fs, &mut rng, dev)
        },
    )?;
    let described = distractors::describe(&excluded, &blends, &fitted, &collapses);
    // Kept as text: a float read back from JSON need not be the bit pattern written.
    let json = serde_json::to_string_pretty(&described).map_err(msg)?;
    ck.save_distractors(&fitted.latents, &json)?;
    Ok(Some((fitted.latents, json)))
}

/// The decoder of the world in `out`, frozen (plain tensors).
fn frozen_decoder(out: &Path, dev: &Device) -> Result<clipsculpt::shap_e::Decoder> {
    let dir = out.join("shap_e").join("shap_e_renderer");
    let need = |e: &dyn std::fmt::Display| {
        msg(format!(
            "--prior-distractors fits against the world's decoder in {}: {e}",
            dir.display()
        ))
    };
    let text = std::fs::read_to_string(dir.join("config.json")).map_err(|e| need(&e))?;
    let cfg: RendererConfig = serde_json::from_str(&text).map_err(|e| need(&e))?;
    let weights =
        candle_core::safetensors::load(dir.join("diffusion_pytorch_model.safetensors"), dev)
            .map_err(|e| need(&e))?;
    clipsculpt::shap_e::Decoder::new(VarBuilder::from_tensors(weights, DType::F32, dev), &cfg)
}

/// Trains only the prior (for `s.held_out`) into the world in `out`, keeping its decoder,
/// latents, CLIPs and their logged curves.
fn train_prior_only(
    out: &Path,
    s: &ToyTrainSettings,
    dev: &Device,
    mut on_progress: impl FnMut(TrainProgress),
) -> Result<TrainLog> {
    let shap_e_dir = out.join("shap_e");
    let text_weights = shap_e_dir.join("text_encoder").join("model.safetensors");
    if s.prior_text_from_scorer {
        let scorer =
            candle_core::safetensors::load(out.join("clip").join("model.safetensors"), dev)?;
        let text: HashMap<String, Tensor> =
            scorer.into_iter().filter(|(k, _)| is_text_key(k)).collect();
        save_tensors(&text, &text_weights)?;
    }
    let read = |p: &Path| -> Result<String> {
        std::fs::read_to_string(p).map_err(|e| {
            msg(format!(
                "--only-prior trains into an existing world: {}: {e}",
                p.display()
            ))
        })
    };
    let prior_json = shap_e_dir.join("prior").join("config.json");
    if let Some(n) = s.prior_layers {
        let mut v: serde_json::Value = serde_json::from_str(&read(&prior_json)?).map_err(msg)?;
        v["num_layers"] = n.into();
        write_json(&prior_json, &v)?;
    }
    let prior_cfg: PriorConfig = serde_json::from_str(&read(&prior_json)?).map_err(msg)?;
    let scheduler: SchedulerConfig = serde_json::from_str(&read(
        &shap_e_dir.join("scheduler").join("scheduler_config.json"),
    )?)
    .map_err(msg)?;
    let clip_cfg: ClipConfig = serde_json::from_value(toy_clip_json(&s.clip)).map_err(msg)?;
    let text_model = ClipTextModelWithProjection::new(
        VarBuilder::from_tensors(
            candle_core::safetensors::load(&text_weights, dev)?,
            DType::F32,
            dev,
        ),
        &clip_cfg.text_config,
        clip_cfg.projection_dim,
    )?;
    let latents = clipsculpt::shap_e::load_latent(&out.join(LATENTS_FILE), dev).map_err(msg)?;
    let t = Instant::now();
    let (prior, prior_draws) = prior_stage(
        out,
        s,
        &latents,
        &text_model,
        (&prior_cfg, &scheduler),
        dev,
        &mut on_progress,
    )?;
    let mut log = kept_log(out, s);
    log.prior_loss = prior.losses;
    log.prior_draws = Some(prior_draws);
    log.seconds[2] = t.elapsed().as_secs_f64();
    finish_kept(out, s, &log)?;
    Ok(log)
}

/// Trains only the scoring CLIP (`s.scorer`) into the world in `out`, keeping the other stages
/// and their logged curves.
fn train_scorer_only(
    out: &Path,
    s: &ToyTrainSettings,
    dev: &Device,
    mut on_progress: impl FnMut(TrainProgress),
) -> Result<TrainLog> {
    let Some(sc) = &s.scorer else {
        candle_core::bail!("--only-scorer needs scoring-CLIP settings");
    };
    for needed in [
        LATENTS_FILE,
        "shap_e/prior/diffusion_pytorch_model.safetensors",
    ] {
        if !out.join(needed).is_file() {
            candle_core::bail!(
                "--only-scorer trains into an existing world, but {} has no {needed}",
                out.display()
            );
        }
    }
    let density = DensityModel {
        sharpness: s.decoder.sharpness,
        density: s.decoder.density,
    };
    let clip = train_scorer(
        &out.join("clip"),
        sc,
        &s.combos,
        density,
        &toy_tokenizer()?,
        dev,
        &mut on_progress,
    )?;
    let mut log = kept_log(out, s);
    (log.scorer_loss, log.scorer_accuracy) = (clip.loss, clip.accuracy);
    log.scorer_blend_preference = clip.blend_preference;
    log.seconds[3] = clip.seconds;
    finish_kept(out, s, &log)?;
    Ok(log)
}

/// The training log of the world in `out` as its earlier run left it (curves and seconds of
/// every stage), with settings `s`: a run that retrains one stage overwrites that stage's fields.
fn kept_log(out: &Path, s: &ToyTrainSettings) -> TrainLog {
    let earlier = earlier_log(out);
    fn field<T: serde::de::DeserializeOwned + Default>(v: &serde_json::Value, key: &str) -> T {
        serde_json::from_value(v[key].clone()).unwrap_or_default()
    }
    let seconds = |i: usize| earlier["seconds"][i].as_f64().unwrap_or(0.0);
    TrainLog {
        settings: s.clone(),
        decoder_loss: field(&earlier, "decoder_loss"),
        decoder_refits: field(&earlier, "decoder_refits"),
        clip_loss: field(&earlier, "clip_loss"),
        clip_accuracy: field(&earlier, "clip_accuracy"),
        prior_loss: field(&earlier, "prior_loss"),
        prior_draws: field(&earlier, "prior_draws"),
        scorer_loss: field(&earlier, "scorer_loss"),
        scorer_accuracy: field(&earlier, "scorer_accuracy"),
        scorer_blend_preference: field(&earlier, "scorer_blend_preference"),
        seconds: [seconds(0), seconds(1), seconds(2), seconds(3)],
    }
}

/// [`finish`] for a run that retrained one stage of the world in `out`: the manifest records the
/// earlier command whose other stages were kept.
fn finish_kept(out: &Path, s: &ToyTrainSettings, log: &TrainLog) -> Result<()> {
    let before: serde_json::Value = std::fs::read_to_string(out.join("MANIFEST.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default();
    finish(out, s, log, before["command"].as_str())
}

/// The command line that reproduces `s`.
fn command_line(s: &ToyTrainSettings) -> String {
    let mut c = format!("clipsculpt train-toy --seed {}", s.seed);
    let quick = s.combos.len() < combinations().len();
    for (on, flag) in [
        (quick, " --quick"),
        (s.reuse_clip, " --reuse-clip"),
        (s.only_scorer, " --only-scorer"),
        (s.only_prior, " --only-prior"),
        (s.prior_text_from_scorer, " --prior-text-from-scorer"),
        (s.held_out_uncaptioned, " --prior-uncaptioned-held-out"),
        (!s.decoder.factorized, " --per-object-latents"),
    ] {
        if on {
            c.push_str(flag);
        }
    }
    if let Some(sc) = &s.scorer {
        c.push_str(&format!(" --scorer-size {}", sc.render_size));
        if sc.blends > 0 {
            c.push_str(&format!(" --scorer-blends {}", sc.blends));
        }
        if sc.steps != s.clip.steps && !quick {
            c.push_str(&format!(" --scorer-steps {}", sc.steps));
        }
    }
    if s.held_out != HELD_OUT {
        let held: Vec<String> = s
            .held_out
            .iter()
            .map(|&(sh, col)| caption(sh, col))
            .collect();
        c.push_str(&format!(" --held-out '{}'", held.join(",")));
    }
    if s.prior.mixup > 0.0 {
        c.push_str(&format!(" --prior-mixup {}", s.prior.mixup));
    }
    if s.instances > 1 {
        c.push_str(&format!(" --instances {}", s.instances));
        if s.decoder.instance_factors {
            c.push_str(" --instance-factors");
        }
    }
    if s.prior.timestep_power != 1.0 {
        c.push_str(&format!(
            " --prior-timestep-power {}",
            s.prior.timestep_power
        ));
    }
    if s.prior.min_snr > 0.0 {
        c.push_str(&format!(" --prior-min-snr {}", s.prior.min_snr));
    }
    let defaults = ToyTrainSettings::full(s.seed).with_instances(s.instances);
    if s.prior.weight_decay != defaults.prior.weight_decay {
        c.push_str(&format!(" --prior-weight-decay {}", s.prior.weight_decay));
    }
    if let Some(n) = s.prior_layers {
        c.push_str(&format!(" --prior-layers {n}"));
    }
    if s.prior.steps != defaults.prior.steps && !quick {
        c.push_str(&format!(" --prior-train-steps {}", s.prior.steps));
    }
    if s.prior.uncaptioned_weight != 1.0 {
        c.push_str(&format!(
            " --prior-uncaptioned-weight {}",
            s.prior.uncaptioned_weight
        ));
    }
    if s.distractors.count > 0 {
        c.push_str(&format!(" --prior-distractors {}", s.distractors.count));
    }
    c
}

/// Writes the training log and the manifest (settings, final figures, checksums). `earlier`: the
/// command that produced the stages this run kept.
fn finish(out: &Path, s: &ToyTrainSettings, log: &TrainLog, earlier: Option<&str>) -> Result<()> {
    Checkpoint::new(out, &command_line(s)).remove()?;
    write_json(
        &out.join(LOG_FILE),
        &serde_json::to_value(log).map_err(msg)?,
    )?;
    let last = |v: &[f32]| v.last().copied();
    let mut manifest = json!({
        "trained": true,
        "command": command_line(s),
        "version": env!("CARGO_PKG_VERSION"),
        "settings": s,
        "final": {
            "decoder_loss": last(&log.decoder_loss),
            "decoder_refits": log.decoder_refits,
            "clip_loss": last(&log.clip_loss),
            "clip_accuracy": log.clip_accuracy.last().map(|a| a.1),
            "prior_loss": last(&log.prior_loss),
            "scorer_loss": last(&log.scorer_loss),
            "scorer_accuracy": log.scorer_accuracy.last().map(|a| a.1),
            "scorer_blend_preference": log.scorer_blend_preference.last().map(|a| a.1),
        },
        "files": checksums(out)?,
    });
    if let Some(e) = earlier {
        manifest["kept_stages_from"] = json!(e);
    }
    write_json(&out.join("MANIFEST.json"), &manifest)
}

/// FNV-1a 64-bit checksums of every file under `root` except the manifest, the training log
/// (it holds timings) and a checkpoint, by relative path.
pub fn checksums(root: &Path) -> Result<std::collections::BTreeMap<String, String>> {
    let mut out = std::collections::BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).map_err(msg)? {
            let path = entry.map_err(msg)?.path();
            if path.is_dir() {
                if !path.ends_with(CHECKPOINT_DIR) {
                    stack.push(path);
                }
            } else if path
                .file_name()
                .is_some_and(|n| n != "MANIFEST.json" && n != LOG_FILE)
            {
                let bytes = std::fs::read(&path).map_err(msg)?;
                let hash = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
                    (h ^ b as u64).wrapping_mul(0x100_0000_01b3)
                });
                let rel = path.strip_prefix(root).map_err(msg)?;
                out.insert(
                    rel.to_string_lossy().replace('\\', "/"),
                    format!("{hash:016x}"),
                );
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clipsculpt::pipeline::Models;

    /// The manifest's command line reproduces the prior's mixup, min-SNR weighting, weight decay and
    /// uncaptioned held-out objects (and omits them when off).
    #[test]
    fn the_command_line_records_the_prior_mixup_min_snr_and_decay() {
        let mut s = ToyTrainSettings::full(0);
        s.only_prior = true;
        assert_eq!(
            command_line(&s),
            "clipsculpt train-toy --seed 0 --only-prior"
        );
        s.prior.mixup = 0.5;
        assert_eq!(
            command_line(&s),
            "clipsculpt train-toy --seed 0 --only-prior --prior-mixup 0.5"
        );
        s.prior.mixup = 0.0;
        s.prior.min_snr = 5.0;
        assert_eq!(
            command_line(&s),
            "clipsculpt train-toy --seed 0 --only-prior --prior-min-snr 5"
        );
        s = s.with_instances(4);
        s.prior.weight_decay = 0.0;
        assert_eq!(
            command_line(&s),
            "clipsculpt train-toy --seed 0 --only-prior --instances 4 --prior-min-snr 5 --prior-weight-decay 0"
        );
        s.decoder.instance_factors = true;
        assert!(command_line(&s).contains(" --instances 4 --instance-factors --"));
        s.held_out_uncaptioned = true;
        assert!(command_line(&s).starts_with(
            "clipsculpt train-toy --seed 0 --only-prior --prior-uncaptioned-held-out --"
        ));
        assert!(!command_line(&s).contains("--prior-uncaptioned-weight"));
        (s.prior.uncaptioned_weight, s.distractors.count) = (0.1, 240);
        s.resume = true;
        assert!(
            command_line(&s).ends_with(" --prior-uncaptioned-weight 0.1 --prior-distractors 240")
        );
    }

    /// A copy of the folder `from` at `to`.
    fn copy_dir(from: &Path, to: &Path) -> Result<()> {
        std::fs::create_dir_all(to).map_err(msg)?;
        for entry in std::fs::read_dir(from).map_err(msg)? {
            let path = entry.map_err(msg)?.path();
            let dest = to.join(path.file_name().ok_or_else(|| msg("no name"))?);
            if path.is_dir() {
                copy_dir(&path, &dest)?;
            } else {
                std::fs::copy(&path, &dest).map_err(msg)?;
            }
        }
        Ok(())
    }

    /// `--only-prior` with distractors, uncaptioned weight 0.5 and the held-out objects
    /// uncaptioned, on a quick world of 2 instances: a run stopped at prior step 50 (after the
    /// checkpoint of step 40) and resumed ends with the uninterrupted run's files byte for byte,
    /// taking only the 20 steps left and no distractor fit; the checkpoint is gone and the
    /// manifest matches; `prior_draws` counts 60 × 30 draws in the §1 shares (S = 6 seen
    /// latents, H = 2, D = 4, w = 0.5, p = 0.1: 60 %, 6.7 %, 11.1 %, 22.2 %) within 4 standard
    /// errors; the 4 distractors are listed, none collapsed.
    #[test]
    fn distractors_weighted_draws_and_resume_match_the_uninterrupted_run() -> Result<()> {
        let root = tempfile::tempdir().map_err(msg)?;
        let (base, a, b) = (
            root.path().join("base"),
            root.path().join("a"),
            root.path().join("b"),
        );
        let world = ToyTrainSettings::quick(0).with_instances(2);
        train_toy(&base, &world, &Device::Cpu, |_| {})?;
        let mut s = world.clone();
        (s.only_prior, s.held_out_uncaptioned) = (true, true);
        (s.prior.uncaptioned_weight, s.distractors.count) = (0.5, 4);
        (s.prior.steps, s.checkpoint_every) = (60, 20);
        copy_dir(&base, &a)?;
        copy_dir(&base, &b)?;
        let whole = train_toy(&a, &s, &Device::Cpu, |_| {})?;
        let mut steps = 0;
        let stopped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            train_toy(&b, &s, &Device::Cpu, |p| {
                if matches!(p, TrainProgress::Stage("training the prior", _)) {
                    steps = 0;
                }
                if matches!(p, TrainProgress::Step(_)) {
                    steps += 1;
                    assert!(steps < 50, "stopped at prior step 50");
                }
            })
        }));
        assert!(stopped.is_err() && b.join(CHECKPOINT_DIR).is_dir());
        s.resume = true;
        let (mut stages, mut steps) = (Vec::new(), 0);
        let resumed = train_toy(&b, &s, &Device::Cpu, |p| match p {
            TrainProgress::Stage(name, _) => stages.push(name),
            TrainProgress::Step(_) => steps += 1,
        })?;
        assert_eq!((stages, steps), (vec!["training the prior"], 20));
        assert_eq!(checksums(&a)?, checksums(&b)?);
        assert_eq!(whole.prior_loss, resumed.prior_loss);
        assert_eq!(whole.prior_draws, resumed.prior_draws);
        assert!(!b.join(CHECKPOINT_DIR).exists());
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(b.join("MANIFEST.json")).map_err(msg)?)
                .map_err(msg)?;
        let listed: std::collections::BTreeMap<String, String> =
            serde_json::from_value(manifest["files"].clone()).map_err(msg)?;
        assert_eq!(listed, checksums(&b)?);
        assert!(listed.contains_key(DISTRACTORS_FILE) && listed.contains_key(DISTRACTORS_JSON));
        let command = manifest["command"].as_str().unwrap_or_default();
        assert!(command.ends_with(" --prior-uncaptioned-weight 0.5 --prior-distractors 4"));
        let d = whole.prior_draws.ok_or_else(|| msg("no prior_draws"))?;
        let total = (d.seen_captioned + d.seen_unconditional + d.held_out + d.distractors) as f64;
        assert_eq!(total, 1800.0);
        for (got, p) in [
            (d.seen_captioned, 0.6),
            (d.seen_unconditional, 0.6 / 9.0),
            (d.held_out, 1.0 / 9.0),
            (d.distractors, 2.0 / 9.0),
        ] {
            let se = (p * (1.0 - p) / total).sqrt();
            assert!((got as f64 / total - p).abs() < 4.0 * se, "{d:?}");
        }
        let file: serde_json::Value =
            serde_json::from_slice(&std::fs::read(a.join(DISTRACTORS_JSON)).map_err(msg)?)
                .map_err(msg)?;
        assert!(file["excluded_types"].is_array());
        let listed = file["distractors"].as_array().cloned().unwrap_or_default();
        assert_eq!(listed.len(), 4);
        assert!(listed
            .iter()
            .all(|x| x["refits"] == 0 && x["kind"] == "shape blend"));
        Ok(())
    }

    /// The manifest's command line reproduces the scorer's hard negatives and steps (and omits
    /// them when they are the defaults).
    #[test]
    fn the_command_line_records_the_scorer_blends_and_steps() {
        let mut s = ToyTrainSettings::full(0).with_scorer(64);
        s.only_scorer = true;
        let plain = "clipsculpt train-toy --seed 0 --only-scorer --scorer-size 64";
        assert_eq!(command_line(&s), plain);
        if let Some(sc) = s.scorer.as_mut() {
            sc.blends = 12;
            sc.steps = 5000;
        }
        assert_eq!(
            command_line(&s),
            format!("{plain} --scorer-blends 12 --scorer-steps 5000")
        );
    }

    /// `--instances K` fits K objects per combination, combination-major, drawn from the world's
    /// variation (seeded: the same settings give the same objects), and the command line records it.
    #[test]
    fn instances_are_drawn_per_combination_and_recorded() {
        let s = ToyTrainSettings::full(0).with_instances(3);
        let objects = world_objects(&s);
        assert_eq!(objects.len(), 3 * s.combos.len());
        for (i, &(sh, c)) in s.combos.iter().enumerate() {
            let mine = &objects[3 * i..3 * i + 3];
            assert!(mine.iter().all(|o| (o.shape, o.colour) == (sh, c)));
            assert!(mine[0].params != mine[1].params && mine[1].params != mine[2].params);
        }
        assert_eq!(objects, world_objects(&s));
        assert_eq!(s.decoder.points, 1024 / 3);
        assert!(command_line(&s).ends_with(" --instances 3"));
        let one = ToyTrainSettings::full(0).with_instances(1);
        assert_eq!(
            world_objects(&one)[0],
            WorldObject::canonical(Shape::Sphere, Colour::Red)
        );
        assert_eq!(one.decoder.points, 1024);
    }

    fn mean(v: &[f32]) -> f32 {
        v.iter().sum::<f32>() / v.len() as f32
    }

    /// The mean loss of `curve`'s first fifth and of its last, and the noise of their difference
    /// (the standard error of the two means, from the spread within each fifth).
    fn first_last_noise(curve: &[f32]) -> (f32, f32, f32) {
        let k = (curve.len() / 5).max(1);
        let (a, b) = (&curve[..k], &curve[curve.len() - k..]);
        let var = |v: &[f32]| {
            let m = mean(v);
            v.iter().map(|x| (x - m) * (x - m)).sum::<f32>() / v.len() as f32
        };
        let noise = ((var(a) + var(b)) / k as f32).sqrt();
        (mean(a), mean(b), noise)
    }

    /// `train-toy --quick` lowers every stage's loss by more than 4× the noise of the minibatch
    /// losses (measured at seed 0, falls/noise: decoder 0.47/0.077, CLIP 0.55/0.05, prior
    /// 0.052/0.008; with lr 0 the CLIP's loss rises, 1.50 → 1.52), takes the CLIP below chance
    /// (ln 4, four combinations; 0.87 at seed 0, 1.06 and 0.77 at seeds 1 and 2), writes a manifest
    /// that matches its files, and the folder loads through the ordinary loaders.
    #[test]
    fn quick_training_lowers_its_losses_and_loads() -> Result<()> {
        let dir = tempfile::tempdir().map_err(msg)?;
        let s = ToyTrainSettings::quick(0);
        let log = train_toy(dir.path(), &s, &Device::Cpu, |_| {})?;
        for (name, curve) in [
            ("decoder", &log.decoder_loss),
            ("clip", &log.clip_loss),
            ("prior", &log.prior_loss),
        ] {
            let (first, last, noise) = first_last_noise(curve);
            assert!(
                first - last > 4.0 * noise,
                "{name} loss did not fall beyond its noise: {first} → {last} (noise {noise})"
            );
        }
        let last_clip = first_last_noise(&log.clip_loss).1;
        assert!(last_clip < 0.85 * 4f32.ln(), "CLIP at chance: {last_clip}");
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("MANIFEST.json")).map_err(msg)?)
                .map_err(msg)?;
        let listed: std::collections::BTreeMap<String, String> =
            serde_json::from_value(manifest["files"].clone()).map_err(msg)?;
        assert_eq!(listed, checksums(dir.path())?);
        assert!(listed.contains_key("shap_e/prior/diffusion_pytorch_model.safetensors"));
        let models = Models::load(
            &dir.path().join("shap_e"),
            &dir.path().join("clip"),
            &Device::Cpu,
        )
        .map_err(msg)?;
        let z = models
            .sample(
                "a red sphere",
                4,
                Some(3.0),
                &mut clipsculpt::autodiff::rng::Rng::new(1),
                &Device::Cpu,
            )
            .map_err(msg)?;
        assert_eq!(z.dims(), &[1, 4 * TOY_SIZES.d_hidden, TOY_SIZES.d_latent]);
        Ok(())
    }

    /// `--only-scorer` replaces only `clip/` (the prior, decoder, latents and text encoder keep
    /// their bytes) and the manifest names the run whose stages it kept; `--reuse-clip` then
    /// keeps the prior's text encoder byte for byte, and `--prior-text-from-scorer` replaces it
    /// with the scorer's text tower.
    #[test]
    fn scorer_only_and_reused_text_encoder_keep_the_other_stages() -> Result<()> {
        let dir = tempfile::tempdir().map_err(msg)?;
        let s = ToyTrainSettings::quick(0).with_scorer(TOY_IMAGE_SIZE);
        train_toy(dir.path(), &s, &Device::Cpu, |_| {})?;
        let before = checksums(dir.path())?;
        let mut only = s.clone();
        only.only_scorer = true;
        if let Some(sc) = only.scorer.as_mut() {
            sc.seed += 100;
        }
        let log = train_toy(dir.path(), &only, &Device::Cpu, |_| {})?;
        assert!(!log.scorer_loss.is_empty() && !log.prior_loss.is_empty());
        let after = checksums(dir.path())?;
        for (file, sum) in &before {
            let changed = after.get(file) != Some(sum);
            assert_eq!(
                changed,
                file == "clip/model.safetensors",
                "{file} changed: {changed}"
            );
        }
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.path().join("MANIFEST.json")).map_err(msg)?)
                .map_err(msg)?;
        assert_eq!(
            manifest["kept_stages_from"],
            json!("clipsculpt train-toy --seed 0 --quick --scorer-size 32")
        );
        let mut reuse = s.clone();
        reuse.reuse_clip = true;
        train_toy(dir.path(), &reuse, &Device::Cpu, |_| {})?;
        let text = "shap_e/text_encoder/model.safetensors";
        assert_eq!(checksums(dir.path())?.get(text), before.get(text));
        // `--only-prior --prior-text-from-scorer`: the prior's text encoder becomes the scorer's
        // text tower, tensor for tensor.
        let mut from_scorer = s.clone();
        (from_scorer.only_prior, from_scorer.prior_text_from_scorer) = (true, true);
        train_toy(dir.path(), &from_scorer, &Device::Cpu, |_| {})?;
        let load = |p: &str| candle_core::safetensors::load(dir.path().join(p), &Device::Cpu);
        let (encoder, scorer) = (load(text)?, load("clip/model.safetensors")?);
        assert!(!encoder.is_empty());
        assert_eq!(
            encoder.len(),
            scorer.keys().filter(|k| is_text_key(k)).count()
        );
        for (k, v) in &encoder {
            let diff = (v - &scorer[k])?.abs()?.max_all()?.to_scalar::<f32>()?;
            assert_eq!(diff, 0.0, "{k}");
        }
        assert_ne!(checksums(dir.path())?.get(text), before.get(text));
        Ok(())
    }

    /// The committed embedded default and the experimental worlds beside it are trained ones and
    /// match their manifests' checksums. The 8-block worlds ship without the `clip/` folder their
    /// training read (their experiments score with `toy-sharp`'s, which the `shap_e/guidance.json`
    /// added after training names), so neither is compared.
    #[test]
    fn embedded_assets_match_their_manifest() -> Result<()> {
        let lab = Path::new(env!("CARGO_MANIFEST_DIR"));
        for (world, ships_clip) in [
            ("toy", true),
            ("toy-b", true),
            ("toy-c", true),
            ("toy-mixup", true),
            ("toy-instances", true),
            ("toy-sharp", true),
            ("toy-deep", false),
            ("toy-deep-b", false),
            ("toy-uncaptioned", false),
        ] {
            let root = match world {
                "toy" => lab.join("../assets/toy"),
                _ => lab.join("worlds").join(world),
            };
            let manifest: serde_json::Value =
                serde_json::from_slice(&std::fs::read(root.join("MANIFEST.json")).map_err(msg)?)
                    .map_err(msg)?;
            assert_eq!(
                manifest["trained"],
                serde_json::Value::Bool(true),
                "{world}"
            );
            let mut listed: std::collections::BTreeMap<String, String> =
                serde_json::from_value(manifest["files"].clone()).map_err(msg)?;
            listed.retain(|file, _| ships_clip || !file.starts_with("clip/"));
            let mut found = checksums(&root)?;
            if !ships_clip {
                // Written after training: it names the scoring CLIP (`crate::guidance`).
                found.remove(&format!("shap_e/{}", crate::guidance::GUIDANCE_FILE));
            }
            assert_eq!(listed, found, "{world} differs from its manifest");
        }
        Ok(())
    }
}
