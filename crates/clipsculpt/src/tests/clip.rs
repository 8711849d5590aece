//! CLIP parity against transformers (fixtures from `tests/fixtures/clip/make_fixtures.py`), gradient
//! checkpointing equivalence, and loader errors.

use super::common::{copy_dir, max_abs};

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::autodiff::checkpoint::Policy;
use crate::clip::load::load_clip;
use crate::clip::{describe, load_text_with_projection, preprocess, ClipScorer, ClipTokenizer};
use crate::weights::{LoadError, TensorProblem};
use candle_core::{DType, Device, Result, Tensor, Var};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/clip")
}

fn io(name: &str) -> HashMap<String, Tensor> {
    candle_core::safetensors::load(fixtures().join(name), &Device::Cpu).expect("fixture io file")
}

/// ‖a − b‖ / ‖b‖.
fn rel_err(a: &Tensor, b: &Tensor) -> f32 {
    let norm = |t: &Tensor| -> f32 {
        t.sqr()
            .unwrap()
            .sum_all()
            .unwrap()
            .sqrt()
            .unwrap()
            .to_scalar()
            .unwrap()
    };
    norm(&(a - b).unwrap()) / norm(b)
}

/// Asserts a max abs error ≤ `tol`: about 4× the error measured on this fixture (each call's comment;
/// `docs/testing.md`), so that a real deviation fails.
fn assert_close(what: &str, ours: &Tensor, reference: &Tensor, tol: f32) {
    let err = max_abs(ours, reference);
    eprintln!("{what}: max abs error {err:.3e} (tolerance {tol:.0e})");
    assert!(err <= tol, "{what}: max abs error {err} > {tol}");
}

struct Prompts {
    prompts: Vec<String>,
    input_ids: Vec<Vec<u32>>,
    truncated: Vec<bool>,
}

fn prompts() -> Prompts {
    let text = std::fs::read_to_string(fixtures().join("prompts.json")).unwrap();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let prompts = v["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap().to_string())
        .collect();
    let input_ids = v["input_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            row.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as u32)
                .collect()
        })
        .collect();
    let truncated = v["truncated"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b.as_bool().unwrap())
        .collect();
    Prompts {
        prompts,
        input_ids,
        truncated,
    }
}

/// tokenizer.json (tiny-clip) and vocab.json + merges.txt (tiny-text-proj) both give the ids of
/// transformers' CLIPTokenizer, padded to 77, and flag the over-long prompt.
#[test]
fn tokenizer_matches_reference() {
    let p = prompts();
    for dir in ["tiny-clip", "tiny-text-proj"] {
        let tok = ClipTokenizer::from_dir(&fixtures().join(dir), 77).unwrap();
        for (i, prompt) in p.prompts.iter().enumerate() {
            let t = tok.encode(prompt).unwrap();
            assert_eq!(t.ids, p.input_ids[i], "{dir}: prompt {prompt:?}");
            assert_eq!(
                t.truncated, p.truncated[i],
                "{dir}: truncation flag of {prompt:?}"
            );
        }
    }
    assert!(
        p.truncated.iter().any(|&t| t),
        "the fixture has a truncated prompt"
    );
}

/// Without `tokenizer_config.json`, padding uses `config.json`'s `pad_token_id` (593 in the
/// fixture, not `<|endoftext|>`); with it, the configured pad token wins.
#[test]
fn tokenizer_pads_with_the_configs_pad_token_id_when_no_tokenizer_config() {
    let tmp = tempfile::tempdir().unwrap();
    copy_dir(&fixtures().join("tiny-clip"), tmp.path());
    let with = ClipTokenizer::from_dir(tmp.path(), 77).unwrap();
    std::fs::remove_file(tmp.path().join("tokenizer_config.json")).unwrap();
    let without = ClipTokenizer::from_dir(tmp.path(), 77).unwrap();
    let (_, eos, pad) = with.special_ids();
    assert_eq!(pad, eos, "tokenizer_config.json pads with <|endoftext|>");
    assert_eq!(without.special_ids().2, 593);
    let ids = without.encode("a cube").unwrap().ids;
    assert_eq!(ids[76], 593);
    assert_eq!(&ids[..3], &with.encode("a cube").unwrap().ids[..3]);
}

#[test]
fn text_tower_matches_reference() -> Result<()> {
    let model = load_clip(&fixtures().join("tiny-clip"), DType::F32, &Device::Cpu).unwrap();
    let io = io("tiny-clip.io.safetensors");
    let (out, embeds) = model.text().forward(&io["input_ids"])?;
    // Measured: 1.3e-6, 9.5e-7, 1.6e-6; the logit scale (14.28) exactly.
    assert_close(
        "text last_hidden_state",
        &out.last_hidden_state,
        &io["text_last_hidden_state"],
        5e-6,
    );
    assert_close("text pooled", &out.pooled, &io["text_pooled"], 4e-6);
    assert_close("text_embeds", &embeds, &io["text_embeds"], 6e-6);
    let scale = io["logit_scale"].exp()?.to_vec1::<f32>()?[0];
    assert!((model.logit_scale()? - scale).abs() <= 4e-6);
    Ok(())
}

#[test]
fn vision_tower_and_preprocessing_match_reference() -> Result<()> {
    let model = load_clip(&fixtures().join("tiny-clip"), DType::F32, &Device::Cpu).unwrap();
    let io = io("tiny-clip.io.safetensors");
    let pixels = preprocess(&io["images"], 30)?;
    // Measured: pixels 5.8e-6, then 1.9e-6, 7.2e-7, 1.1e-6.
    assert_close("preprocessed pixels", &pixels, &io["pixel_values"], 2e-5);
    let (out, embeds) = model.vision().forward(&io["pixel_values"], &Policy::None)?;
    assert_close(
        "vision last_hidden_state",
        &out.last_hidden_state,
        &io["vision_last_hidden_state"],
        8e-6,
    );
    assert_close("vision pooled", &out.pooled, &io["vision_pooled"], 3e-6);
    assert_close("image_embeds", &embeds, &io["image_embeds"], 4e-6);
    Ok(())
}

/// shap-e's text_encoder layout: f16 weights upcast, exact GELU, legacy eos_token_id = 2 pooling.
#[test]
fn text_with_projection_matches_reference() -> Result<()> {
    let model =
        load_text_with_projection(&fixtures().join("tiny-text-proj"), DType::F32, &Device::Cpu)
            .unwrap();
    let io = io("tiny-text-proj.io.safetensors");
    let (out, embeds) = model.forward(&io["input_ids"])?;
    // Measured: 1.4e-6, 1.4e-6, 7.9e-7.
    assert_close(
        "last_hidden_state",
        &out.last_hidden_state,
        &io["last_hidden_state"],
        6e-6,
    );
    assert_close("pooled", &out.pooled, &io["pooled"], 6e-6);
    assert_close("text_embeds", &embeds, &io["text_embeds"], 3e-6);
    Ok(())
}

/// loss = −Σᵢ cos(image_i, text_i) over the first three prompts; d loss / d images through
/// preprocessing (crop, antialiased resize, normalisation) and the vision tower.
fn pixel_gradient(
    scorer: &ClipScorer,
    images: &Tensor,
    policy: &Policy,
) -> Result<(Tensor, Tensor)> {
    let p = prompts();
    let texts: Vec<&str> = p.prompts[..3].iter().map(String::as_str).collect();
    let text = scorer.embed_texts(&texts).unwrap();
    let var = Var::from_tensor(images)?;
    let img = scorer.embed_images(var.as_tensor(), policy)?;
    let cos = (&img * &text)?.sum(1)?;
    let grads = cos.neg()?.sum_all()?.backward()?;
    let g = grads
        .get(&var)
        .expect("the gradient reaches the pixels")
        .clone();
    Ok((cos, g))
}

#[test]
fn pixel_gradient_matches_reference() -> Result<()> {
    let scorer = ClipScorer::load(&fixtures().join("tiny-clip"), DType::F32, &Device::Cpu).unwrap();
    let io = io("tiny-clip.io.safetensors");
    let (cos, grad) = pixel_gradient(&scorer, &io["images"], &Policy::None)?;
    // Measured: cosine 1.9e-7; pixel gradient 2.4e-6 relative.
    assert_close("cosine", &cos, &io["cosine"], 1e-6);
    let err = rel_err(&grad, &io["images_grad"]);
    eprintln!("pixel gradient: relative error {err:.3e}");
    assert!(err <= 1e-5, "pixel gradient relative error {err}");
    Ok(())
}

/// Recomputing the vision blocks in backward (every block, √N segments) gives the same pixel
/// gradient as keeping the whole graph.
#[test]
fn checkpointed_vision_backward_matches_plain() -> Result<()> {
    let scorer = ClipScorer::load(&fixtures().join("tiny-clip"), DType::F32, &Device::Cpu).unwrap();
    let images = io("tiny-clip.io.safetensors")["images"].clone();
    let (_, plain) = pixel_gradient(&scorer, &images, &Policy::None)?;
    for policy in [Policy::BLOCKS, Policy::Sqrt] {
        let (_, g) = pixel_gradient(&scorer, &images, &policy)?;
        let err = max_abs(&g, &plain);
        eprintln!("{policy} vs none: max abs gradient difference {err:.3e}");
        assert!(err < 1e-6, "{policy}: max abs difference {err}");
    }
    Ok(())
}

#[test]
fn truncated_weights_give_expected_and_actual_bytes() {
    let tmp = tempfile::tempdir().unwrap();
    copy_dir(&fixtures().join("tiny-clip"), tmp.path());
    let weights = tmp.path().join("model.safetensors");
    let full = std::fs::metadata(&weights).unwrap().len();
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(&weights)
        .unwrap();
    f.set_len(full - 1000).unwrap();
    let err = load_clip(tmp.path(), DType::F32, &Device::Cpu).unwrap_err();
    match &err {
        LoadError::Truncated {
            expected, actual, ..
        } => {
            assert_eq!((*expected, *actual), (full, full - 1000));
        }
        other => panic!("expected Truncated, got {other}"),
    }
    let msg = err.to_string();
    assert!(
        msg.contains(&full.to_string()) && msg.contains("truncated"),
        "{msg}"
    );
}

/// Every problem is reported at once, each naming the tensor with expected and found shapes.
#[test]
fn wrong_and_missing_tensors_are_all_reported() {
    let tmp = tempfile::tempdir().unwrap();
    copy_dir(&fixtures().join("tiny-clip"), tmp.path());
    let weights = tmp.path().join("model.safetensors");
    let mut ts = candle_core::safetensors::load(&weights, &Device::Cpu).unwrap();
    ts.insert(
        "text_projection.weight".into(),
        Tensor::zeros((24, 31), DType::F32, &Device::Cpu).unwrap(),
    );
    ts.insert(
        "vision_model.encoder.layers.1.mlp.fc2.bias".into(),
        Tensor::zeros(47, DType::F16, &Device::Cpu).unwrap(),
    );
    ts.remove("vision_model.post_layernorm.weight");
    candle_core::safetensors::save(&ts, &weights).unwrap();
    let err = load_clip(tmp.path(), DType::F32, &Device::Cpu).unwrap_err();
    let LoadError::Tensors { problems, .. } = &err else {
        panic!("expected a tensor report, got {err}")
    };
    assert_eq!(
        problems,
        &vec![
            TensorProblem::Shape {
                name: "text_projection.weight".into(),
                expected: vec![24, 32],
                found: vec![24, 31]
            },
            TensorProblem::Shape {
                name: "vision_model.encoder.layers.1.mlp.fc2.bias".into(),
                expected: vec![48],
                found: vec![47]
            },
            TensorProblem::Missing {
                name: "vision_model.post_layernorm.weight".into(),
                expected: vec![48]
            },
        ]
    );
    let msg = err.to_string();
    assert!(
        msg.contains("text_projection.weight has shape [24, 31], expected [24, 32]"),
        "{msg}"
    );
}

#[test]
fn directory_without_config_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::copy(
        fixtures().join("tiny-clip/model.safetensors"),
        tmp.path().join("model.safetensors"),
    )
    .unwrap();
    let err = load_clip(tmp.path(), DType::F32, &Device::Cpu).unwrap_err();
    assert!(matches!(err, LoadError::MissingConfig { .. }), "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("no config.json") && msg.contains(&tmp.path().display().to_string()),
        "{msg}"
    );
    // A text-only config is not a full CLIP.
    let err = load_clip(&fixtures().join("tiny-text-proj"), DType::F32, &Device::Cpu).unwrap_err();
    assert!(matches!(err, LoadError::WrongModel { .. }), "{err}");
}

/// The parameter count from the config equals the float tensors in the file (the int64
/// position_ids buffers are not parameters).
#[test]
fn describe_counts_the_parameters() {
    let dir = fixtures().join("tiny-clip");
    let ts = candle_core::safetensors::load(dir.join("model.safetensors"), &Device::Cpu).unwrap();
    let total: usize = ts
        .iter()
        .filter(|(k, _)| !k.ends_with("position_ids"))
        .map(|(_, t)| t.elem_count())
        .sum();
    let s = describe(&dir).unwrap();
    assert!(s.contains(&format!("parameters: {total} ")), "{s}");
    assert!(s.contains("CLIPModel") && s.contains("patch 6"), "{s}");
    let s = describe(&fixtures().join("tiny-text-proj")).unwrap();
    assert!(
        s.contains("CLIPTextModelWithProjection") && s.contains("Gelu"),
        "{s}"
    );
}
