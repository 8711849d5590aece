//! Shap-E parity with diffusers (fixtures from `tests/fixtures/shap_e/make_fixtures.py`: the tiny
//! components of diffusers' own Shap-E tests plus a second latent width), the scheduler against
//! the 64-step table of `docs/shap-e.md`, and d(render)/d(latent) against finite differences.

use super::common::max_abs;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::autodiff::checkpoint::Policy;
use crate::autodiff::rng::Rng;
use crate::render::camera::pan_cameras;
use crate::render::{self, Camera, RayDraws, RenderSettings};
use crate::shap_e::config::read_config;
use crate::shap_e::decoder::load_prior;
use crate::shap_e::sampler::sample_latents_from;
use crate::shap_e::{
    initial_noise, Decoder, HeunDiscreteScheduler, RendererConfig, SchedulerConfig,
};
use crate::weights::LoadError;
use candle_core::{DType, Device, Tensor, Var};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/shap_e")
}

fn fixtures() -> HashMap<String, Tensor> {
    candle_core::safetensors::load(dir().join("fixtures.safetensors"), &Device::Cpu)
        .expect("fixtures load")
}

fn decoder(name: &str, dtype: DType) -> Decoder {
    let loaded = Decoder::load(&dir().join(format!("renderer_{name}")), dtype, &Device::Cpu)
        .expect("decoder loads");
    // Every float tensor is used except those deliberately skipped: the placeholder weights of the
    // projected layers (overwritten from the latent) and the void background (taken from config).
    let expected: Vec<String> = (0..4)
        .map(|k| format!("mlp.mlp.{k}.weight"))
        .chain(["void.background".to_string()])
        .collect();
    assert_eq!(loaded.unused, expected);
    loaded.model
}

/// The 64-step table (`docs/shap-e.md`, "Scheduler"), 16 of its rows, relative tolerance 1e-4.
#[test]
fn scheduler_matches_the_64_step_table() {
    let rows: [(usize, f32, f32); 16] = [
        (0, 403.422, 1023.0),
        (1, 373.449, 1009.8248),
        (5, 271.831, 955.6209),
        (10, 178.89, 884.2141),
        (16, 104.507, 792.4828),
        (20, 71.2731, 727.1712),
        (27, 34.53, 603.5452),
        (32, 19.5707, 506.7919),
        (38, 9.25962, 379.8369),
        (44, 4.00523, 240.9781),
        (48, 2.15414, 146.6222),
        (53, 0.910134, 50.4929),
        (57, 0.419388, 12.8308),
        (60, 0.220448, 3.0548),
        (62, 0.138593, 0.6985),
        (63, 0.108571, 0.0),
    ];
    let cfg: SchedulerConfig = read_config(&dir().join("scheduler/scheduler_config.json")).unwrap();
    assert_eq!(cfg, SchedulerConfig::shap_e());
    let h = HeunDiscreteScheduler::new(&cfg, 64).unwrap();
    // Interleaved: step i uses sigmas[2i − 1 or 0] / timesteps likewise.
    let at = |i: usize| if i == 0 { 0 } else { 2 * i - 1 };
    for (i, s, t) in rows {
        let (gs, gt) = (h.sigmas()[at(i)], h.timesteps()[at(i)]);
        assert!((gs - s).abs() <= 1e-4 * s + 1e-6, "sigma {i}: {gs} vs {s}");
        assert!((gt - t).abs() <= 1e-4 * t.max(1.0), "t {i}: {gt} vs {t}");
    }
    assert_eq!(h.sigmas().len(), 128);
    assert_eq!(h.timesteps().len(), 127);
    assert!((h.init_noise_sigma() - 403.4215).abs() < 1e-3);
}

/// Sigmas and timesteps for 1, 2 and 64 steps equal diffusers' (f32).
#[test]
fn scheduler_matches_diffusers() {
    let fx = fixtures();
    for n in [1, 2, 64] {
        let h = HeunDiscreteScheduler::new(&SchedulerConfig::shap_e(), n).unwrap();
        let s = fx[&format!("sched.n{n}.sigmas")].to_vec1::<f32>().unwrap();
        let t = fx[&format!("sched.n{n}.timesteps")]
            .to_vec1::<f32>()
            .unwrap();
        for (a, b) in h.sigmas().iter().zip(&s) {
            assert!(
                (a - b).abs() <= 2e-6 * b.abs().max(1e-3),
                "n={n}: sigma {a} vs {b}"
            );
        }
        for (a, b) in h.timesteps().iter().zip(&t) {
            assert!((a - b).abs() <= 1e-4, "n={n}: t {a} vs {b}");
        }
    }
}

#[test]
fn prior_matches_diffusers() {
    let fx = fixtures();
    for name in ["a", "b"] {
        let loaded = load_prior(
            &dir().join(format!("prior_{name}")),
            DType::F32,
            &Device::Cpu,
        )
        .unwrap();
        assert_eq!(loaded.unused, vec!["clip_mean", "clip_std"], "prior_{name}");
        let prior = loaded.model;
        let k = |s: &str| &fx[&format!("{name}.prior.{s}")];
        let t = k("t").to_vec1::<f32>().unwrap()[0];
        let out = prior.forward(k("x"), t, k("proj")).unwrap();
        let err = max_abs(&out, k("out"));
        eprintln!("prior_{name}: max abs {err:e}");
        // Measured: 7.2e-7 (a), 6.0e-7 (b).
        assert!(err <= 3e-6, "prior_{name}: max abs {err}");
        // The same under a checkpoint policy.
        let ck = prior
            .forward_with_policy(k("x"), t, k("proj"), &Policy::BLOCKS)
            .unwrap();
        assert!(max_abs(&ck, &out) == 0.0);
    }
}

/// Two Heun steps with an injected latent, guided (scale 15) and unguided. The prior itself
/// agrees to ~1e-6, but the first step computes `x + (x − x0)/σ·dt` at |x| ≈ 403·|noise| ≈
/// 10³, where f32 resolves 1.2e-4: whenever our x0 and torch's (1e-6 apart) round `x − x0`
/// differently, the result moves by one such ulp, and the predictor and corrector can each do
/// so. The reference itself is quantised at that step, so allow 4 ulps at |x| < 2048.
#[test]
fn guided_sampling_matches_diffusers() {
    let fx = fixtures();
    for (name, g) in [("a", 15.0f32), ("a", 1.0), ("b", 15.0)] {
        let prior = load_prior(
            &dir().join(format!("prior_{name}")),
            DType::F32,
            &Device::Cpu,
        )
        .unwrap()
        .model;
        let key = format!("{name}.sample.s2.g{g}");
        let out = sample_latents_from(
            &prior,
            &SchedulerConfig::shap_e(),
            &fx[&format!("{key}.text")],
            &fx[&format!("{key}.noise")],
            2,
            g,
        )
        .unwrap();
        let err = max_abs(&out, &fx[&format!("{key}.out")]);
        eprintln!("{key}: max abs {err:e}");
        assert!(err <= 4.0 * 1.2208e-4, "{key}: max abs {err}");
    }
}

#[test]
fn sample_latents_is_seeded_and_bounded() {
    let prior = load_prior(&dir().join("prior_a"), DType::F32, &Device::Cpu)
        .unwrap()
        .model;
    let text = Tensor::ones((1, 16), DType::F32, &Device::Cpu).unwrap();
    let sample = |seed| {
        let noise = initial_noise(&prior, &text, &mut Rng::new(seed)).unwrap();
        let sched = SchedulerConfig::shap_e();
        sample_latents_from(&prior, &sched, &text, &noise, 3, 15.0).unwrap()
    };
    let (a, b) = (sample(5), sample(5));
    assert_eq!(a.dims(), &[1, 32, 16]);
    assert_eq!(max_abs(&a, &b), 0.0);
    let m = a
        .abs()
        .unwrap()
        .max_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    assert!(m <= 1.0 + 1e-3, "latents stay in [-1, 1]: {m}");
}

#[test]
fn params_proj_and_mlp_match_diffusers() {
    let fx = fixtures();
    for name in ["a", "b"] {
        let dec = decoder(name, DType::F32);
        let k = |s: &str| &fx[&format!("{name}.{s}")];
        let weights = dec.mlp_weights(k("latent")).unwrap();
        for (j, w) in weights.iter().enumerate() {
            let err = max_abs(w, k(&format!("proj.nerstf.mlp.{j}.weight")));
            // Measured: at most 1.8e-7.
            assert!(err <= 8e-7, "{name} proj {j}: {err}");
        }
        let raw = dec.query(&weights, k("mlp.points")).unwrap();
        let err = max_abs(&raw, k("mlp.raw"));
        eprintln!("{name} mlp raw: max abs {err:e}");
        // Measured: raw, SDF and colours at most 6.0e-8.
        assert!(err <= 3e-7, "{name} mlp raw: {err}");
        let pts = k("mlp.points").squeeze(0).unwrap();
        let (sdf, rgb) = dec.query_field(k("latent"), &pts).unwrap();
        let e_sdf = max_abs(&sdf, &k("mlp.sdf").squeeze(0).unwrap().squeeze(1).unwrap());
        let e_rgb = max_abs(&rgb, &k("mlp.stf").squeeze(0).unwrap());
        assert!(
            e_sdf <= 3e-7 && e_rgb <= 3e-7,
            "{name}: sdf {e_sdf}, rgb {e_rgb}"
        );
    }
}

/// The mesh export's field query runs on the fused CPU MLP; it equals the composition of candle
/// ops (`FieldQuery::query_composed`) on the trained toy decoder (a real shape's latent, so the
/// SDF has both signs) and on random decoders: diffusers' tiny ones in f32 and f64, and a random
/// Shap-E pipeline's. 5000 points: more than one chunk of the composed path.
#[test]
fn fused_field_query_matches_the_composed_ops() {
    let dev = Device::Cpu;
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let toy = Decoder::load(
        &root.join("../../assets/toy/shap_e/shap_e_renderer"),
        DType::F32,
        &dev,
    )
    .expect("toy decoder loads")
    .model;
    let toy_latents =
        candle_core::safetensors::load(root.join("../../assets/toy/latents.safetensors"), &dev)
            .expect("toy latents load");
    let tmp = tempfile::tempdir().unwrap();
    crate::random::write_random_shap_e(
        tmp.path(),
        crate::random::ShapESizes {
            d_hidden: 24,
            d_latent: 16,
            prior_layers: 1,
            prior_width: None,
            text_width: 16,
        },
        11,
    )
    .unwrap();
    let random = Decoder::load(&tmp.path().join("shap_e_renderer"), DType::F32, &dev)
        .expect("random decoder loads")
        .model;
    let mut rng = Rng::new(3);
    let points = rng
        .uniform_tensor(&[5000, 3], &dev)
        .unwrap()
        .affine(2.2, -1.1)
        .unwrap();
    let mut cases: Vec<(String, Decoder, Tensor)> =
        vec![("toy".into(), toy, toy_latents["latent"].get(0).unwrap())];
    for (name, dtype) in [("a", DType::F32), ("a", DType::F64), ("b", DType::F32)] {
        let dec = decoder(name, dtype);
        let rows = dec.config().latent_rows();
        let z = rng
            .normal_tensor(&[1, rows, dec.config().d_latent], &dev)
            .unwrap();
        cases.push((format!("diffusers {name} {dtype:?}"), dec, z));
    }
    let rows = random.config().latent_rows();
    let z = (rng.normal_tensor(&[1, rows, 16], &dev).unwrap() * 3.0).unwrap();
    cases.push(("random pipeline".into(), random, z));
    for (name, dec, z) in cases {
        let field = dec.field(&z).unwrap();
        assert!(field.is_fused(), "{name}: the fused MLP applies");
        let (sdf, rgb) = field.query(&points).unwrap();
        let (sdf_ref, rgb_ref) = field.query_composed(&points).unwrap();
        assert_eq!(sdf.dims(), &[5000]);
        assert_eq!(rgb.dims(), &[5000, 3]);
        assert_eq!(sdf.dtype(), sdf_ref.dtype());
        // The grid's SDF-only query gives the same values.
        assert_eq!(max_abs(&field.query_sdf(&points).unwrap(), &sdf), 0.0);
        let (e_sdf, e_rgb) = (max_abs(&sdf, &sdf_ref), max_abs(&rgb, &rgb_ref));
        eprintln!("{name}: sdf {e_sdf:e}, rgb {e_rgb:e}");
        assert!(
            e_sdf <= 1e-5 && e_rgb <= 1e-5,
            "{name}: sdf {e_sdf}, rgb {e_rgb}"
        );
        // Not a trivial field: the SDF varies, and the toy shape has an inside and an outside.
        let v = sdf_ref
            .to_dtype(DType::F32)
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        let (lo, hi) = v
            .iter()
            .fold((f32::MAX, f32::MIN), |(l, h), &x| (l.min(x), h.max(x)));
        assert!(hi - lo > 1e-3, "{name}: sdf range {lo}..{hi}");
        if name == "toy" {
            assert!(lo < 0.0 && hi > 0.0, "toy sdf range {lo}..{hi}");
        }
    }
    // The convenience entry point takes the fused path too.
    let dec = decoder("a", DType::F32);
    let z = rng
        .normal_tensor(
            &[1, dec.config().latent_rows(), dec.config().d_latent],
            &dev,
        )
        .unwrap();
    let (a, _) = dec.query_field(&z, &points).unwrap();
    let (b, _) = dec.field(&z).unwrap().query_composed(&points).unwrap();
    assert!(max_abs(&a, &b) <= 1e-5);
}

fn fixture_draws(fx: &HashMap<String, Tensor>, name: &str) -> (RayDraws, RenderSettings, usize) {
    let k = |s: &str| fx[&format!("{name}.render.{s}")].clone();
    let shape = k("shape").to_vec1::<f32>().unwrap();
    let draws = RayDraws {
        coarse: k("coarse"),
        fine_index: k("fine_index"),
        fine_offset: k("fine_offset"),
    };
    let settings = RenderSettings {
        n_coarse: shape[1] as usize,
        n_fine: shape[2] as usize,
        ..RenderSettings::default()
    };
    (draws, settings, shape[0] as usize)
}

/// `decode_to_image` over the 20 pan cameras with the same uniform draws: max abs ≤ 3e-6 (measured
/// 7.2e-7, colours in [0, 1]), with and without ray chunks.
#[test]
fn render_matches_diffusers() {
    let fx = fixtures();
    for name in ["a", "b"] {
        let dec = decoder(name, DType::F32);
        let (draws, settings, size) = fixture_draws(&fx, name);
        let latent = &fx[&format!("{name}.latent")];
        for chunk in [None, Some(37)] {
            let s = RenderSettings {
                chunk_rays: chunk,
                ..settings.clone()
            };
            let out =
                render::render_views_with(&dec, latent, &pan_cameras(size), &s, &draws).unwrap();
            let err = max_abs(&out.rgb, &fx[&format!("{name}.render.image")]);
            eprintln!("render {name} chunk {chunk:?}: max abs {err:e}");
            assert!(err <= 3e-6, "render {name} chunk {chunk:?}: max abs {err}");
        }
    }
}

/// d/dz Σ c ⊙ [rgb, opacity] of a 3×3 view of the tiny decoder, in f64, against central
/// differences at 24 latent entries; with one graph and with chunks of 2 rays.
#[test]
fn render_gradient_matches_finite_differences() {
    let dec = decoder("a", DType::F64);
    let dev = Device::Cpu;
    let cam = Camera::orbit(0.4, 0.3, 2.5, 0.9, 3, 3);
    let settings = RenderSettings {
        n_coarse: 8,
        n_fine: 8,
        chunk_rays: None,
        background: Some([0.2, 0.5, 0.9]),
    };
    let draws = RayDraws::draw(&mut Rng::new(3), 9, &settings, &dev).unwrap();
    let z0 = Rng::new(4)
        .uniform_tensor(&[1, 32, 16], &dev)
        .unwrap()
        .to_dtype(DType::F64)
        .unwrap()
        .affine(1.6, -0.8)
        .unwrap();
    let c = Rng::new(5)
        .normal_tensor(&[9, 4], &dev)
        .unwrap()
        .to_dtype(DType::F64)
        .unwrap();
    let loss = |z: &Tensor, s: &RenderSettings| -> Tensor {
        let out =
            render::render_views_with(&dec, z, std::slice::from_ref(&cam), s, &draws).unwrap();
        let y = Tensor::cat(
            &[
                out.rgb.reshape((9, 3)).unwrap(),
                out.opacity.reshape((9, 1)).unwrap(),
            ],
            1,
        )
        .unwrap();
        (y * &c).unwrap().sum_all().unwrap()
    };
    let flat = z0.flatten_all().unwrap().to_vec1::<f64>().unwrap();
    for chunk in [None, Some(2)] {
        let s = RenderSettings {
            chunk_rays: chunk,
            ..settings.clone()
        };
        let var = Var::from_tensor(&z0).unwrap();
        let grads = loss(var.as_tensor(), &s).backward().unwrap();
        let g = grads.get(&var).expect("gradient reaches the latent");
        let g = g.flatten_all().unwrap().to_vec1::<f64>().unwrap();
        assert!(g.iter().any(|v| v.abs() > 1e-6), "gradient is not all zero");
        let eps = 1e-6;
        let mut worst = 0f64;
        let mut largest = 0f64;
        // Probe the 12 entries with the largest gradient and 12 spread over all rows.
        let mut order: Vec<usize> = (0..g.len()).collect();
        order.sort_by(|&a, &b| g[b].abs().total_cmp(&g[a].abs()));
        let probes = order[..12]
            .iter()
            .copied()
            .chain((0..flat.len()).step_by(flat.len() / 12));
        for j in probes {
            let probe = |d: f64| {
                let mut v = flat.clone();
                v[j] += d;
                let z = Tensor::from_vec(v, (1, 32, 16), &dev).unwrap();
                loss(&z, &s).to_scalar::<f64>().unwrap()
            };
            let numeric = (probe(eps) - probe(-eps)) / (2.0 * eps);
            let err = (numeric - g[j]).abs() / (1.0 + numeric.abs());
            worst = worst.max(err);
            largest = largest.max(numeric.abs());
            assert!(
                err < 1e-5,
                "chunk {chunk:?} z[{j}]: analytic {} vs numeric {numeric}",
                g[j]
            );
        }
        eprintln!(
            "render gradient, chunks {chunk:?}: largest |dL/dz| probed {largest:.3e}, worst error {worst:.1e}"
        );
        assert!(largest > 1e-3, "the probes must see a real gradient");
    }
}

#[test]
fn load_errors_name_the_problem() {
    let err = load_prior(&dir().join("renderer_a"), DType::F32, &Device::Cpu).unwrap_err();
    assert!(matches!(err, LoadError::WrongModel { .. }), "{err}");
    assert!(
        err.to_string()
            .contains("expected PriorTransformer, found ShapERenderer"),
        "{err}"
    );
    // The tiny weights against the real config: every mis-shaped tensor is listed.
    let cfg = RendererConfig {
        class_name: None,
        ..serde_json::from_str::<RendererConfig>("{}").unwrap()
    };
    let path = dir().join("renderer_a/diffusion_pytorch_model.safetensors");
    let err = Decoder::load_file(&cfg, &path, DType::F32, &Device::Cpu).unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("tensor params_proj.projections.nerstf__mlp__0__weight.proj.weight has shape [744, 16], expected [23808, 1024]"), "{msg}");
    assert!(
        msg.contains("tensor mlp.mlp.6.weight has shape [12, 8], expected [12, 256]"),
        "{msg}"
    );
    assert!(msg.matches('\n').count() >= 10, "{msg}");
}

#[test]
fn contact_sheet_is_a_5_by_4_png() {
    let fx = fixtures();
    let dec = decoder("a", DType::F32);
    let settings = RenderSettings {
        n_coarse: 8,
        n_fine: 8,
        ..RenderSettings::default()
    };
    let png = render::contact_sheet(&dec, &fx["a.latent"], 6, &settings, &mut Rng::new(1)).unwrap();
    let img = image::load_from_memory(&png).unwrap();
    assert_eq!((img.width(), img.height()), (30, 24));
}

/// A diffusers-layout root with the tiny components loads as one model: `renderer/` is the
/// fallback when `shap_e_renderer/` is absent.
#[test]
fn whole_checkpoint_folder_loads() {
    let root = tempfile::tempdir().unwrap();
    let copy = |from: &str, to: &str| {
        let dst = root.path().join(to);
        std::fs::create_dir_all(&dst).unwrap();
        for e in std::fs::read_dir(dir().join(from)).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), dst.join(e.file_name())).unwrap();
        }
    };
    copy("prior_a", "prior");
    copy("renderer_a", "renderer");
    copy("scheduler", "scheduler");
    let m = crate::shap_e::ShapE::load(root.path(), DType::F32, &Device::Cpu).unwrap();
    let text = Tensor::ones((1, 16), DType::F32, &Device::Cpu).unwrap();
    let z = m.sample(&text, 2, 15.0, &mut Rng::new(0)).unwrap();
    let p = root.path().join("latent.safetensors");
    crate::shap_e::save_latent(&p, &z).unwrap();
    let back = crate::shap_e::load_latent(&p, &Device::Cpu).unwrap();
    let cam = Camera::orbit(0.0, 0.3, 4.0, 0.7, 4, 4);
    let img = m
        .decoder
        .render(&back, &cam, &RenderSettings::default(), &mut Rng::new(1))
        .unwrap();
    assert_eq!(img.rgb.dims(), &[4, 4, 3]);
    assert_eq!(img.opacity.dims(), &[4, 4]);
}
