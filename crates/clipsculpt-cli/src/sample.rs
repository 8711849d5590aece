//! `clipsculpt sample`: plain Shap-E, a prior sample and its contact sheet.

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use candle_core::Device;
use clap::Args as ClapArgs;

use crate::args::ModelArgs;
use crate::context::{default_out, in_private, Context};
use crate::EXIT_OK;
use clipsculpt::atomic::{write_atomic, OutputDir};
use clipsculpt::autodiff::rng::Rng;
use clipsculpt::batch::check_prompt;
use clipsculpt::pipeline::{stream, Models};
use clipsculpt::render::{contact_sheet, RenderSettings};
use clipsculpt::shap_e::save_latent;

/// Plain Shap-E sampling without guidance: latent + contact sheet.
#[derive(Debug, ClapArgs)]
pub(super) struct Sample {
    /// The text prompt.
    prompt: String,
    #[command(flatten)]
    models: ModelArgs,
    /// Random seed.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Prior sampling steps.
    #[arg(long, default_value_t = 64)]
    prior_steps: usize,
    /// Classifier-free guidance scale [default: the model's sampling.json, else 15]
    #[arg(long)]
    guidance_scale: Option<f64>,
    /// Output folder (default `outputs/<slug>-<seed>`); written privately beside it and renamed
    /// into place when complete.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Replace an existing run in the output folder (atomically, once the new one is complete).
    #[arg(long)]
    overwrite: bool,
}

impl Sample {
    pub(crate) fn run(self, cx: &Context) -> anyhow::Result<ExitCode> {
        check_prompt(&self.prompt).map_err(anyhow::Error::msg)?;
        let device = cx.open_device()?;
        let out = self
            .out
            .clone()
            .unwrap_or_else(|| default_out(&self.prompt, self.seed));
        let dir = OutputDir::folder(&out, self.overwrite)?;
        let models = cx.load_models(&self.models.choice(), &device)?;
        in_private(&dir, |work| self.write(&models, work, &device))?;
        dir.commit()?;
        println!(
            "{}\n{}",
            out.join("latent.safetensors").display(),
            out.join("views.png").display()
        );
        Ok(ExitCode::from(EXIT_OK))
    }

    /// Samples the latent and writes it with its contact sheet into `work`.
    fn write(&self, models: &Models, work: &Path, device: &Device) -> anyhow::Result<()> {
        let rng = Rng::new(self.seed);
        let z = models.sample(
            &self.prompt,
            self.prior_steps,
            self.guidance_scale,
            &mut rng.fork(stream::PRIOR),
            device,
        )?;
        let latent = work.join("latent.safetensors");
        save_latent(&latent, &z).with_context(|| format!("writing {}", latent.display()))?;
        let settings = RenderSettings {
            n_coarse: 64,
            n_fine: 128,
            chunk_rays: Some(4096),
            background: None,
        };
        let mut preview_rng = rng.fork(stream::PREVIEW);
        let png = contact_sheet(&models.shap_e.decoder, &z, 64, &settings, &mut preview_rng)?;
        let sheet = work.join("views.png");
        write_atomic(&sheet, &png).with_context(|| format!("writing {}", sheet.display()))?;
        Ok(())
    }
}
