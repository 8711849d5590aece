//! `clipsculpt eval`: prior-only vs guided accuracy on toy captions.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::bail;
use clap::Args as ClapArgs;

use super::args::GenerateArgs;
use super::context::Context;
use super::progress::progress;
use crate::EXIT_OK;
use clipsculpt::batch::parse_prompt_file;
use clipsculpt::guide::SamplingGradient;
use clipsculpt_lab::fitted::Fitted;
use clipsculpt_lab::split::held_out_split;
use clipsculpt_lab::{caption, evaluate, records, EvalMode, EvalPlan, EvalTable};

/// Toy-world evaluation: shape/colour accuracy per guidance mode, seen vs held-out, with the
/// attribution of every guided run.
#[derive(Debug, ClapArgs)]
pub(crate) struct Eval {
    /// Prompt file of toy captions (e.g. prompts/toy-eval.txt).
    file: PathBuf,
    #[command(flatten)]
    settings: GenerateArgs,
    /// Seeds per prompt.
    #[arg(long, default_value_t = 3)]
    seeds: u64,
    /// Modes to compare, in table order: prior, latent, explore, sampling, both, end-to-end.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "prior,latent,sampling,both"
    )]
    modes: Vec<EvalMode>,
    /// The toy world's fitted latents (its `latents.safetensors`): every export is then scored
    /// beside the right object's best instance, to tell wrong runs the scorer prefers from wrong
    /// runs the search did not get past.
    #[arg(long, value_name = "FILE")]
    reference_latents: Option<PathBuf>,
    /// Print JSON instead of markdown tables.
    #[arg(long)]
    json: bool,
    /// Also write the JSON (summary and every run's record) to this file, atomically, while the
    /// tables are printed.
    #[arg(long, value_name = "FILE")]
    records: Option<PathBuf>,
    /// Take the runs the --records file already holds (from an eval with the same settings that was stopped)
    /// instead of running them again.
    #[arg(long, requires = "records")]
    resume: bool,
}

impl Eval {
    pub(crate) fn run(self, cx: &Context) -> anyhow::Result<ExitCode> {
        let parsed = parse_prompt_file(&self.file)?;
        if let Some(e) = parsed.errors.first() {
            bail!("{e}");
        }
        let prompts: Vec<String> = parsed.items.into_iter().map(|i| i.prompt).collect();
        let device = cx.open_device()?;
        let run = self
            .settings
            .clone()
            .with_world_guidance()?
            .run_settings()?;
        let models = cx.load_models(&run.models, &device)?;
        let seeds: Vec<u64> = (0..self.seeds).map(|k| self.settings.seed + k).collect();
        let bar = progress((prompts.len() * seeds.len()) as u64, cx.quiet);
        bar.set_prefix("evaluating");
        let held_out = held_out_split(std::path::Path::new(&models.sources.shap_e))
            .map_err(|e| anyhow::anyhow!("reading the prior's held-out split: {e}"))?;
        let fitted = match &self.reference_latents {
            Some(path) => Some(Fitted::load(path, &device)?),
            None => None,
        };
        let settings = serde_json::json!({
            "prompts": prompts,
            "seeds": seeds,
            "modes": self.modes.iter().map(|m| m.to_string()).collect::<Vec<_>>(),
            "run": run,
            "models": models.sources,
            "negatives": models.negatives,
            "reference_latents": self.reference_latents,
        });
        let done = self.resumed(&settings, cx.quiet)?;
        let plan = EvalPlan {
            prompts: &prompts,
            seeds: &seeds,
            modes: &self.modes,
            held_out: &held_out,
            fitted: fitted.as_ref(),
            done: done.as_ref(),
        };
        let mut report = ItemReport::new(&bar, self.records.as_deref(), &settings, cx.quiet);
        let table = evaluate(&models, &plan, &run, &device, |p, seed, so_far| {
            report.item(p, seed, so_far)
        })?;
        bar.finish_and_clear();
        if let Some(path) = &self.records {
            write_records(path, &table, &settings, true)?;
        }
        if self.json {
            println!("{}", records::to_json(&table, &settings, true)?);
            return Ok(ExitCode::from(EXIT_OK));
        }
        let negatives = match models.negatives.len() {
            0 => "none (the bare cosine)".to_string(),
            n => format!("{n}: {}", models.negatives.join("; ")),
        };
        let held: Vec<String> = held_out.iter().map(|&(sh, c)| caption(sh, c)).collect();
        println!("Negatives: {negatives}");
        println!("Held out of the prior: {}", held.join(", "));
        let (e, r) = (&run.end_to_end, &run.sampling.recurrence);
        let mut extras = match r.times {
            1 => String::new(),
            k => format!(
                ", each step in σ {}..{} taken {k} times",
                r.sigma_max, r.sigma_min
            ),
        };
        if run.sampling.gradient == SamplingGradient::Prediction {
            extras.push_str(", the prediction's gradient (not through the prior)");
        }
        println!(
            "Seeds: {seeds:?}; latent stage {} steps; guided sampling scale {}, σ {}..{}{extras}; \
             end-to-end {} ({} steps, {} iterations, lr {})\n",
            run.guide.steps,
            run.sampling.scale,
            run.sampling.sigma_max,
            run.sampling.sigma_min,
            e.target,
            e.steps,
            e.iterations,
            e.lr,
        );
        println!("{}", table.to_markdown());
        if let Some(scorer) = table.scorer_markdown() {
            println!("Wrong runs beside the right object (held-aside score of the export minus the best fitted instance's):\n");
            println!("{scorer}");
        }
        Ok(ExitCode::from(EXIT_OK))
    }

    /// With `--resume`, the runs the records file holds (none when it does not exist yet), after checking that it was
    /// made with these `settings`.
    fn resumed(
        &self,
        settings: &serde_json::Value,
        quiet: bool,
    ) -> anyhow::Result<Option<EvalTable>> {
        let (Some(path), true) = (&self.records, self.resume) else {
            return Ok(None);
        };
        let Some((table, complete)) = records::resume_from(path, settings)? else {
            if !quiet {
                eprintln!(
                    "{} does not exist yet: nothing to resume, starting afresh",
                    path.display()
                );
            }
            return Ok(None);
        };
        if !quiet {
            let state = if complete { "a finished" } else { "a stopped" };
            eprintln!(
                "resuming {state} evaluation: {} runs taken from {}",
                table.records.len(),
                path.display()
            );
        }
        Ok(Some(table))
    }
}

/// Writes `table`'s JSON with its `settings` to `path` atomically.
fn write_records(
    path: &std::path::Path,
    table: &EvalTable,
    settings: &serde_json::Value,
    complete: bool,
) -> anyhow::Result<()> {
    let json = records::to_json(table, settings, complete)?;
    clipsculpt::atomic::write_atomic(path, json.as_bytes())
        .map_err(|e| anyhow::anyhow!("writing the records to {}: {e}", path.display()))
}

/// What `eval` reports before each prompt and seed: the bar, or one line per item where stderr is not a terminal
/// (a batch job, output redirected), and the records so far.
struct ItemReport<'a> {
    bar: &'a indicatif::ProgressBar,
    lines: bool,
    start: std::time::Instant,
    /// Where the records go; `None` once a write of the records so far failed (warned about once).
    records: Option<&'a std::path::Path>,
    /// The evaluation's settings, written with the records.
    settings: &'a serde_json::Value,
}

impl<'a> ItemReport<'a> {
    fn new(
        bar: &'a indicatif::ProgressBar,
        records: Option<&'a std::path::Path>,
        settings: &'a serde_json::Value,
        quiet: bool,
    ) -> Self {
        Self {
            bar,
            lines: bar.is_hidden() && !quiet,
            start: std::time::Instant::now(),
            records,
            settings,
        }
    }

    /// Reports the item `prompt` at `seed`, with the records measured before it (written marked incomplete, so
    /// that a run stopped early keeps them; the final write after the evaluation still has to succeed).
    fn item(&mut self, prompt: &str, seed: u64, so_far: &EvalTable) {
        self.bar.set_message(format!("{prompt} (seed {seed})"));
        self.bar.inc(1);
        if let Some(path) = self.records {
            if let Err(e) = write_records(path, so_far, self.settings, false) {
                tracing::warn!("{e:#}; the records will be written at the end");
                self.records = None;
            }
        }
        if self.lines {
            let (k, n) = (self.bar.position(), self.bar.length().unwrap_or(0));
            let t = self.start.elapsed().as_secs();
            eprintln!("evaluating {k}/{n}: {prompt} (seed {seed}), {t} s so far");
        }
    }
}
