//! The trained embedded default (`assets/toy`): its prior alone turns toy captions into meshes the
//! analytic evaluator recognises, and its CLIP ranks the right caption first for renders of the
//! decoded training latents.

use std::path::{Path, PathBuf};

use crate::caption;
use crate::caption::captions;
use crate::classify;
use crate::world::{combinations, training_combinations, Colour, Shape};
use candle_core::{Device, Tensor};
use clipsculpt::autodiff::rng::Rng;
use clipsculpt::guide::unscored;
use clipsculpt::pipeline::{extract_mesh, read_negatives, Models};

fn toy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/toy")
}

fn models() -> Models {
    Models::load(&toy().join("shap_e"), &toy().join("clip"), &Device::Cpu)
        .expect("the embedded default loads")
}

/// `generate "a red cube"`'s first stage: the prior sample (seed 0, the model's recommended
/// guidance scale, no CLIP guidance) already meshes into a red cube.
#[test]
fn the_prior_alone_makes_a_red_cube() {
    let m = models();
    let z = m
        .sample(
            "a red cube",
            64,
            None,
            &mut Rng::new(0).fork(1),
            &Device::Cpu,
        )
        .unwrap();
    let mesh = extract_mesh(&m.shap_e.decoder, &z, 48, &Device::Cpu).unwrap();
    let c = classify(&mesh).unwrap();
    assert_eq!((c.shape, c.colour), (Shape::Cube, Colour::Red), "{c:?}");
}

/// Over a spread of seen combinations (one per shape and colour), the prior's samples are right
/// in shape and colour at least 5 times out of 6.
#[test]
fn prior_samples_of_seen_combinations_are_recognised() {
    let m = models();
    // Shape i with colour i + 2: every shape and colour once, none held out.
    let picks: Vec<(Shape, Colour)> = (0..6)
        .map(|i| (Shape::ALL[i], Colour::ALL[(i + 2) % 6]))
        .collect();
    assert!(picks.iter().all(|p| training_combinations().contains(p)));
    let mut right = 0;
    for (i, &(s, c)) in picks.iter().enumerate() {
        let z = m
            .sample(
                &caption(s, c),
                32,
                None,
                &mut Rng::new(i as u64),
                &Device::Cpu,
            )
            .unwrap();
        let mesh = extract_mesh(&m.shap_e.decoder, &z, 40, &Device::Cpu).unwrap();
        if let Ok(k) = classify(&mesh) {
            right += usize::from((k.shape, k.colour) == (s, c));
        }
    }
    assert!(right >= 5, "{right}/6 prior samples recognised");
}

/// The toy CLIP's text tower tells the combinations apart: every paraphrase of every combination
/// (8 templates × 36) is nearer to its own canonical caption than to any other combination's.
#[test]
fn clip_text_embeddings_separate_combinations() {
    let m = models();
    let combos = combinations();
    let canon: Vec<String> = combos.iter().map(|&(s, c)| caption(s, c)).collect();
    let refs: Vec<&str> = canon.iter().map(String::as_str).collect();
    let t = m.scorer.embed_texts(&refs).unwrap();
    let mut wrong = Vec::new();
    for (i, &(s, c)) in combos.iter().enumerate() {
        let para = captions(s, c);
        let prefs: Vec<&str> = para.iter().map(String::as_str).collect();
        let p = m.scorer.embed_texts(&prefs).unwrap();
        let best: Vec<u32> = p
            .matmul(&t.t().unwrap())
            .unwrap()
            .argmax(1)
            .unwrap()
            .to_vec1()
            .unwrap();
        for (k, &b) in best.iter().enumerate() {
            if b as usize != i {
                wrong.push(format!("{:?} → {:?}", para[k], canon[b as usize]));
            }
        }
    }
    let n = canon.len();
    let gram = t.matmul(&t.t().unwrap()).unwrap();
    let off = (gram - Tensor::eye(n, candle_core::DType::F32, &Device::Cpu).unwrap() * 2.0)
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    println!("largest cosine between two combinations' captions: {off}");
    assert!(
        wrong.is_empty(),
        "paraphrases retrieved the wrong caption: {wrong:?}"
    );
}

/// The toy models with the caption grid as negatives: an experiment that knows the evaluation's
/// captions (not a default).
fn models_with_the_caption_grid() -> Models {
    let mut m = models();
    m.negatives = read_negatives(&toy().join("clip/caption-grid.txt")).unwrap();
    assert_eq!(m.negatives.len(), 36);
    m
}

/// The prior's sample of `prompt` at the evaluation's seed, and the latent stage run from it with exploration by
/// latent analogies (the evaluation's settings otherwise).
fn explored(m: &Models, prompt: &str) -> (Tensor, clipsculpt::pipeline::Guided) {
    use clipsculpt::guide::{GuideSettings, Target};
    use clipsculpt::pipeline::RunSettings;
    let dev = Device::Cpu;
    let run = RunSettings::for_evaluation(GuideSettings {
        explore: clipsculpt::guide::Explore::Analogies,
        ..GuideSettings::default()
    });
    let rng = Rng::new(run.seed);
    let z0 = m.run_sample(prompt, &run, &rng, &dev).unwrap();
    let target = Target::new(&m.scorer, prompt, &m.negatives, run.guide.contrast).unwrap();
    let guided = m
        .guide(&target, unscored(&z0), &run, &rng, &dev, |_, _| {})
        .unwrap();
    (z0, guided)
}

/// With the caption grid as negatives (opt-in: it lists the evaluation's captions),
/// exploration by latent analogies starts the latent stage from the right object for held-out
/// captions, judged by the toy evaluator (not by CLIP): "a black torus" (the prior's sample has
/// no surface) and "a green sphere" (the prior gives a green cube). Both come from the bank's
/// consensus completions, which the grid makes possible, not from gradient steps. One test per
/// caption, so that the two run side by side.
fn exploration_with_the_caption_grid_finds(want: (Shape, Colour)) {
    let m = models_with_the_caption_grid();
    let verdict = |z: &Tensor| {
        extract_mesh(&m.shap_e.decoder, z, 64, &Device::Cpu)
            .ok()
            .and_then(|mesh| classify(&mesh).ok())
            .map(|c| (c.shape, c.colour))
    };
    let prompt = caption(want.0, want.1);
    let (z0, guided) = explored(&m, &prompt);
    let before = verdict(&z0);
    assert_ne!(before, Some(want), "the prior alone was already right");
    let (z, choice) = (guided.latent, guided.start);
    assert!(
        choice.candidate.is_some_and(|i| i >= choice.bank_size),
        "{prompt}: the start was not a completion: {choice:?}"
    );
    assert_eq!(verdict(&z), Some(want), "{prompt}: guided from {before:?}");
}

#[test]
fn exploration_with_the_caption_grid_finds_the_black_torus() {
    exploration_with_the_caption_grid_finds((Shape::Torus, Colour::Black));
}

#[test]
fn exploration_with_the_caption_grid_finds_the_green_sphere() {
    exploration_with_the_caption_grid_finds((Shape::Sphere, Colour::Green));
}

/// Exploration does not replace a right prior sample: for the seen "a green cube", whose
/// completions include the green sphere, guidance keeps the green cube.
#[test]
fn exploration_keeps_a_right_prior_sample() {
    let m = models_with_the_caption_grid();
    let want = (Shape::Cube, Colour::Green);
    let (_, guided) = explored(&m, &caption(want.0, want.1));
    let (z, choice) = (guided.latent, guided.start);
    assert!(
        !choice.completion_support.is_empty(),
        "the bank had no completions"
    );
    assert_eq!(choice.candidate, None, "{choice:?}");
    let mesh = extract_mesh(&m.shap_e.decoder, &z, 64, &Device::Cpu).unwrap();
    let c = classify(&mesh).unwrap();
    assert_eq!((c.shape, c.colour), want);
}

/// "a green sphere" at seed 3 on the embedded default, guided in one mode: the models, settings,
/// scoring target, root generator and the unguided sample from the same noise.
struct GreenSphere {
    m: Models,
    run: clipsculpt::pipeline::RunSettings,
    target: clipsculpt::guide::Target,
    rng: Rng,
    plain: Tensor,
}

impl GreenSphere {
    fn new(mode: clipsculpt::guide::GuideMode) -> Self {
        use clipsculpt::guide::{GuideSettings, Target};
        let m = models();
        let mut run = clipsculpt::pipeline::RunSettings::for_evaluation(GuideSettings::default());
        run.mode = mode;
        let prompt = "a green sphere";
        let target = Target::new(&m.scorer, prompt, &m.negatives, run.guide.contrast).unwrap();
        let rng = Rng::new(3);
        let plain = m.run_sample(prompt, &run, &rng, &Device::Cpu).unwrap();
        Self {
            m,
            run,
            target,
            rng,
            plain,
        }
    }

    /// The held-aside score of `z`.
    fn held_aside(&self, z: &Tensor) -> clipsculpt::guide::Score {
        let side = self.run.guide.eval_side(self.m.scorer.image_size());
        clipsculpt::guide::score(
            &self.m.shap_e.decoder,
            &self.m.scorer,
            &self.target,
            z,
            side,
        )
        .unwrap()
    }

    /// Asserts that `z` beats the unguided sample on the held-aside views by more than 0.01.
    fn assert_raises_the_held_aside_score(&self, z: &Tensor) {
        let before = self.held_aside(&self.plain).score;
        let after = self.held_aside(z).score;
        eprintln!("held-aside score: unguided {before:.4}, guided {after:.4}");
        assert!(after > before + 0.01, "unguided {before}, guided {after}");
    }

    /// Asserts that `z` is the unguided sample, bit for bit.
    fn assert_unguided(&self, z: &Tensor) {
        let same = clipsculpt::pipeline::same_values(z, &self.plain).unwrap();
        assert!(same, "guidance that does nothing changed the sample");
    }
}

/// Guided sampling through the prior raises the held-aside score of the prior's output over the
/// unguided sample from the same noise, and with strength 0 it is that sample, bit for bit.
#[test]
fn guided_sampling_raises_the_held_aside_score() {
    let mut g = GreenSphere::new(clipsculpt::guide::GuideMode::Sampling);
    let dev = Device::Cpu;
    let (guided, trace, scored) =
        g.m.guided_sample(&g.target, &g.run, (&g.rng, None), &dev, |_, _| {})
            .unwrap();
    assert!(!trace.steps.is_empty() && trace.skipped == 0, "{trace:?}");
    assert!(trace.keep.is_some_and(|k| k.exported_guided), "{trace:?}");
    g.assert_raises_the_held_aside_score(&guided);
    assert_eq!(scored, Some(g.held_aside(&guided)));
    g.run.sampling.scale = 0.0;
    let (off, trace, off_score) =
        g.m.guided_sample(&g.target, &g.run, (&g.rng, None), &dev, |_, _| {})
            .unwrap();
    assert!(trace.steps.is_empty() && trace.keep.is_none());
    g.assert_unguided(&off);
    assert_eq!(off_score, None);
}

/// The keep guard exports the unguided sample, bit for bit and with its own held-aside score, when
/// the guided one does not beat it by the margin; `--sampler-export guided` exports the guided
/// one unscored.
#[test]
fn the_keep_guard_exports_the_unguided_sample_short_of_the_margin() -> anyhow::Result<()> {
    use clipsculpt::guide::SamplerExport;
    let mut g = GreenSphere::new(clipsculpt::guide::GuideMode::Sampling);
    let dev = Device::Cpu;
    g.run.guide.keep_margin = 10.0;
    let (z, trace, scored) =
        g.m.guided_sample(&g.target, &g.run, (&g.rng, None), &dev, |_, _| {})?;
    let kept = trace
        .keep
        .ok_or_else(|| anyhow::anyhow!("the guard did not run"))?;
    assert!(!kept.exported_guided, "{kept:?}");
    g.assert_unguided(&z);
    assert_eq!(scored, Some(g.held_aside(&g.plain)));
    assert_eq!(kept.held_aside[0], g.held_aside(&g.plain).score);
    g.run.guide.sampler_export = SamplerExport::Guided;
    let (z, trace, scored) =
        g.m.guided_sample(&g.target, &g.run, (&g.rng, None), &dev, |_, _| {})?;
    assert!(trace.keep.is_none() && scored.is_none());
    g.assert_raises_the_held_aside_score(&z);
    Ok(())
}

/// Self-recurrence takes every guided step in its window again after re-noising, draws the same
/// on a second run, and still raises the held-aside score over the unguided sample.
#[test]
fn self_recurrence_redoes_steps_and_raises_the_held_aside_score() {
    let mut g = GreenSphere::new(clipsculpt::guide::GuideMode::Sampling);
    let dev = Device::Cpu;
    g.run.sampling.recurrence.times = 2;
    let run = || {
        g.m.guided_sample(&g.target, &g.run, (&g.rng, None), &dev, |_, _| {})
            .unwrap()
    };
    let (guided, trace, _) = run();
    let r = g.run.sampling.recurrence;
    let in_window =
        |s: &clipsculpt::guide::GuidedStep| (r.sigma_min..=r.sigma_max).contains(&s.sigma);
    let second: Vec<_> = trace.steps.iter().filter(|s| s.take == 1).collect();
    let first_in_window = trace.steps.iter().filter(|s| s.take == 0 && in_window(s));
    assert!(trace.renoised > 0 && trace.skipped == 0, "{trace:?}");
    assert_eq!(second.len(), trace.renoised);
    assert_eq!(first_in_window.count(), trace.renoised);
    assert!(second.iter().all(|s| in_window(s)), "{second:?}");
    g.assert_raises_the_held_aside_score(&guided);
    let (again, ..) = run();
    assert!(clipsculpt::pipeline::same_values(&guided, &again).unwrap());
}

/// End-to-end guidance through the sampler's last steps raises the held-aside score over the
/// unguided sample from the same noise (and is exported over it, with the exported latent's own
/// held-aside score), and with no iterations it is that sample, bit for bit, unscored.
#[test]
fn end_to_end_guidance_raises_the_held_aside_score() {
    let mut g = GreenSphere::new(clipsculpt::guide::GuideMode::EndToEnd);
    let dev = Device::Cpu;
    let (guided, trace, scored) =
        g.m.end_to_end_sample(&g.target, &g.run, &g.rng, &dev, |_, _| {})
            .unwrap();
    let chain = trace.end_to_end.expect("no end-to-end trace");
    let iterations = g.run.end_to_end.iterations;
    assert_eq!(chain.iterations.len(), iterations, "{chain:?}");
    assert!(
        trace.keep.is_some_and(|k| k.exported_guided),
        "{:?}",
        trace.keep
    );
    g.assert_raises_the_held_aside_score(&guided);
    assert_eq!(scored, Some(g.held_aside(&guided)));
    g.run.end_to_end.iterations = 0;
    let (off, _, off_score) =
        g.m.end_to_end_sample(&g.target, &g.run, &g.rng, &dev, |_, _| {})
            .unwrap();
    g.assert_unguided(&off);
    assert_eq!(off_score, None);
}

/// A paraphrase of the prompt is not contrasted against it; another combination is.
#[test]
fn a_paraphrase_is_excluded_from_its_own_negatives() {
    use clipsculpt::guide::Target;
    let m = models();
    let negatives = vec![
        "a sphere that is green".to_string(),
        "a green colored sphere".to_string(),
        "a green cube".to_string(),
    ];
    let t = Target::new(&m.scorer, "a green sphere", &negatives, 10.0).unwrap();
    assert_eq!(t.negatives(), 1, "only \"a green cube\" stays");
}

/// What `f` logs at WARN and above (this thread only), with its result.
fn warnings_of<T>(f: impl FnOnce() -> T) -> (T, String) {
    use std::sync::{Arc, Mutex};
    #[derive(Clone, Default)]
    struct Captured(Arc<Mutex<Vec<u8>>>);
    impl std::io::Write for Captured {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let log = Captured::default();
    let writer = log.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::WARN)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let out = tracing::subscriber::with_default(subscriber, f);
    let text = String::from_utf8_lossy(&log.0.lock().unwrap()).into_owned();
    (out, text)
}

/// Unknown words: the toy tokenizer names them (generation goes on, with a warning that names
/// them), the evaluator reads everyday aliases, and a prompt naming no toy object is skipped, not
/// fatal.
#[test]
fn unknown_words_warn_instead_of_aborting() {
    use crate::parse_caption;
    use crate::report::EvalTable;
    let m = models();
    assert_eq!(m.tokenizer.unknown_words("a red ball"), vec!["ball"]);
    assert!(m.tokenizer.unknown_words("a sphere that is red").is_empty());
    let (embeds, log) = warnings_of(|| m.text_embeds("a shiny red ball", &Device::Cpu));
    assert!(embeds.is_ok());
    let warned: Vec<&str> = log.lines().filter(|l| l.contains("WARN")).collect();
    assert!(
        warned.len() == 1 && warned[0].contains("no word for shiny, ball"),
        "{log}"
    );
    let (_, log) = warnings_of(|| m.text_embeds("a sphere that is red", &Device::Cpu));
    assert!(log.is_empty(), "a known prompt warned: {log}");
    assert_eq!(
        parse_caption("a red ball"),
        Some((Shape::Sphere, Colour::Red))
    );
    assert_eq!(
        parse_caption("a blue box"),
        Some((Shape::Cube, Colour::Blue))
    );
    assert!(EvalTable::expected("a wooden chair").is_err());
}

/// An eval record of a guided mode carries the verdict on the latent its stage started from and
/// on the one it exported, and which start it was; with the world's fitted latents, every record
/// carries the export's score beside the right object's best instance.
#[test]
fn eval_records_carry_start_and_export_verdicts() -> anyhow::Result<()> {
    use crate::fitted::Fitted;
    use crate::report::ScorerCheck;
    use crate::{evaluate, EvalMode, EvalPlan, HELD_OUT};
    use clipsculpt::guide::GuideSettings;
    use clipsculpt::guide::{score, Target};
    use clipsculpt::pipeline::RunSettings;
    let m = models();
    let mut run = RunSettings::for_evaluation(GuideSettings {
        steps: 2,
        eval_every: 1,
        ..GuideSettings::default()
    });
    run.prior_steps = 16;
    run.grid = 48;
    run.sampling.sigma_max = 2.0;
    let prompts = vec!["a red cube".to_string()];
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/toy");
    let fitted = Fitted::load(&root.join("latents.safetensors"), &Device::Cpu)?;
    let plan = EvalPlan {
        prompts: &prompts,
        seeds: &[0],
        modes: &[EvalMode::Prior, EvalMode::Latent, EvalMode::Sampling],
        held_out: &HELD_OUT,
        fitted: Some(&fitted),
        done: None,
    };
    let table = evaluate(&m, &plan, &run, &Device::Cpu, |_, _, _| {})?;
    assert_eq!(table.records.len(), 3);
    let [prior, latent, sampling] = [0, 1, 2].map(|i| &table.records[i]);
    assert!(prior.attribution.is_none() && prior.right());
    for (r, start) in [(latent, "prior sample"), (sampling, "unguided sample")] {
        let a = r
            .attribution
            .as_ref()
            .expect("a guided record has an attribution");
        assert_eq!(a.start, start);
        // Every mode of one seed starts from the same prior sample, judged once.
        assert_eq!(a.start_verdict, prior.export, "{}", r.mode);
        assert!(r.export.shape.is_some(), "{:?}", r.export);
        assert!(a.scores.is_some());
    }
    assert!(latent.attribution.as_ref().unwrap().export_step.is_some());
    let cube = fitted.instances(Shape::Cube, Colour::Red)?;
    let target = Target::new(&m.scorer, "a red cube", &m.negatives, run.guide.contrast)?;
    let side = run.guide.eval_side(m.scorer.image_size());
    let mut best = f32::NEG_INFINITY;
    for i in 0..cube.dim(0)? {
        let z = cube.narrow(0, i, 1)?;
        best = best.max(score(&m.shap_e.decoder, &m.scorer, &target, &z, side)?.score);
    }
    let checks: Vec<Option<ScorerCheck>> = table.records.iter().map(|r| r.scorer).collect();
    let all_right = checks
        .iter()
        .all(|c| c.is_some_and(|c| c.right_object == best));
    assert!(all_right, "{checks:?} {best}");
    let scores = sampling.attribution.as_ref().and_then(|a| a.scores);
    let exports = [checks[0], checks[2]].map(|c| c.map(|c| c.export));
    assert_eq!(
        Some(exports),
        scores.map(|[from, to]| [Some(from), Some(to)])
    );
    Ok(())
}

/// Best of N noises: candidate 0 is the seed's own sample, every candidate's score is its own
/// sample's, and the chosen one is the best scored, with its root generator reproducing it.
#[test]
fn best_noise_keeps_the_best_scored_candidate() -> anyhow::Result<()> {
    use clipsculpt::guide::{score, GuideSettings, Target};
    use clipsculpt::pipeline::candidates::candidate_rng;
    use clipsculpt::pipeline::{same_values, RunSettings};
    let (m, dev) = (models(), Device::Cpu);
    let mut run = RunSettings::for_evaluation(GuideSettings::default());
    run.prior_steps = 16;
    run.candidates = 3;
    let prompt = "a green sphere";
    let target = Target::new(&m.scorer, prompt, &[], 0.0)?;
    let side = run.guide.eval_side(m.scorer.image_size());
    let root = Rng::new(4);
    let mut reported = Vec::new();
    let best = m.best_noise(&target, &run, &root, &dev, |k, _| reported.push(k))?;
    assert_eq!(reported, [0, 1, 2]);
    let scores = &best.choice.scores;
    assert_eq!(scores.len(), 3);
    let mut samples = Vec::new();
    for (k, &listed) in scores.iter().enumerate() {
        let z = m.run_sample(prompt, &run, &candidate_rng(&root, k), &dev)?;
        let s = score(&m.shap_e.decoder, &m.scorer, &target, &z, side)?;
        assert_eq!(s.score, listed, "candidate {k}");
        samples.push(z);
    }
    assert!(!same_values(&samples[0], &samples[1])?);
    let top = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    assert_eq!(
        Some(best.choice.chosen),
        scores.iter().position(|&s| s == top)
    );
    assert_eq!(best.score.score, top);
    assert!(same_values(&best.sample, &samples[best.choice.chosen])?);
    let again = m.run_sample(prompt, &run, &best.rng, &dev)?;
    assert!(same_values(&again, &best.sample)?);
    run.candidates = 1;
    let one = m.best_noise(&target, &run, &root, &dev, |_, _| {})?;
    assert_eq!(one.choice.chosen, 0);
    assert!(same_values(&one.sample, &samples[0])?);
    Ok(())
}

/// The prediction's gradient is the view loss's gradient at the clipped x0 prediction, with no
/// backward through the prior: one guided step pushes the state along it, normalised like the
/// gradient through the prior (which points elsewhere); a whole run along it raises the
/// held-aside score over the unguided sample.
#[test]
fn the_prediction_gradient_is_taken_at_the_prediction() -> anyhow::Result<()> {
    use clipsculpt::autodiff::checkpoint::Policy;
    use clipsculpt::guide::latent_loss::rms;
    use clipsculpt::guide::sampling::guide_step;
    use clipsculpt::guide::SamplingGradient;
    use clipsculpt::shap_e::Denoiser;
    let g = GreenSphere::new(clipsculpt::guide::GuideMode::Sampling);
    let dev = Device::Cpu;
    let (run, noise) = g.m.sampling_run(&g.target, &g.run, &g.rng, &dev)?;
    let denoiser = Denoiser::new(run.prior, &run.text_embeds, run.guidance_scale)?;
    let below = |i| run.sched.at_step(i).is_ok_and(|s| s.step_sigmas().0 < 5.0);
    let step = (0..g.run.prior_steps)
        .find(|&i| below(i))
        .ok_or_else(|| anyhow::anyhow!("no step below σ 5"))?;
    let sched = run.sched.at_step(step)?;
    let (sigma, sigma_next) = sched.step_sigmas();
    assert!(g.run.sampling.guides(sigma, sigma_next), "σ {sigma}");
    // A state at σ: the run's noise at that level (init_noise_sigma is σ_max).
    let x0 = denoiser.initial_state(&run.sched, &noise)?;
    let x = (x0 * (sigma / run.sched.init_noise_sigma()) as f64)?;
    let loss = g.m.view_loss(&g.target, &g.run);
    let push = |gradient| -> anyhow::Result<Tensor> {
        let mut s = g.run.sampling.clone();
        s.gradient = gradient;
        let guided = guide_step(&denoiser, &sched, &x, &s, &loss, &mut Rng::new(5))?;
        let push = guided
            .push
            .ok_or_else(|| anyhow::anyhow!("a non-finite step"))?;
        Ok(push.0)
    };
    let (along, through) = (
        push(SamplingGradient::Prediction)?,
        push(SamplingGradient::Prior)?,
    );
    let d = denoiser.x0(&sched, &x, &Policy::None)?.clamp(-1f32, 1f32)?;
    let v = candle_core::Var::from_tensor(&d)?;
    let (l, _) = loss(v.as_tensor(), step, &mut Rng::new(5))?;
    let grads = l.backward()?;
    let grad = grads
        .get(&v)
        .ok_or_else(|| anyhow::anyhow!("no gradient at the prediction"))?;
    let cos = |a: &Tensor, b: &Tensor| -> anyhow::Result<f64> {
        let dot = (a * b)?.sum_all()?.to_scalar::<f32>()? as f64;
        let n = a.elem_count() as f64;
        Ok(dot / (n * rms(a)? * rms(b)?))
    };
    assert!(cos(&along, grad)? > 0.9999, "{}", cos(&along, grad)?);
    assert!(cos(&through, grad)? < 0.99, "{}", cos(&through, grad)?);
    let (a, t) = (rms(&along)?, rms(&through)?);
    assert!((a - t).abs() < 1e-4 * t, "push RMS {a} and {t}");
    let mut along_run = g.run.clone();
    along_run.sampling.gradient = SamplingGradient::Prediction;
    let (guided, trace, _) =
        g.m.guided_sample(&g.target, &along_run, (&g.rng, None), &dev, |_, _| {})?;
    assert!(!trace.steps.is_empty() && trace.skipped == 0, "{trace:?}");
    g.assert_raises_the_held_aside_score(&guided);
    Ok(())
}
