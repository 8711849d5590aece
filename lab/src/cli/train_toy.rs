//! `clipsculpt train-toy`: retrain the embedded default from a seed.

use std::cell::RefCell;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args as ClapArgs;

use super::context::{ensure_writable, Context};
use super::progress::{progress, spinner};
use crate::EXIT_OK;
use clipsculpt_lab::split::parse_split;
use clipsculpt_lab::train::{train_toy, ToyTrainSettings, TrainLog, TrainProgress, LOG_FILE};

/// Train the embedded toy world (decoder, CLIP, prior) from a seed into a folder.
#[derive(Debug, ClapArgs)]
pub(crate) struct TrainToy {
    /// Output folder (the embedded default lives in assets/toy).
    #[arg(long, default_value = "outputs/toy")]
    out: PathBuf,
    /// Root seed of every stage.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// A few combinations and steps: checks the command in seconds (the weights are not useful).
    #[arg(long)]
    quick: bool,
    /// Keep the conditioning CLIP (the prior's text encoder) already in --out instead of
    /// retraining it (it does not depend on the other stages); the manifest records that it was
    /// reused.
    #[arg(long)]
    reuse_clip: bool,
    /// Also train a separate scoring CLIP for guidance (clip/) on renders of this many pixels a
    /// side (its patch scaled to keep the conditioning CLIP's token count); without it the
    /// conditioning CLIP scores guidance too.
    #[arg(long)]
    scorer_size: Option<usize>,
    /// Hard negatives for the scoring CLIP: this many objects between two shapes (a sphere
    /// halfway to a cube) per step, which every caption must rank below its clean object (0:
    /// none, as the shipped scorers were trained).
    #[arg(long, default_value_t = 0, requires = "scorer_size")]
    scorer_blends: usize,
    /// The scoring CLIP's training steps (default: the conditioning CLIP's 4000).
    #[arg(long, requires = "scorer_size")]
    scorer_steps: Option<usize>,
    /// Train only the scoring CLIP (clip/) into the world already in --out, keeping its decoder,
    /// latents, text encoder and prior.
    #[arg(long, conflicts_with = "reuse_clip", requires = "scorer_size")]
    only_scorer: bool,
    /// Fit one free latent per object instead of a shape code plus a colour code (the previous
    /// world's unstructured latent space)
    #[arg(long)]
    per_object_latents: bool,
    /// The combinations the prior does not train on, as comma-separated captions (default: the
    /// embedded world's six: a green sphere, a blue cube, a yellow cylinder, a white cone, a
    /// black torus, a red capsule); written to shap_e/held_out.txt, which `eval` reads.
    #[arg(long)]
    held_out: Option<String>,
    /// Train only the prior into the world already in --out (e.g. for another --held-out split),
    /// keeping its decoder, latents and CLIPs.
    #[arg(long, conflicts_with_all = ["reuse_clip", "only_scorer"])]
    only_prior: bool,
    /// Share of the prior's training pairs replaced by mixups of two pairs (latent and
    /// conditioning mixed with one weight), an experiment toward a prior that generalises; 0 =
    /// plain pairs, as the shipped worlds were trained.
    #[arg(long, default_value_t = 0.0)]
    prior_mixup: f32,
    /// Objects per combination, each with the world's random size, yaw and shade (1: the
    /// canonical object, as the shipped worlds); the prior then trains on every instance of its
    /// combinations, with weight decay.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=16))]
    instances: u16,
    /// With --instances above 1: instances vary along codes shared by every combination of a shape
    /// (size, the cube's yaw) and of a colour (shade), weighted by each object's size, yaw and
    /// shade, instead of along a free code per object.
    #[arg(long)]
    instance_factors: bool,
    /// With --only-prior: make the scoring CLIP's text tower (clip/) the prior's text encoder
    /// first (the conditioning CLIP tells some captions apart barely: cosine 0.995 between "a
    /// green sphere" and "a green cube").
    #[arg(long, requires = "only_prior")]
    prior_text_from_scorer: bool,
    /// With --only-prior: the prior's transformer blocks (default: the world's, 2 in the shipped
    /// ones), rewritten into its config before training.
    #[arg(long, requires = "only_prior", value_parser = clap::value_parser!(u16).range(1..=48))]
    prior_layers: Option<u16>,
    /// The prior also trains on the held-out combinations' objects, always unconditionally (no
    /// caption): it can make them, but none of their captions leads it there. An experiment, not
    /// how the shipped worlds were trained.
    #[arg(long)]
    prior_uncaptioned_held_out: bool,
    /// The prior's training steps (default: the world's 2000).
    #[arg(long)]
    prior_train_steps: Option<usize>,
    /// Training timesteps drawn as ⌊T·u^P⌋ (1: uniform, Shap-E's objective, the default; larger
    /// trains more often at low noise).
    #[arg(long, default_value_t = 1.0)]
    prior_timestep_power: f32,
    /// Weight each training element's error by min(1/σ², γ)/γ (min-SNR-γ weighting), so that
    /// errors at low noise count; 0: uniform weights, Shap-E's objective, the default.
    #[arg(long, default_value_t = 0.0)]
    prior_min_snr: f32,
    /// The prior's AdamW weight decay (default: 0, or 0.1 with --instances above 1).
    #[arg(long)]
    prior_weight_decay: Option<f64>,
    /// Draw weight of every latent without captions (held out under
    /// --prior-uncaptioned-held-out, and distractors) against 1 for a captioned one, in (0, 1];
    /// needs random batches (--instances above 1). At 1 the draws are exactly those of before.
    #[arg(long, default_value_t = 1.0)]
    prior_uncaptioned_weight: f32,
    /// Add this many uncaptioned shape blends of two seen shapes in one colour to the prior's
    /// unconditional branch, each checked by the evaluator and fitted against the world's
    /// frozen decoder (distractors.safetensors, distractors.json).
    #[arg(long, default_value_t = 0, conflicts_with = "only_scorer")]
    prior_distractors: usize,
    /// Go on from the checkpoint the same command left in --out/.checkpoint (written after the
    /// distractor fit and every 250 prior steps); without one, start afresh (and say so).
    /// Without --resume an existing checkpoint is discarded.
    #[arg(long)]
    resume: bool,
}

impl TrainToy {
    pub(crate) fn run(self, cx: &Context) -> anyhow::Result<ExitCode> {
        let device = cx.open_device()?;
        let mut settings = if self.quick {
            ToyTrainSettings::quick(self.seed)
        } else {
            ToyTrainSettings::full(self.seed)
        };
        if let Some(side) = self.scorer_size {
            anyhow::ensure!(
                side >= 16 && side % settings.clip.render_size == 0,
                "--scorer-size must be a multiple of the conditioning CLIP's {} px",
                settings.clip.render_size
            );
            settings = settings.with_scorer(side);
        }
        if let Some(sc) = settings.scorer.as_mut() {
            anyhow::ensure!(
                self.scorer_blends <= 64,
                "--scorer-blends must be at most 64"
            );
            sc.blends = self.scorer_blends;
            if let Some(n) = self.scorer_steps {
                anyhow::ensure!(n > 0, "--scorer-steps must be positive");
                sc.steps = n;
            }
        }
        settings = settings.with_instances(self.instances as usize);
        anyhow::ensure!(
            !self.instance_factors || self.instances > 1,
            "--instance-factors needs --instances above 1"
        );
        settings.decoder.instance_factors = self.instance_factors;
        settings.reuse_clip = self.reuse_clip;
        settings.only_scorer = self.only_scorer;
        settings.decoder.factorized = !self.per_object_latents;
        settings.only_prior = self.only_prior;
        settings.prior_text_from_scorer = self.prior_text_from_scorer;
        settings.prior_layers = self.prior_layers.map(usize::from);
        settings.held_out_uncaptioned = self.prior_uncaptioned_held_out;
        anyhow::ensure!(
            (0.0..=1.0).contains(&self.prior_mixup),
            "--prior-mixup must be within 0..=1"
        );
        settings.prior.mixup = self.prior_mixup;
        anyhow::ensure!(
            !(self.prior_uncaptioned_held_out && self.prior_mixup > 0.0),
            "--prior-mixup needs a caption for every latent: drop it or --prior-uncaptioned-held-out"
        );
        anyhow::ensure!(
            (0.25..=8.0).contains(&self.prior_timestep_power),
            "--prior-timestep-power must be within 0.25..=8"
        );
        settings.prior.timestep_power = self.prior_timestep_power;
        anyhow::ensure!(
            (0.0..=1000.0).contains(&self.prior_min_snr),
            "--prior-min-snr must be within 0..=1000"
        );
        settings.prior.min_snr = self.prior_min_snr;
        if let Some(d) = self.prior_weight_decay {
            anyhow::ensure!(
                (0.0..=10.0).contains(&d),
                "--prior-weight-decay must be within 0..=10"
            );
            settings.prior.weight_decay = d;
        }
        if let Some(n) = self.prior_train_steps {
            anyhow::ensure!(n > 0, "--prior-train-steps must be positive");
            settings.prior.steps = n;
        }
        self.apply_uncaptioned(&mut settings)?;
        if let Some(h) = &self.held_out {
            settings.held_out = parse_split(h).map_err(|e| anyhow::anyhow!("--held-out: {e}"))?;
        }
        // Only once every flag is known good, so that a refused command leaves no folder behind.
        ensure_writable(&self.out)?;
        let bar = RefCell::new(spinner(true));
        let log = train_toy(&self.out, &settings, &device, |p| match p {
            TrainProgress::Stage(name, steps) => {
                tracing::info!("{name}: {steps} steps");
                let b = progress(steps as u64, cx.quiet);
                b.set_prefix(name);
                bar.replace(b).finish_and_clear();
            }
            TrainProgress::Step(loss) => {
                let b = bar.borrow();
                b.set_message(format!("loss {loss:.4}"));
                b.inc(1);
            }
        })
        .with_context(|| format!("training the toy world into {}", self.out.display()))?;
        bar.borrow().finish_and_clear();
        if !cx.quiet {
            self.print_summary(&log);
        }
        Ok(ExitCode::from(EXIT_OK))
    }

    /// `--prior-uncaptioned-weight`, `--prior-distractors` and `--resume`, checked.
    fn apply_uncaptioned(&self, settings: &mut ToyTrainSettings) -> anyhow::Result<()> {
        let w = self.prior_uncaptioned_weight;
        anyhow::ensure!(
            w > 0.0 && w <= 1.0,
            "--prior-uncaptioned-weight must be within (0, 1], not {w}"
        );
        let uncaptioned = self.prior_uncaptioned_held_out || self.prior_distractors > 0;
        if w != 1.0 {
            anyhow::ensure!(
                self.instances > 1,
                "--prior-uncaptioned-weight needs random batches: --instances above 1"
            );
            anyhow::ensure!(
                uncaptioned,
                "--prior-uncaptioned-weight weighs latents without captions: add --prior-uncaptioned-held-out or --prior-distractors"
            );
        }
        anyhow::ensure!(
            self.prior_distractors <= 10_000,
            "--prior-distractors must be at most 10000"
        );
        anyhow::ensure!(
            !(self.prior_distractors > 0 && self.prior_mixup > 0.0),
            "--prior-mixup needs a caption for every latent: drop it or --prior-distractors"
        );
        let decoder = self
            .out
            .join("shap_e/shap_e_renderer/diffusion_pytorch_model.safetensors");
        anyhow::ensure!(
            !(self.prior_distractors > 0 && self.only_prior && !decoder.is_file()),
            "--prior-distractors fits against the world's decoder, but {} does not exist",
            decoder.display()
        );
        settings.prior.uncaptioned_weight = w;
        settings.distractors.count = self.prior_distractors;
        settings.resume = self.resume;
        Ok(())
    }

    fn print_summary(&self, log: &TrainLog) {
        let last = |v: &[f32]| v.last().copied().unwrap_or(f32::NAN);
        println!(
            "trained into {} (decoder {:.0} s, CLIP {:.0} s, prior {:.0} s, scoring CLIP {:.0} s; kept stages count their earlier time)",
            self.out.display(),
            log.seconds[0],
            log.seconds[1],
            log.seconds[2],
            log.seconds[3]
        );
        println!(
            "final losses: decoder {:.4}, CLIP {:.4} (validation accuracy {:.1}%), prior {:.4}, scoring CLIP {:.4} (validation accuracy {:.1}%); log in {}",
            last(&log.decoder_loss),
            last(&log.clip_loss),
            100.0 * log.clip_accuracy.last().map_or(f32::NAN, |a| a.1),
            last(&log.prior_loss),
            last(&log.scorer_loss),
            100.0 * log.scorer_accuracy.last().map_or(f32::NAN, |a| a.1),
            self.out.join(LOG_FILE).display()
        );
        if let Some((_, share)) = log.scorer_blend_preference.last() {
            println!(
                "scoring CLIP: {:.1}% of validation views score above a blend of their object with another shape",
                100.0 * share
            );
        }
    }
}
