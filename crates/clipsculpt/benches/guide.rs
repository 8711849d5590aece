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
//!
//! Device-generic (`benches/common`): `CLIPSCULPT_DEVICE=cuda`, `CLIPSCULPT_DTYPE=bf16`, and
//! `CLIPSCULPT_BENCH_SIZE=gpu` for the GPU workload: 4 views of 128×128 rays (`GUIDE_BENCH_RES`
//! still overrides), 64 stratified + 64 importance samples, ray chunks of 4096, the ViT-B/16 and
//! ViT-L/14 vision towers (checkpointed only unless `GUIDE_BENCH_CKPT` says otherwise;
//! `GUIDE_BENCH_VIEWS` overrides the views); `tiny` is a smoke run. The device is synchronised before the clock
//! starts and stops; the peak columns count bytes above the step's start on the bench's device
//! (the heap on the CPU, the CUDA pool on a GPU), and "device peak" is the device's absolute
//! high-water mark (weights included).

#[path = "common/mod.rs"]
mod common;

use candle_core::{Result, Var};
use clipsculpt::autodiff::memory::{mib, CountingAlloc};
use clipsculpt::autodiff::rng::Rng;
use clipsculpt::clip::{ClipVisionConfig, ClipVisionModelWithProjection};
use clipsculpt::random::random_frozen_in;
use clipsculpt::shap_e::{Decoder, RendererConfig};
use common::guide_step::{normalize, step};
use common::{BenchEnv, Size};

#[global_allocator]
static A: CountingAlloc = CountingAlloc;

fn json<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> Result<T> {
    serde_json::from_value(v).map_err(|e| candle_core::Error::Msg(e.to_string()))
}

/// A ViT vision config: (name, width, layers, heads, patch, image side, projection).
fn vit(
    name: &'static str,
    (width, layers, heads, patch, image, projection): (usize, usize, usize, usize, usize, usize),
) -> Result<(&'static str, ClipVisionConfig)> {
    Ok((
        name,
        json(serde_json::json!({
            "hidden_size": width, "intermediate_size": 4 * width, "projection_dim": projection,
            "num_hidden_layers": layers, "num_attention_heads": heads, "num_channels": 3,
            "image_size": image, "patch_size": patch, "hidden_act": "quick_gelu",
            "layer_norm_eps": 1e-5
        }))?,
    ))
}

/// The workload of a size: decoder config, ray resolutions, views, (coarse, fine) samples, ray
/// chunk, ViT towers.
type Workload = (
    RendererConfig,
    Vec<usize>,
    usize,
    (usize, usize),
    usize,
    Vec<(&'static str, ClipVisionConfig)>,
);

fn workload(size: Size) -> Result<Workload> {
    Ok(match size {
        // transformers' defaults are openai/clip-vit-base-patch32's vision tower.
        Size::Cpu => (
            json(serde_json::json!({}))?,
            vec![32, 64],
            1,
            (64, 0),
            256,
            vec![("ViT-B/32", ClipVisionConfig::default())],
        ),
        Size::Gpu => (
            json(serde_json::json!({}))?,
            vec![128],
            4,
            (64, 64),
            4096,
            vec![
                vit("ViT-B/16", (768, 12, 12, 16, 224, 512))?,
                vit("ViT-L/14", (1024, 24, 16, 14, 224, 768))?,
            ],
        ),
        Size::Tiny => (
            json(serde_json::json!({
                "d_hidden": 8, "d_latent": 16,
                "param_shapes": [[8, 93], [8, 8], [8, 8], [8, 8]]
            }))?,
            vec![8],
            1,
            (8, 8),
            16,
            vec![vit("tiny ViT", (32, 2, 4, 8, 32, 32))?],
        ),
    })
}

fn main() -> Result<()> {
    // As the CLI does (see its doc: large temporaries reuse the heap).
    clipsculpt::autodiff::memory::keep_freed_pages();
    let env = BenchEnv::from_env()?;
    let dev = env.device.clone();
    let (cfg, default_res, views, (n_coarse, n_fine), chunk, towers) = workload(env.size)?;
    let decoder = random_frozen_in(1, &dev, env.dtype(), |vb| Decoder::new(vb, &cfg))?;
    let mut rng = Rng::new(3);
    let latent0 = (rng.normal_tensor(&[1, cfg.latent_rows(), cfg.d_latent], &dev)? * 0.3)?
        .clamp(-1f32, 1f32)?;

    println!("## guide-cpu-v1: one guidance step (forward + backward to the latent)\n");
    println!("{}\n", env.describe()?);
    let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    let resolutions: Vec<usize> = match var("GUIDE_BENCH_RES") {
        None => default_res,
        Some(list) => list
            .split(',')
            .map(|r| {
                r.trim().parse().map_err(|_| {
                    candle_core::Error::Msg(format!(
                        "GUIDE_BENCH_RES={list}: comma-separated sizes"
                    ))
                })
            })
            .collect::<Result<_>>()?,
    };
    let views = match var("GUIDE_BENCH_VIEWS") {
        None => views,
        Some(v) => v
            .parse()
            .map_err(|_| candle_core::Error::Msg(format!("GUIDE_BENCH_VIEWS={v}: a count")))?,
    };
    let ckpts: Vec<bool> = match var("GUIDE_BENCH_CKPT").as_deref() {
        // Unchecked, the GPU workload's graph (65536 rays × 128 samples × 256 wide × 7 layers)
        // would need hundreds of GiB: only checkpointed unless asked.
        None if env.size == Size::Gpu => vec![true],
        None | Some("both") => vec![false, true],
        Some("none") => vec![false],
        Some("ckpt") => vec![true],
        Some(other) => candle_core::bail!("GUIDE_BENCH_CKPT={other}: use none, ckpt or both"),
    };
    let repeats = common::repeats("GUIDE_BENCH_REPEATS")?;
    println!(
        "| CLIP | rays | checkpointing | seconds / step | peak bytes | peak | vs unchecked | device peak | peak RSS |"
    );
    println!("|---|---|---|---:|---:|---:|---:|---:|---:|");
    for (tower, vit_cfg) in &towers {
        let projection = vit_cfg.projection_dim;
        let vit = random_frozen_in(2, &dev, env.dtype(), |vb| {
            ClipVisionModelWithProjection::new(vb, vit_cfg, projection)
        })?;
        let text = normalize(&rng.normal_tensor(&[1, projection], &dev)?)?;
        for &res in &resolutions {
            let mut base = None;
            for &ckpt in &ckpts {
                let mut best: Option<(f64, usize, u64)> = None;
                for _ in 0..repeats.max(1) {
                    let z = Var::from_tensor(&latent0)?;
                    let span = env.start()?;
                    step(
                        &decoder,
                        (&vit, vit_cfg.image_size),
                        &text,
                        &z,
                        (res, views),
                        (n_coarse, n_fine),
                        ckpt.then_some(chunk),
                        &dev,
                    )?;
                    let m = span.finish(&env)?;
                    best = Some(match best {
                        Some((s, p, d)) => (
                            s.min(m.seconds),
                            p.max(m.activation_peak(&env)),
                            d.max(m.device_peak),
                        ),
                        None => (m.seconds, m.activation_peak(&env), m.device_peak),
                    });
                }
                let Some((secs, peak, device_peak)) = best else {
                    continue;
                };
                let ratio = match base {
                    None => {
                        base = Some(peak.max(1));
                        "100%".to_string()
                    }
                    Some(b) => format!("{:.1}%", 100.0 * peak as f64 / b as f64),
                };
                println!(
                    "| {tower} | {views}×{res}×{res} | {} | {secs:.3} | {peak} | {} | {ratio} | {} | {} |",
                    if ckpt {
                        format!("ray chunks {chunk} + CLIP blocks")
                    } else {
                        "none".to_string()
                    },
                    mib(peak),
                    mib(device_peak as usize),
                    peak_rss()
                );
            }
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
