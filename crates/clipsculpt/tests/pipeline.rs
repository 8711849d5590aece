//! The pipeline on random-weight models: a small guided run raises the CLIP cosine and writes
//! every output.

use anyhow::Result;
use candle_core::Device;
use clipsculpt::autodiff::checkpoint::Policy;
use clipsculpt::guide::{EndToEndGuidance, Explore, GuideMode, GuideSettings, SamplingGuidance};
use clipsculpt::mesh::Format;
use clipsculpt::pipeline::{generate, Models, RunSettings};
use clipsculpt::random::{toy_clip_config, write_random_clip, write_random_shap_e, ShapESizes};

/// Counts heap bytes, as the binary does, so the report's CPU memory figures are real.
#[global_allocator]
static ALLOC: clipsculpt::autodiff::memory::CountingAlloc =
    clipsculpt::autodiff::memory::CountingAlloc;

/// A Shap-E pipeline small enough to run in a test.
const SIZES: ShapESizes = ShapESizes {
    d_hidden: 8,
    d_latent: 16,
    prior_layers: 1,
    prior_width: None,
    text_width: 16,
};

/// A random Shap-E pipeline of [`SIZES`] and a random CLIP, written to and loaded from `dir`.
fn random_pipeline(dir: &std::path::Path) -> Result<Models> {
    write_random_shap_e(&dir.join("shap_e"), SIZES, 1)?;
    write_random_clip(&dir.join("clip"), &toy_clip_config(16, 1, 16, 4), 2)?;
    Models::load(&dir.join("shap_e"), &dir.join("clip"), &Device::Cpu)
}

/// Guidance settings small enough for a test: 12 steps of one 12-pixel view, 8 + 8 samples,
/// decoder chunks of 40 rays, CLIP blocks checkpointed.
fn small_guide() -> GuideSettings {
    GuideSettings {
        steps: 12,
        lr: 0.1,
        views: 1,
        resolution: 12,
        samples: (8, 8),
        chunk_rays: Some(40),
        clip_policy: Policy::BLOCKS,
        ..GuideSettings::default()
    }
}

/// The keep margin decides between the start and the best evaluation: with no margin this run
/// exports its best later latent (its held-aside score rises); with a margin above that gain the
/// same run exports the prior's sample (winning step 0, scores before and after equal), and with
/// one below it, the best latent again. On the embedded toy world ("a red cube", exploration off):
/// random weights give held-aside views that hardly depend on the latent.
#[test]
fn keep_margin_keeps_the_start_unless_beaten() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let dev = Device::Cpu;
    let toy = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../assets/toy");
    let models = Models::load(&toy.join("shap_e"), &toy.join("clip"), &dev)?;
    let run = |keep_margin: f32| -> Result<clipsculpt::pipeline::Report> {
        let guide = GuideSettings {
            keep_margin,
            explore: Explore::Off,
            resolution: 16,
            ..small_guide()
        };
        let s = RunSettings {
            models: Default::default(),
            seed: 0,
            prior_steps: 16,
            guidance_scale: None,
            candidates: 1,
            mode: GuideMode::Latent,
            sampling: SamplingGuidance::default(),
            end_to_end: EndToEndGuidance::default(),
            guide,
            grid: 16,
            preview_size: 8,
            formats: vec![Format::Ply],
        };
        let out = dir.path().join(format!("out-{keep_margin}"));
        generate(&models, "a red cube", &s, &out, &dev, |_| {})
    };
    let free = run(0.0)?;
    let gain = free.score_after - free.score_before;
    assert!(
        free.trace.best_step > 0 && gain > 1e-3,
        "no margin: {:?}",
        free.trace.evals
    );
    let kept = run(2.0 * gain)?;
    assert_eq!(kept.trace.best_step, 0, "{:?}", kept.trace.evals);
    assert_eq!(kept.score_before, kept.score_after);
    let small = run(0.5 * gain)?;
    assert_eq!(small.trace.best_step, free.trace.best_step);
    assert_eq!(small.score_after, free.score_after);
    Ok(())
}

/// A small guided run on random weights: the scoring-CLIP cosine rises over the run, every
/// step's gradient reaches the latent (none skipped) with decoder chunks and CLIP blocks
/// checkpointed, and every output file is written.
#[test]
fn guided_run_raises_the_cosine_and_writes_everything() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let dev = Device::Cpu;
    let models = random_pipeline(dir.path())?;
    let guide = small_guide();
    let s = RunSettings {
        models: Default::default(),
        seed: 3,
        prior_steps: 2,
        guidance_scale: Some(3.0),
        candidates: 1,
        mode: GuideMode::Latent,
        sampling: SamplingGuidance::default(),
        end_to_end: EndToEndGuidance::default(),
        guide,
        grid: 20,
        preview_size: 8,
        formats: Format::DEFAULT.to_vec(),
    };
    let out = dir.path().join("out");
    let report = generate(&models, "a red cube", &s, &out, &dev, |_| {})?;
    assert_eq!(report.trace.skipped, 0);
    // The held-aside views were scored at the start, every 5 steps and at the end; the exported
    // latent is the best of them if it beats the start by the keep margin, else the start, so
    // the score never drops.
    let steps: Vec<usize> = report.trace.evals.iter().map(|e| e.0).collect();
    assert_eq!(steps, vec![0, 5, 10, 12]);
    let best = report
        .trace
        .evals
        .iter()
        .map(|e| e.1)
        .fold(f32::MIN, f32::max);
    let start = report.trace.evals[0].1;
    let (want_step, want_score) = if best > start + s.guide.keep_margin {
        let at = report.trace.evals.iter().find(|e| e.1 == best);
        (at.map_or(usize::MAX, |e| e.0), best)
    } else {
        (0, start)
    };
    assert_eq!(
        report.trace.best_step, want_step,
        "{:?}",
        report.trace.evals
    );
    assert!(
        (report.score_after - want_score).abs() < 1e-5,
        "{} vs {want_score}",
        report.score_after
    );
    assert!(report.score_after >= report.score_before);
    // Every stage is timed, and the stages add up to the total.
    let t = &report.seconds;
    let stages = [
        t.loading,
        t.sampling,
        t.scoring,
        t.optimizing,
        t.latents,
        t.previews,
        t.mesh_grid,
        t.mesh_surface,
        t.mesh_colours,
    ];
    assert!(stages.iter().all(|&x| x > 0.0), "{t:?}");
    // Without negatives there is no exploration, so its stage may be (almost) zero.
    let sum = stages.iter().sum::<f64>() + t.exploring + t.files.values().sum::<f64>() + t.other;
    assert!((sum - t.total).abs() < 1e-9, "{t:?}");
    assert!(t.files.contains_key("mesh.glb") && t.files.len() == s.formats.len());
    // report.json always has a memory section: device, dtype, a peak per stage and the cache
    // release before export (here the host heap, which this test binary counts).
    let m = &report.memory;
    assert_eq!(m.device, "cpu");
    assert_eq!(m.dtype, clipsculpt::device::Precision::F32);
    assert_eq!(m.meter, clipsculpt::device::memory::Meter::HostHeap);
    assert_eq!(report.settings.dtype, clipsculpt::device::Precision::F32);
    assert!(clipsculpt::autodiff::memory::is_counting());
    {
        let p = &m.peak_bytes;
        assert!(p.loading > 0 && p.optimizing > 0 && p.export > 0, "{p:?}");
        assert!(m.export_release.before.used_bytes > 0);
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("report.json"))?)?;
    assert_eq!(json["memory"]["dtype"], "f32");
    assert_eq!(json["settings"]["dtype"], "f32");
    assert!(json["memory"]["peak_bytes"]["optimizing"].is_u64());
    assert!(json["memory"]["export_release"]["after"]["reserved_bytes"].is_u64());
    // The memory in use when the export started, as typed fields (host heap on the CPU).
    assert!(report
        .memory_before_export
        .host_live_bytes
        .is_some_and(|b| b > 0));
    assert!(json["memory_before_export"]["host_live_bytes"].is_u64());
    assert!(json["memory_before_export"]["device_free_bytes"].is_null());
    let c = &report.trace.cosine;
    let (head, tail) = (
        c[..3].iter().sum::<f32>() / 3.0,
        c[c.len() - 3..].iter().sum::<f32>() / 3.0,
    );
    assert!(tail > head, "cosine should rise: {c:?}");
    for f in [
        "latent.safetensors",
        "latent_prior.safetensors",
        "preview.png",
        "report.json",
        "mesh.glb",
    ] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    Ok(())
}

/// Guided sampling through a random prior with classifier-free guidance (both branches as one
/// batch): every guided step's gradient reaches the sampler state through the checkpointed
/// blocks (none skipped), the trace and the stages' memory are in the report, and every file is
/// written.
#[test]
fn guided_sampling_run_records_its_trace() -> Result<()> {
    let dir = tempfile::tempdir()?;
    let dev = Device::Cpu;
    let models = random_pipeline(dir.path())?;
    let s = RunSettings {
        models: Default::default(),
        seed: 5,
        prior_steps: 6,
        guidance_scale: Some(3.0),
        candidates: 1,
        mode: GuideMode::Sampling,
        sampling: SamplingGuidance {
            sigma_max: 1000.0,
            sigma_min: 0.01,
            ..SamplingGuidance::default()
        },
        end_to_end: EndToEndGuidance::default(),
        guide: small_guide(),
        grid: 20,
        preview_size: 8,
        formats: vec![Format::Ply],
    };
    let out = dir.path().join("out");
    let report = generate(&models, "a red cube", &s, &out, &dev, |_| {})?;
    // 6 Heun steps: every step but the last (σ → 0) is guided.
    assert_eq!(report.sampling.steps.len(), 5, "{:?}", report.sampling);
    assert_eq!(report.sampling.skipped, 0);
    assert!(report.sampling.steps.iter().all(|g| g.push_rms > 0.0));
    assert!(
        report.trace.cosine.is_empty(),
        "no latent stage in sampling mode"
    );
    assert!(report.memory.peak_bytes.sampling > 0);
    for f in ["latent.safetensors", "mesh.ply", "report.json"] {
        assert!(out.join(f).is_file(), "{f} missing");
    }
    Ok(())
}
