//! Mixed precision (`--dtype`): the frozen networks with bf16/f16 matrix weights against the same
//! random-weight models in f32 — CLIP embeddings, rendered images and the latent gradient of the
//! guidance loss — and, within each dtype, checkpointed against unchecked gradients.
//!
//! The models are tiny (widths 16–32) so the half-precision CPU matmuls (candle widens bf16 to
//! f32 and rounds the product back) stay fast. Tolerances are stated per dtype next to each
//! assertion; the measured figures are printed (`--nocapture`).

use crate::autodiff::checkpoint::Policy;
use crate::autodiff::rng::Rng;
use crate::clip::ClipScorer;
use crate::device::Precision;
use crate::pipeline::Models;
use crate::random::{toy_clip_config, write_random_clip, write_random_shap_e, ShapESizes};
use crate::render::camera::pan_cameras;
use crate::render::{render_views_with, RayDraws, RenderSettings};
use crate::shap_e::{Decoder, ShapE};
use candle_core::{DType, Device, Result, Tensor, Var};

use super::common::max_abs;

const SIZES: ShapESizes = ShapESizes {
    d_hidden: 16,
    d_latent: 16,
    prior_layers: 1,
    prior_width: None,
    text_width: 16,
};

const HALF: [Precision; 2] = [Precision::Bf16, Precision::F16];

/// Random-weight Shap-E and CLIP folders (seeded, so every dtype loads the same values).
fn folders() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    write_random_shap_e(&dir.path().join("shap_e"), SIZES, 4).unwrap();
    write_random_clip(&dir.path().join("clip"), &toy_clip_config(32, 2, 32, 8), 5).unwrap();
    dir
}

fn load(dir: &std::path::Path, p: Precision) -> (Decoder, ClipScorer) {
    let dev = Device::Cpu;
    let shap_e = ShapE::load(&dir.join("shap_e"), p.dtype(), &dev).unwrap();
    let scorer = ClipScorer::load(&dir.join("clip"), p.dtype(), &dev).unwrap();
    (shap_e.decoder, scorer)
}

fn cosine(a: &Tensor, b: &Tensor) -> f32 {
    let (a, b) = (a.flatten_all().unwrap(), b.flatten_all().unwrap());
    let dot = (&a * &b)
        .unwrap()
        .sum_all()
        .unwrap()
        .to_scalar::<f32>()
        .unwrap();
    let n = |t: &Tensor| {
        t.sqr()
            .unwrap()
            .sum_all()
            .unwrap()
            .to_scalar::<f32>()
            .unwrap()
            .sqrt()
    };
    dot / (n(&a) * n(&b))
}

/// A fixed latent with the spread of prior samples.
fn latent(decoder: &Decoder) -> Tensor {
    let rows = decoder.config().latent_rows();
    (Rng::new(11)
        .normal_tensor(&[1, rows, SIZES.d_latent], &Device::Cpu)
        .unwrap()
        * 0.5)
        .unwrap()
}

/// The guidance loss `−mean cos(CLIP(render(z)), CLIP("a red cube"))` on two 16-pixel views with
/// fixed draws: the rendered images `(2, 3, 16, 16)`, the loss and dL/dz. `chunk`/`policy`
/// choose the checkpointing of the decoder chunks and the CLIP blocks.
fn guidance(
    decoder: &Decoder,
    scorer: &ClipScorer,
    chunk: Option<usize>,
    policy: &Policy,
) -> Result<(Tensor, f32, Tensor)> {
    let dev = Device::Cpu;
    let z = Var::from_tensor(&latent(decoder))?;
    let cameras = &pan_cameras(16)[..2];
    let settings = RenderSettings {
        n_coarse: 8,
        n_fine: 8,
        chunk_rays: chunk,
        background: None,
    };
    let draws = RayDraws::draw(&mut Rng::new(9), 2 * 16 * 16, &settings, &dev)?;
    let r = render_views_with(decoder, z.as_tensor(), cameras, &settings, &draws)?;
    let images = r.rgb.permute((0, 3, 1, 2))?;
    let text = scorer
        .embed_texts(&["a red cube"])
        .map_err(candle_core::Error::wrap)?;
    let emb = scorer.embed_images(&images, policy)?;
    let loss = ClipScorer::cosine(&emb, &text)?.mean_all()?.neg()?;
    let grads = loss.backward()?;
    let g = grads
        .get(&z)
        .ok_or_else(|| candle_core::Error::Msg("no gradient reached the latent".into()))?
        .clone();
    Ok((images.detach(), loss.to_scalar::<f32>()?, g))
}

/// Loading in bf16/f16 stores exactly the matrix weights in the half type: norms, biases and
/// embeddings stay f32, so activations are f32.
#[test]
fn half_models_keep_norms_and_activations_in_f32() {
    let dir = folders();
    for p in HALF {
        let (decoder, scorer) = load(dir.path(), p);
        assert_eq!(decoder.mlp().weight_dtype(), p.dtype());
        assert_eq!(decoder.mlp().dtype(), DType::F32);
        let t = scorer.embed_texts(&["a red cube"]).unwrap();
        assert_eq!(t.dtype(), DType::F32);
    }
    let (decoder, _) = load(dir.path(), Precision::F32);
    assert_eq!(decoder.mlp().weight_dtype(), DType::F32);
}

/// CLIP text and image embeddings (unit vectors) of bf16/f16 weights point where the f32 ones
/// do: cosine ≥ 0.995 (bf16), ≥ 0.9995 (f16), and they are not bit-identical (the half path ran).
#[test]
fn half_clip_embeddings_match_f32() {
    let dir = folders();
    let prompts = ["a red cube", "a blue torus", "a green cone"];
    let images = Rng::new(3)
        .uniform_tensor(&[2, 3, 32, 32], &Device::Cpu)
        .unwrap();
    let (_, reference) = load(dir.path(), Precision::F32);
    let t32 = reference.embed_texts(&prompts).unwrap();
    let i32 = reference.embed_images(&images, &Policy::BLOCKS).unwrap();
    for (p, min_cos) in [(Precision::Bf16, 0.995), (Precision::F16, 0.9995)] {
        let (_, scorer) = load(dir.path(), p);
        let t = scorer.embed_texts(&prompts).unwrap();
        let i = scorer.embed_images(&images, &Policy::BLOCKS).unwrap();
        for k in 0..prompts.len() {
            let c = cosine(&t.get(k).unwrap(), &t32.get(k).unwrap());
            println!("{p}: text {k} cosine to f32 {c:.6}");
            assert!(c >= min_cos, "{p}: text embedding {k} cosine {c}");
        }
        for k in 0..2 {
            let c = cosine(&i.get(k).unwrap(), &i32.get(k).unwrap());
            println!("{p}: image {k} cosine to f32 {c:.6}");
            assert!(c >= min_cos, "{p}: image embedding {k} cosine {c}");
        }
        assert!(
            max_abs(&t, &t32) > 0.0,
            "{p}: text embeddings bit-identical to f32"
        );
    }
}

/// Rendered images and the latent gradient of the guidance loss: images within 0.02 (bf16) and
/// 0.003 (f16) of f32 in [0, 1] colour; the gradient's cosine to the f32 gradient ≥ 0.99.
#[test]
fn half_renders_and_latent_gradients_match_f32() -> Result<()> {
    let dir = folders();
    let (d32, s32) = load(dir.path(), Precision::F32);
    let (img32, loss32, g32) = guidance(&d32, &s32, Some(96), &Policy::BLOCKS)?;
    assert!(g32.abs()?.max_all()?.to_scalar::<f32>()? > 0.0);
    for (p, img_tol) in [(Precision::Bf16, 0.02), (Precision::F16, 0.003)] {
        let (d, s) = load(dir.path(), p);
        let (img, loss, g) = guidance(&d, &s, Some(96), &Policy::BLOCKS)?;
        let (di, cg) = (max_abs(&img, &img32), cosine(&g, &g32));
        println!(
            "{p}: image max |Δ| {di:.5}, loss {loss:.6} vs {loss32:.6}, gradient cosine {cg:.6}"
        );
        assert!(di < img_tol, "{p}: image differs by {di}");
        assert!(
            di > 0.0,
            "{p}: image bit-identical to f32 (half path not taken)"
        );
        assert!(cg >= 0.99, "{p}: latent gradient cosine {cg}");
    }
    Ok(())
}

/// Within each dtype, checkpointing (decoder chunks of 96 rays, every CLIP block) changes no
/// gradient beyond rounding: max |Δ| ≤ 1e-5 of the gradient's largest entry in f32 and bf16
/// (recomputation repeats the same products), ≤ 2e-3 in f16, whose per-op gradient scale is taken
/// per chunk, so chunks round differently (f16's relative step is 2⁻¹¹ ≈ 4.9e-4).
#[test]
fn checkpointed_gradients_equal_unchecked_in_every_dtype() -> Result<()> {
    let dir = folders();
    for (p, tol) in [
        (Precision::F32, 1e-5),
        (Precision::Bf16, 1e-5),
        (Precision::F16, 2e-3),
    ] {
        let (d, s) = load(dir.path(), p);
        let (_, _, plain) = guidance(&d, &s, None, &Policy::None)?;
        let (_, _, ckpt) = guidance(&d, &s, Some(96), &Policy::BLOCKS)?;
        let scale = plain.abs()?.max_all()?.to_scalar::<f32>()?;
        let rel = max_abs(&plain, &ckpt) / scale;
        println!("{p}: checkpointed vs unchecked gradient, max |Δ| / max |g| = {rel:.2e}");
        assert!(scale > 0.0 && rel <= tol, "{p}: relative difference {rel}");
    }
    Ok(())
}

/// `Models::load` picks f32 on the CPU, and `load_with_precision` records the dtype it used.
#[test]
fn models_record_their_precision() -> anyhow::Result<()> {
    let dir = folders();
    let dev = Device::Cpu;
    let (s, c) = (dir.path().join("shap_e"), dir.path().join("clip"));
    assert_eq!(Models::load(&s, &c, &dev)?.precision, Precision::F32);
    let m = Models::load_with_precision(&s, &c, &dev, Precision::Bf16)?;
    assert_eq!(m.precision, Precision::Bf16);
    assert_eq!(m.shap_e.decoder.mlp().weight_dtype(), DType::BF16);
    Ok(())
}
