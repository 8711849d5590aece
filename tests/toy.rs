//! The trained embedded default (`assets/toy`): its prior alone turns toy captions into meshes the
//! analytic evaluator recognises, and its CLIP ranks the right caption first for renders of the
//! decoded training latents.

use std::path::{Path, PathBuf};

use candle_core::{Device, Tensor};
use clipsculpt::autodiff::rng::Rng;
use clipsculpt::guide::unscored;
use clipsculpt::pipeline::{extract_mesh, Models};
use clipsculpt::toy::classify;
use clipsculpt::toy::world::{combinations, training_combinations, Colour, Shape};
use clipsculpt::toy::{caption, captions};

fn toy() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("assets/toy")
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

/// Guidance turns the prior's wrong objects for held-out captions into the right ones, judged
/// by the toy evaluator (not by CLIP): "a black torus" (the prior's sample has no surface) and
/// "a green sphere" (the prior gives a green cube). Both are found by exploration among the
/// consensus completions of the bank, not by the prior's sample.
#[test]
fn guidance_fixes_a_held_out_shape() {
    use clipsculpt::guide::{GuideSettings, Target};
    use clipsculpt::pipeline::RunSettings;
    let m = models();
    let dev = Device::Cpu;
    let run = RunSettings::for_evaluation(GuideSettings::default());
    let verdict = |z: &Tensor| {
        extract_mesh(&m.shap_e.decoder, z, 64, &dev)
            .ok()
            .and_then(|mesh| classify(&mesh).ok())
            .map(|c| (c.shape, c.colour))
    };
    for want in [
        (Shape::Torus, Colour::Black),
        (Shape::Sphere, Colour::Green),
    ] {
        let prompt = caption(want.0, want.1);
        let rng = Rng::new(run.seed);
        let z0 = m.run_sample(&prompt, &run, &rng, &dev).unwrap();
        let before = verdict(&z0);
        assert_ne!(before, Some(want), "the prior alone was already right");
        let target = Target::new(&m.scorer, &prompt, &m.negatives, run.guide.contrast).unwrap();
        let guided = m
            .guide(&target, unscored(&z0), &run, &rng, &dev, |_, _| {})
            .unwrap();
        let (z, choice) = (guided.latent, guided.start);
        assert!(
            choice.candidate.is_some_and(|i| i >= choice.bank_size),
            "{prompt}: the start was not a completion: {choice:?}"
        );
        assert_eq!(verdict(&z), Some(want), "{prompt}: guided from {before:?}");
    }
}

/// Exploration does not replace a right prior sample: for the seen "a green cube", whose
/// completions include the green sphere, guidance keeps the green cube.
#[test]
fn exploration_keeps_a_right_prior_sample() {
    use clipsculpt::guide::{GuideSettings, Target};
    use clipsculpt::pipeline::RunSettings;
    let m = models();
    let dev = Device::Cpu;
    let run = RunSettings::for_evaluation(GuideSettings::default());
    let want = (Shape::Cube, Colour::Green);
    let prompt = caption(want.0, want.1);
    let rng = Rng::new(run.seed);
    let z0 = m.run_sample(&prompt, &run, &rng, &dev).unwrap();
    let target = Target::new(&m.scorer, &prompt, &m.negatives, run.guide.contrast).unwrap();
    let guided = m
        .guide(&target, unscored(&z0), &run, &rng, &dev, |_, _| {})
        .unwrap();
    let (z, choice) = (guided.latent, guided.start);
    assert!(
        !choice.completion_support.is_empty(),
        "the bank had no completions"
    );
    assert_eq!(choice.candidate, None, "{choice:?}");
    let mesh = extract_mesh(&m.shap_e.decoder, &z, 64, &dev).unwrap();
    let c = classify(&mesh).unwrap();
    assert_eq!((c.shape, c.colour), want);
}
