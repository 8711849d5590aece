//! One guidance step of workload `guide-cpu-v1`: the real decoder geometry (random weights,
//! latent 1024 × 1024, 256-wide MLP), one view of N×N rays with 64 stratified samples per ray
//! (jitter 0.5) in the [−1, 1]³ box, fine density/colour channels, composited over grey
//! backgrounds 0, 0.33, 0.66 and 1 (4 copies), bilinear resize to 224, the ViT-B/32 vision tower
//! (random weights) + projection, loss −mean cosine with a fixed random text embedding, backward
//! to the latent. Prints seconds and peak heap bytes per step with and without checkpointing
//! (ray chunks of 256 + every CLIP block), at 32×32 and 64×64 rays.
//!
//! Run: `cargo bench --bench guide`. `GUIDE_BENCH_RES=32` (comma list, default `32,64`),
//! `GUIDE_BENCH_CKPT=none|ckpt|both` (default both) and `GUIDE_BENCH_REPEATS=N` (default 1: the
//! fastest of N steps is reported) select the runs; the last column is the process's peak RSS
//! so far (`VmHWM`, weights included), which is per configuration when one runs per process
//! (as `benches/reference/compare.sh` does).

use std::time::Instant;

use candle_core::{Device, Result, Tensor, Var};
use clipsculpt::autodiff::checkpoint::Policy;
use clipsculpt::autodiff::memory::{mib, CountingAlloc, PeakMeter};
use clipsculpt::autodiff::rng::Rng;
use clipsculpt::clip::{
    preprocess, scorer::normalize, ClipVisionConfig, ClipVisionModelWithProjection,
};
use clipsculpt::render::{render_views_with, Camera, RayDraws, RenderSettings};
use clipsculpt::shap_e::{Decoder, RendererConfig};
use clipsculpt::toy::random::random_frozen;

#[global_allocator]
static A: CountingAlloc = CountingAlloc;

fn main() -> Result<()> {
    // As the CLI does (see its doc: large temporaries reuse the heap).
    clipsculpt::autodiff::memory::keep_freed_pages();
    let dev = Device::Cpu;
    let cfg: RendererConfig =
        serde_json::from_str("{}").map_err(|e| candle_core::Error::Msg(e.to_string()))?;
    let decoder = random_frozen(1, &dev, |vb| Decoder::new(vb, &cfg))?;
    // transformers' defaults are openai/clip-vit-base-patch32's vision tower.
    let vit_cfg = ClipVisionConfig::default();
    let vit = random_frozen(2, &dev, |vb| {
        ClipVisionModelWithProjection::new(vb, &vit_cfg, 512)
    })?;
    let mut rng = Rng::new(3);
    let latent0 = (rng.normal_tensor(&[1, 1024, 1024], &dev)? * 0.3)?.clamp(-1f32, 1f32)?;
    let text = normalize(&rng.normal_tensor(&[1, 512], &dev)?)?;

    println!("## guide-cpu-v1: one guidance step (forward + backward to the latent)\n");
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let resolutions: Vec<usize> = env("GUIDE_BENCH_RES")
        .unwrap_or_else(|| "32,64".into())
        .split(',')
        .map(|r| {
            r.trim()
                .parse()
                .expect("GUIDE_BENCH_RES: comma-separated sizes")
        })
        .collect();
    let ckpts: Vec<bool> = match env("GUIDE_BENCH_CKPT").as_deref() {
        None | Some("both") => vec![false, true],
        Some("none") => vec![false],
        Some("ckpt") => vec![true],
        Some(other) => panic!("GUIDE_BENCH_CKPT={other}: use none, ckpt or both"),
    };
    let repeats: usize = env("GUIDE_BENCH_REPEATS").map_or(1, |r| r.parse().expect("a count"));
    println!(
        "| rays | checkpointing | seconds / step | peak bytes | peak | vs unchecked | peak RSS |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|");
    for res in resolutions {
        let mut base = None;
        for &ckpt in &ckpts {
            let mut best: Option<(f64, usize)> = None;
            for _ in 0..repeats.max(1) {
                let z = Var::from_tensor(&latent0)?;
                let meter = PeakMeter::start();
                let t = Instant::now();
                let settings = RenderSettings {
                    n_coarse: 64,
                    n_fine: 0,
                    chunk_rays: ckpt.then_some(256),
                    background: Some([0.0, 0.0, 0.0]),
                };
                let rays = res * res;
                let draws = RayDraws {
                    coarse: Tensor::full(0.5f32, (rays, 64), &dev)?,
                    fine_index: Tensor::zeros((rays, 0), candle_core::DType::F32, &dev)?,
                    fine_offset: Tensor::zeros((rays, 0), candle_core::DType::F32, &dev)?,
                };
                let camera = Camera::orbit(0.6, 0.5, 4.0, 0.7, res, res);
                let view =
                    render_views_with(&decoder, z.as_tensor(), &[camera], &settings, &draws)?;
                let rgb = view.rgb.get(0)?.permute((2, 0, 1))?; // premultiplied over black
                let alpha = view.opacity.get(0)?.unsqueeze(0)?;
                let copies: Vec<Tensor> = [0.0, 0.33, 0.66, 1.0]
                    .iter()
                    .map(|&g| rgb.broadcast_add(&(alpha.affine(-1.0, 1.0)? * g)?))
                    .collect::<Result<_>>()?;
                let pixels = preprocess(&Tensor::stack(&copies, 0)?, 224)?;
                let policy = if ckpt { Policy::BLOCKS } else { Policy::None };
                let (_, emb) = vit.forward(&pixels, &policy)?;
                let loss = normalize(&emb)?.matmul(&text.t()?)?.mean_all()?.neg()?;
                let grads = loss.backward()?;
                let secs = t.elapsed().as_secs_f64();
                let peak = meter.peak_above_base();
                assert!(grads.get(&z).is_some(), "the gradient reaches the latent");
                drop(grads);
                best = Some(match best {
                    Some((s, p)) => (s.min(secs), p.max(peak)),
                    None => (secs, peak),
                });
            }
            let Some((secs, peak)) = best else { continue };
            let ratio = match base {
                None => {
                    base = Some(peak);
                    "100%".to_string()
                }
                Some(b) => format!("{:.1}%", 100.0 * peak as f64 / b as f64),
            };
            println!(
                "| {res}×{res} | {} | {secs:.2} | {peak} | {} | {ratio} | {} |",
                if ckpt {
                    "ray chunks 256 + CLIP blocks"
                } else {
                    "none"
                },
                mib(peak),
                peak_rss()
            );
        }
    }
    Ok(())
}

/// The process's peak resident set (`VmHWM` of `/proc/self/status`), or "?" where unavailable.
fn peak_rss() -> String {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
            let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(format!("{:.0} MiB", kib / 1024.0))
        })
        .unwrap_or_else(|| "?".into())
}
