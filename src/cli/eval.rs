//! `clipsculpt eval`: prior-only vs guided accuracy on toy captions.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use clap::Args as ClapArgs;

use super::args::GenerateArgs;
use super::context::Context;
use super::progress::progress;
use super::EXIT_OK;
use crate::batch::parse_prompt_file;
use crate::toy::evaluate;

/// Toy-world evaluation: prior-only vs guided shape/colour accuracy, seen vs held-out.
#[derive(Debug, ClapArgs)]
pub(super) struct Eval {
    /// Prompt file of toy captions (e.g. prompts/toy-eval.txt).
    file: PathBuf,
    #[command(flatten)]
    settings: GenerateArgs,
    /// Seeds per prompt.
    #[arg(long, default_value_t = 3)]
    seeds: u64,
    /// Print JSON instead of markdown tables.
    #[arg(long)]
    json: bool,
}

impl Eval {
    pub fn run(self, cx: &Context) -> anyhow::Result<ExitCode> {
        let parsed = parse_prompt_file(&self.file)?;
        if let Some(e) = parsed.errors.first() {
            bail!("{e}");
        }
        let prompts: Vec<String> = parsed.items.into_iter().map(|i| i.prompt).collect();
        let device = cx.open_device()?;
        let run = self.settings.run_settings()?;
        let models = cx.load_models(&self.settings.models, &device)?;
        let seeds: Vec<u64> = (0..self.seeds).map(|k| self.settings.seed + k).collect();
        let bar = progress((prompts.len() * seeds.len()) as u64, cx.quiet);
        bar.set_prefix("evaluating");
        let [prior, guided] = evaluate(&models, &prompts, &seeds, &run, &device, |p, seed| {
            bar.set_message(format!("{p} (seed {seed})"));
            bar.inc(1);
        })?;
        bar.finish_and_clear();
        if self.json {
            println!(
                "{{\"prior_only\": {}, \"guided\": {}}}",
                prior.to_json()?,
                guided.to_json()?
            );
        } else {
            println!(
                "## Prior only\n\n{}\n## Guided ({} steps)\n\n{}\nGuided runs whose exported latent scored below the prior's on the held-aside views: {}",
                prior.to_markdown(),
                run.guide.steps,
                guided.to_markdown(),
                guided.summary().all.score_drops
            );
        }
        Ok(ExitCode::from(EXIT_OK))
    }
}
