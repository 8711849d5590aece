//! CLIP vision backward under checkpoint policies: ViT-B/32 geometry (width 768, 12 layers, 12 heads,
//! patch 32, image 224) with random weights, 8 images, forward + backward to the pixels.
//!
//! Prints one markdown row per policy: peak heap bytes above the loaded weights during forward +
//! backward (counting allocator), seconds, and both ratios to no checkpointing. Run with
//! `cargo bench --bench clip`; `CLIP_BENCH_REPEATS` (default 1) repeats each policy and keeps the
//! fastest time and the highest peak.

use std::time::Instant;

use candle_core::{Device, Result, Tensor, Var};
use clipsculpt::autodiff::checkpoint::Policy;
use clipsculpt::autodiff::memory::{mib, CountingAlloc, PeakMeter};
use clipsculpt::autodiff::rng::Rng;
use clipsculpt::clip::{preprocess, ClipVisionConfig, ClipVisionModelWithProjection};
use clipsculpt::toy::random::random_frozen;

#[global_allocator]
static A: CountingAlloc = CountingAlloc;

/// Frozen random weights (plain tensors, as loaded from safetensors), drawn from our seeded
/// generator with transformers' init.
fn random_tower(
    cfg: &ClipVisionConfig,
    projection: usize,
    dev: &Device,
) -> Result<ClipVisionModelWithProjection> {
    random_frozen(7, dev, |vb| {
        ClipVisionModelWithProjection::new(vb, cfg, projection)
    })
}

/// One forward + backward; returns (peak bytes above the start, seconds, ‖d loss/d images‖).
fn run(
    model: &ClipVisionModelWithProjection,
    images: &Tensor,
    target: &Tensor,
    policy: &Policy,
) -> Result<(usize, f64, f32)> {
    // The input images are a Var made before the meter starts: inputs are not activations.
    let var = Var::from_tensor(images)?;
    let meter = PeakMeter::start();
    let t0 = Instant::now();
    let pixels = preprocess(var.as_tensor(), 224)?;
    let (_, embeds) = model.forward(&pixels, policy)?;
    // −Σ cos(image_i, target): the guidance loss.
    let norm = embeds.sqr()?.sum_keepdim(1)?.sqrt()?;
    let loss = embeds
        .broadcast_div(&norm)?
        .broadcast_mul(target)?
        .sum_all()?
        .neg()?;
    let grads = loss.backward()?;
    let g = grads.get(&var).expect("the gradient reaches the pixels");
    let gnorm = g.sqr()?.sum_all()?.sqrt()?.to_scalar::<f32>()?;
    drop(grads);
    Ok((meter.peak_above_base(), t0.elapsed().as_secs_f64(), gnorm))
}

fn main() -> Result<()> {
    // As the CLI does (see its doc: large temporaries reuse the heap).
    clipsculpt::autodiff::memory::keep_freed_pages();
    let dev = Device::Cpu;
    let repeats: usize = std::env::var("CLIP_BENCH_REPEATS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1);
    // transformers' defaults are openai/clip-vit-base-patch32's vision tower
    // (<https://huggingface.co/openai/clip-vit-base-patch32/blob/main/config.json>).
    let cfg = ClipVisionConfig::default();
    let model = random_tower(&cfg, 512, &dev)?;
    let mut rng = Rng::new(1);
    let images = rng.uniform_tensor(&[8, 3, 224, 224], &dev)?;
    let target = rng.normal_tensor(&[1, 512], &dev)?;
    let target = target.broadcast_div(&target.sqr()?.sum_keepdim(1)?.sqrt()?)?;
    println!("CLIP vision forward+backward to pixels: ViT-B/32 geometry, 8 images at 224, {repeats} repeat(s)\n");
    println!(
        "| policy | peak activation bytes | peak | seconds | peak / none | time / none | ‖grad‖ |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    let mut base: Option<(usize, f64)> = None;
    for policy in [Policy::None, Policy::BLOCKS, Policy::Sqrt] {
        let (mut peak, mut secs, mut gnorm) = (0usize, f64::INFINITY, 0.0);
        for _ in 0..repeats.max(1) {
            let (p, s, g) = run(&model, &images, &target, &policy)?;
            peak = peak.max(p);
            secs = secs.min(s);
            gnorm = g;
        }
        let (bp, bs) = *base.get_or_insert((peak, secs));
        println!(
            "| {policy} | {peak} | {} | {secs:.2} | {:.1}% | {:.2}× | {gnorm:.6} |",
            mib(peak),
            100.0 * peak as f64 / bp as f64,
            secs / bs
        );
    }
    Ok(())
}
