//! `clipsculpt train-toy`: retrain the embedded default from a seed.

use std::cell::RefCell;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args as ClapArgs;

use super::context::{ensure_writable, Context};
use super::progress::{progress, spinner};
use super::EXIT_OK;
use crate::toy::train::{train_toy, ToyTrainSettings, TrainLog, TrainProgress, LOG_FILE};

/// Train the embedded toy world (decoder, CLIP, prior) from a seed into a folder.
#[derive(Debug, ClapArgs)]
pub(super) struct TrainToy {
    /// Output folder (the embedded default lives in assets/toy).
    #[arg(long, default_value = "outputs/toy")]
    out: PathBuf,
    /// Root seed of every stage.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// A few combinations and steps: checks the command in seconds (the weights are not useful).
    #[arg(long)]
    quick: bool,
    /// Keep the CLIP already in --out instead of retraining it (it does not depend on the other
    /// stages); the manifest records that it was reused.
    #[arg(long)]
    reuse_clip: bool,
    /// Fit one free latent per object instead of a shape code plus a colour code (the previous
    /// world's unstructured latent space)
    #[arg(long)]
    per_object_latents: bool,
}

impl TrainToy {
    pub fn run(self, cx: &Context) -> anyhow::Result<ExitCode> {
        let device = cx.open_device()?;
        ensure_writable(&self.out)?;
        let mut settings = if self.quick {
            ToyTrainSettings::quick(self.seed)
        } else {
            ToyTrainSettings::full(self.seed)
        };
        settings.reuse_clip = self.reuse_clip;
        settings.decoder.factorized = !self.per_object_latents;
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

    fn print_summary(&self, log: &TrainLog) {
        let last = |v: &[f32]| v.last().copied().unwrap_or(f32::NAN);
        println!(
            "trained into {} in {:.0} s (decoder {:.0} s, CLIP {:.0} s, prior {:.0} s)",
            self.out.display(),
            log.seconds.iter().sum::<f64>(),
            log.seconds[0],
            log.seconds[1],
            log.seconds[2]
        );
        println!(
            "final losses: decoder {:.4}, CLIP {:.4} (validation accuracy {:.1}%), prior {:.4}; log in {}",
            last(&log.decoder_loss),
            last(&log.clip_loss),
            100.0 * log.clip_accuracy.last().map_or(f32::NAN, |a| a.1),
            last(&log.prior_loss),
            self.out.join(LOG_FILE).display()
        );
    }
}
