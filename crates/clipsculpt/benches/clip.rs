//! CLIP vision backward under checkpoint policies: ViT-B/32 geometry (width 768, 12 layers, 12 heads,
//! patch 32, image 224) with random weights, 8 images, forward + backward to the pixels.
//!
//! Prints one markdown row per policy: peak heap bytes above the loaded weights during forward +
//! backward (counting allocator), seconds, and both ratios to no checkpointing. Run with
//! `cargo bench --bench clip`; `CLIP_BENCH_REPEATS` (default 1) repeats each policy and keeps the
//! fastest time and the highest peak. The embeddings come from `image_embeds`, the scorer's path
//! (the last layer only for the class token); `CLIP_BENCH_FULL_STACK=1` runs the whole
//! `last_hidden_state` through `forward` instead (same loss and gradient, compare ‖grad‖).
//!
//! Device-generic (`benches/common`): `CLIPSCULPT_DEVICE=cuda`, `CLIPSCULPT_DTYPE=bf16`;
//! `CLIPSCULPT_BENCH_SIZE=gpu` runs the ViT-B/16 and ViT-L/14 geometries on 32 images, `tiny` a
//! smoke run. The device is synchronised around each timing; the peak columns count bytes above the
//! span's start on the bench's device (the CUDA pool on a GPU), and "device peak" is the device's
//! absolute high-water mark (weights included).

#[path = "common/mod.rs"]
mod common;

use candle_core::{Result, Tensor, Var};
use clipsculpt::autodiff::checkpoint::Policy;
use clipsculpt::autodiff::memory::{mib, CountingAlloc};
use clipsculpt::autodiff::rng::Rng;
use clipsculpt::clip::{preprocess, ClipVisionConfig, ClipVisionModelWithProjection};
use clipsculpt::random::random_frozen_in;
use common::{BenchEnv, Size};

#[global_allocator]
static A: CountingAlloc = CountingAlloc;

/// One forward + backward; returns (peak host bytes above the start, seconds, device peak,
/// ‖d loss/d images‖).
fn run(
    env: &BenchEnv,
    model: &ClipVisionModelWithProjection,
    side: usize,
    images: &Tensor,
    target: &Tensor,
    policy: &Policy,
    full_stack: bool,
) -> Result<(usize, f64, u64, f32)> {
    // The input images are a Var made before the meter starts: inputs are not activations.
    let var = Var::from_tensor(images)?;
    let span = env.start()?;
    let pixels = preprocess(var.as_tensor(), side)?;
    let embeds = if full_stack {
        model.forward(&pixels, policy)?.1
    } else {
        model.image_embeds(&pixels, policy)?
    };
    // −Σ cos(image_i, target): the guidance loss.
    let norm = embeds.sqr()?.sum_keepdim(1)?.sqrt()?;
    let loss = embeds
        .broadcast_div(&norm)?
        .broadcast_mul(target)?
        .sum_all()?
        .neg()?;
    let grads = loss.backward()?;
    let Some(g) = grads.get(&var) else {
        candle_core::bail!("the gradient did not reach the pixels");
    };
    let gnorm = g.sqr()?.sum_all()?.sqrt()?.to_scalar::<f32>()?;
    drop(grads);
    let m = span.finish(env)?;
    Ok((m.activation_peak(env), m.seconds, m.device_peak, gnorm))
}

fn vit(width: usize, layers: usize, heads: usize, patch: usize, image: usize) -> ClipVisionConfig {
    // As in a `config.json`: the keys not given keep their defaults.
    serde_json::from_value(serde_json::json!({
        "hidden_size": width, "intermediate_size": 4 * width, "num_hidden_layers": layers,
        "num_attention_heads": heads, "patch_size": patch, "image_size": image
    }))
    .expect("a valid vision config")
}

fn main() -> Result<()> {
    // As the CLI does (see its doc: large temporaries reuse the heap).
    clipsculpt::autodiff::memory::keep_freed_pages();
    let env = BenchEnv::from_env()?;
    let dev = env.device.clone();
    let repeats = common::repeats("CLIP_BENCH_REPEATS")?;
    let full_stack = std::env::var("CLIP_BENCH_FULL_STACK").is_ok_and(|v| v == "1");
    // transformers' defaults are openai/clip-vit-base-patch32's vision tower
    // (<https://huggingface.co/openai/clip-vit-base-patch32/blob/main/config.json>).
    let (towers, n_images): (Vec<(&str, ClipVisionConfig, usize)>, usize) = match env.size {
        Size::Cpu => (vec![("ViT-B/32", ClipVisionConfig::default(), 512)], 8),
        Size::Gpu => (
            vec![
                ("ViT-B/16", vit(768, 12, 12, 16, 224), 512),
                ("ViT-L/14", vit(1024, 24, 16, 14, 224), 768),
            ],
            32,
        ),
        Size::Tiny => (vec![("tiny ViT", vit(32, 2, 4, 8, 32), 32)], 2),
    };
    println!("{}\n", env.describe()?);
    println!(
        "path: {}\n",
        if full_stack {
            "forward (whole last_hidden_state)"
        } else {
            "image_embeds (pooled: last layer for the class token only)"
        }
    );
    println!(
        "| tower | images | policy | peak activation bytes | peak | seconds | peak / none | time / none | device peak | ‖grad‖ |"
    );
    println!("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|");
    for (name, cfg, projection) in towers {
        let model = random_frozen_in(7, &dev, env.dtype(), |vb| {
            ClipVisionModelWithProjection::new(vb, &cfg, projection)
        })?;
        let mut rng = Rng::new(1);
        let side = cfg.image_size;
        let images = rng.uniform_tensor(&[n_images, 3, side, side], &dev)?;
        let target = rng.normal_tensor(&[1, projection], &dev)?;
        let target = target.broadcast_div(&target.sqr()?.sum_keepdim(1)?.sqrt()?)?;
        let mut base: Option<(usize, f64)> = None;
        for policy in [Policy::None, Policy::BLOCKS, Policy::Sqrt] {
            let (mut peak, mut secs, mut dpeak, mut gnorm) = (0usize, f64::INFINITY, 0u64, 0.0);
            for _ in 0..repeats.max(1) {
                let (p, s, d, g) = run(&env, &model, side, &images, &target, &policy, full_stack)?;
                peak = peak.max(p);
                secs = secs.min(s);
                dpeak = dpeak.max(d);
                gnorm = g;
            }
            let (bp, bs) = *base.get_or_insert((peak.max(1), secs));
            println!(
                "| {name} | {n_images} | {policy} | {peak} | {} | {secs:.3} | {:.1}% | {:.2}× | {} | {gnorm:.6} |",
                mib(peak),
                100.0 * peak as f64 / bp as f64,
                secs / bs,
                mib(dpeak as usize),
            );
        }
    }
    Ok(())
}
