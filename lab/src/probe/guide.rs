//! Guidance settings probe on the toy world: runs the guided loop on a few prompts and prints the
//! toy evaluator's verdict on the prior sample and on the guided latent, the held-aside scores and
//! the step that won. Settings come from the environment so a sweep needs no rebuild:
//! `PROBE_PROMPTS` (file, default prompts/toy-heldout.txt), `PROBE_SEEDS` (1), `TOY_DIR`
//! (assets/toy), `STEPS`, `LR`, `VIEWS`, `RES`, `CONTRAST`, `PRIOR_WEIGHT`, `TRANS_WEIGHT`,
//! `EVAL_EVERY`, `EXPLORE` (off, bank, analogies), `EXPLORE_REFINE`, `EXPLORE_STEPS`, `SWITCH_MARGIN`, `KEEP_MARGIN`.
//!
//! `cargo bench --bench guide_probe`

use std::path::PathBuf;
use std::time::Instant;

use crate::{classify, parse_caption};
use anyhow::Result;
use candle_core::{Device, Tensor};
use clipsculpt::autodiff::rng::Rng;
use clipsculpt::guide::{same_prompt, unscored, GuideSettings, StartChoice, Target};
use clipsculpt::pipeline::{extract_mesh, Models, RunSettings};

fn env<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn verdict(models: &Models, z: &Tensor, dev: &Device) -> String {
    match extract_mesh(&models.shap_e.decoder, z, 64, dev) {
        Ok(m) => {
            let st = m.stats();
            match classify(&m) {
                Ok(c) => format!(
                    "{:?} {:?} {:.2} c{} e{} (next {})",
                    c.shape,
                    c.colour,
                    c.shape_iou,
                    st.components,
                    st.euler,
                    c.ranking
                        .get(1)
                        .map_or(String::new(), |r| format!("{:?} {:.2}", r.shape, r.iou))
                ),
                Err(e) => format!("({e})"),
            }
        }
        Err(_) => "(empty)".into(),
    }
}

/// The probe (settings from the environment, see the module docs).
pub fn guide_probe() -> Result<()> {
    let dev = Device::Cpu;
    let root = PathBuf::from(env(
        "TOY_DIR",
        concat!(env!("CARGO_MANIFEST_DIR"), "/../assets/toy").to_string(),
    ));
    let prompts_file = env(
        "PROBE_PROMPTS",
        concat!(env!("CARGO_MANIFEST_DIR"), "/../prompts/toy-heldout.txt").to_string(),
    );
    let prompts: Vec<String> = std::fs::read_to_string(&prompts_file)?
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(String::from)
        .collect();
    let models = Models::load(&root.join("shap_e"), &root.join("clip"), &dev)?;
    let guide = settings_from_env();
    let run = RunSettings::for_evaluation(guide.clone());
    println!("{guide:?}");
    let (mut ok_before, mut ok_after, mut n) = (0, 0, 0);
    let t_all = Instant::now();
    for prompt in &prompts {
        let want = parse_caption(prompt);
        for seed in 0..env("PROBE_SEEDS", 1u64) {
            let rng = Rng::new(seed);
            let t = Instant::now();
            let z0 = models.run_sample(prompt, &run, &rng, &dev)?;
            let target = Target::new(&models.scorer, prompt, &models.negatives, guide.contrast)?;
            let guided = models.guide(&target, unscored(&z0), &run, &rng, &dev, |_, _| {})?;
            let (z, trace, choice) = (guided.latent, guided.trace, guided.start);
            let secs = t.elapsed().as_secs_f64();
            let names = candidate_names(&models, prompt, &choice);
            let name = |i: Option<usize>| candidate_name(&names, i);
            print_screening(&choice, &names);
            let (b, a) = (verdict(&models, &z0, &dev), verdict(&models, &z, &dev));
            let right =
                |v: &str| want.is_some_and(|(s, c)| v.starts_with(&format!("{s:?} {c:?} ")));
            ok_before += usize::from(right(&b));
            ok_after += usize::from(right(&a));
            n += 1;
            let evals: Vec<String> = trace
                .evals
                .iter()
                .map(|(s, v)| format!("{s}:{v:.3}"))
                .collect();
            println!(
                "{prompt} s{seed}: prior [{b}] -> guided [{a}] start {} best step {} evals {} ({secs:.1} s)",
                name(choice.candidate),
                trace.best_step,
                evals.join(" ")
            );
        }
    }
    println!(
        "both right: prior {ok_before}/{n}, guided {ok_after}/{n} ({:.1} s)",
        t_all.elapsed().as_secs_f64()
    );
    Ok(())
}

/// The guide settings, each overridable by an environment variable (`STEPS`, `LR`, …).
fn settings_from_env() -> GuideSettings {
    let d = GuideSettings::default();
    GuideSettings {
        steps: env("STEPS", d.steps),
        lr: env("LR", d.lr),
        views: env("VIEWS", d.views),
        resolution: env("RES", d.resolution),
        contrast: env("CONTRAST", d.contrast),
        prior_weight: env("PRIOR_WEIGHT", d.prior_weight),
        transmittance_weight: env("TRANS_WEIGHT", d.transmittance_weight),
        eval_every: env("EVAL_EVERY", d.eval_every),
        explore: env("EXPLORE", d.explore),
        explore_refine: env("EXPLORE_REFINE", d.explore_refine),
        explore_steps: env("EXPLORE_STEPS", d.explore_steps),
        switch_margin: env("SWITCH_MARGIN", d.switch_margin),
        keep_margin: env("KEEP_MARGIN", d.keep_margin),
        ..d
    }
}

/// The names of the start candidates: the prior sampled for every negative but the prompt, in
/// file order (the bank), then the completions.
fn candidate_names(models: &Models, prompt: &str, choice: &StartChoice) -> Vec<String> {
    let mut names: Vec<String> = models
        .negatives
        .iter()
        .filter(|n| !same_prompt(n, prompt))
        .cloned()
        .collect();
    names.truncate(choice.bank_size);
    names.extend(
        choice
            .completion_support
            .iter()
            .enumerate()
            .map(|(k, s)| format!("completion {k} (support {s})")),
    );
    names
}

/// A candidate's name; `None` is the prior's own sample.
fn candidate_name(names: &[String], i: Option<usize>) -> String {
    i.map_or("prior".to_string(), |i| {
        names.get(i).cloned().unwrap_or_else(|| "?".into())
    })
}

/// The screening of the start candidates: the best six, the finalists and the probes.
fn print_screening(choice: &StartChoice, names: &[String]) {
    let name = |i: Option<usize>| candidate_name(names, i);
    let mut ranked: Vec<(f32, usize)> = choice.screen_scores.iter().copied().zip(0..).collect();
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0));
    let top: Vec<String> = ranked
        .iter()
        .take(6)
        .map(|(s, i)| format!("{} {s:.3}", name(Some(*i))))
        .collect();
    let finalists: Vec<String> = choice
        .finalists
        .iter()
        .map(|(i, s)| format!("{} {s:.3}", name(Some(*i))))
        .collect();
    let probes: Vec<String> = choice
        .probes
        .iter()
        .map(|(w, s)| format!("{} {s:.3}", name(*w)))
        .collect();
    if !top.is_empty() {
        println!(
            "  prior {:.3}; screened at {} px: {}\n  finalists: {}\n  probes: {}",
            choice.prior_score.unwrap_or(f32::NAN),
            choice.screen_side,
            top.join(", "),
            finalists.join(", "),
            probes.join(", ")
        );
    }
}
