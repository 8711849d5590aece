//! Render bench: forward + backward of one 64×64 view (64 coarse + 128 fine samples per ray)
//! through the real decoder geometry (1024×1024 latent, params projection to 256-wide weights,
//! 6 hidden layers) with random weights, with and without ray-chunk checkpointing. Prints a
//! markdown table: seconds, peak heap bytes above the loaded weights, and the ratio of each peak
//! to the unchecked one (measured in the same run). Never asserts timings.
//!
//! `cargo bench --bench render`
//!
//! Memory: the unchecked configuration keeps the whole graph of 4096 rays × 192 samples, about
//! 20 GiB of heap at its peak (measured 20385 MiB); the checkpointed ones stay near 1–3 GiB.
//! Make sure the machine has that much free before running it.
//!
//! Device-generic (`benches/common`): `CLIPSCULPT_DEVICE=cuda`, `CLIPSCULPT_DTYPE=bf16`;
//! `CLIPSCULPT_BENCH_SIZE=gpu` renders 2 views (8192 rays) with chunks of 4096 and 1024 and
//! unchecked, `tiny` is a smoke run. The device is synchronised around each timing; the peak
//! columns count bytes above the span's start on the bench's device (the CUDA pool on a GPU), and
//! "device peak" is the device's absolute high-water mark (weights included).

#[path = "common/mod.rs"]
mod common;

use std::collections::HashMap;

use candle_core::{Device, Result, Tensor, Var};
use candle_nn::VarBuilder;
use clipsculpt::autodiff::memory::{self, CountingAlloc};
use clipsculpt::autodiff::rng::Rng;
use clipsculpt::render::{render_views_with, Camera, RayDraws, RenderSettings};
use clipsculpt::shap_e::{Decoder, RendererConfig};
use common::{BenchEnv, Size};

#[global_allocator]
static A: CountingAlloc = CountingAlloc;

/// Random weights with the checkpoint's key names and shapes, scaled like a default init.
fn random_weights(
    cfg: &RendererConfig,
    rng: &mut Rng,
    dev: &Device,
) -> Result<HashMap<String, Tensor>> {
    let mut w = HashMap::new();
    let mut put = |k: String, shape: &[usize], scale: f64, offset: f64| -> Result<()> {
        let t = rng.normal_tensor(shape, dev)?.affine(scale, offset)?;
        w.insert(k, t);
        Ok(())
    };
    for (j, &(v, c)) in cfg.param_shapes.iter().enumerate() {
        let p = format!("params_proj.projections.nerstf__mlp__{j}__weight");
        put(
            format!("{p}.proj.weight"),
            &[v * c, cfg.d_latent],
            1.0 / (cfg.d_latent as f64).sqrt(),
            0.0,
        )?;
        put(format!("{p}.proj.bias"), &[v * c], 0.02, 0.0)?;
        put(
            format!("{p}.norm.weight"),
            &[c],
            0.1 / (c as f64).sqrt(),
            1.0 / (c as f64).sqrt(),
        )?;
        put(format!("{p}.norm.bias"), &[c], 0.02, 0.0)?;
    }
    for k in 0..=cfg.n_hidden_layers {
        let (out, inp) = cfg.layer_shape(k);
        if k >= cfg.param_names.len() {
            put(
                format!("mlp.mlp.{k}.weight"),
                &[out, inp],
                1.0 / (inp as f64).sqrt(),
                0.0,
            )?;
        }
        put(format!("mlp.mlp.{k}.bias"), &[out], 0.02, 0.0)?;
    }
    Ok(w)
}

struct Row {
    label: String,
    seconds: f64,
    peak: usize,
    device_peak: u64,
}

fn run(
    env: &BenchEnv,
    dec: &Decoder,
    latent: &Tensor,
    cams: &[Camera],
    s: &RenderSettings,
    draws: &RayDraws,
    label: &str,
) -> Result<Row> {
    let var = Var::from_tensor(latent)?;
    let (h, w) = (cams[0].height, cams[0].width);
    let c = Rng::new(7).normal_tensor(&[cams.len(), h, w, 3], latent.device())?;
    let span = env.start()?;
    let out = render_views_with(dec, var.as_tensor(), cams, s, draws)?;
    let loss = ((out.rgb * &c)?.sum_all()? + out.opacity.sum_all()?)?;
    let grads = loss.backward()?;
    let g = grads
        .get(&var)
        .map(|g| g.abs().and_then(|a| a.sum_all()))
        .transpose()?;
    drop(grads);
    let m = span.finish(env)?;
    if g.is_none() {
        candle_core::bail!("no gradient reached the latent");
    }
    Ok(Row {
        label: label.to_string(),
        seconds: m.seconds,
        peak: m.activation_peak(env),
        device_peak: m.device_peak,
    })
}

fn main() -> Result<()> {
    // As the CLI does (see its doc: large temporaries reuse the heap).
    clipsculpt::autodiff::memory::keep_freed_pages();
    let env = BenchEnv::from_env()?;
    let dev = env.device.clone();
    let (cfg_json, views, side, (n_coarse, n_fine), chunks) = match env.size {
        Size::Cpu => (serde_json::json!({}), 1, 64, (64, 128), vec![512usize, 256]),
        Size::Gpu => (serde_json::json!({}), 2, 64, (64, 128), vec![4096, 1024]),
        Size::Tiny => (
            serde_json::json!({
                "d_hidden": 8, "d_latent": 16,
                "param_shapes": [[8, 93], [8, 8], [8, 8], [8, 8]]
            }),
            1,
            8,
            (8, 8),
            vec![16],
        ),
    };
    let cfg: RendererConfig =
        serde_json::from_value(cfg_json).map_err(|e| candle_core::Error::Msg(e.to_string()))?;
    let mut rng = Rng::new(0);
    let weights = random_weights(&cfg, &mut rng, &dev)?;
    let dec = Decoder::new(VarBuilder::from_tensors(weights, env.dtype(), &dev), &cfg)?;
    let latent = rng
        .uniform_tensor(&[1, cfg.latent_rows(), cfg.d_latent], &dev)?
        .affine(2.0, -1.0)?;
    let cams: Vec<Camera> = (0..views)
        .map(|v| Camera::orbit(0.5 + v as f32 * 1.5, 0.4, 4.0, 0.7, side, side))
        .collect();
    let base = RenderSettings {
        n_coarse,
        n_fine,
        chunk_rays: None,
        background: None,
    };
    let draws = RayDraws::draw(&mut rng, views * side * side, &base, &dev)?;
    println!("{}", env.describe()?);
    println!("weights loaded: {}", memory::mib(memory::current()));
    let mut rows = Vec::new();
    for chunk in chunks {
        let s = RenderSettings {
            chunk_rays: Some(chunk),
            ..base.clone()
        };
        rows.push(run(
            &env,
            &dec,
            &latent,
            &cams,
            &s,
            &draws,
            &format!("ray chunks of {chunk}"),
        )?);
        eprintln!("done: chunks of {chunk}");
    }
    rows.push(run(
        &env,
        &dec,
        &latent,
        &cams,
        &base,
        &draws,
        "one graph (no checkpointing)",
    )?);
    let unchecked = rows[rows.len() - 1].peak.max(1);
    println!(
        "\n{views} view(s) of {side}×{side}, {n_coarse}+{n_fine} samples/ray, d_latent {}, MLP {} wide × {} hidden, forward+backward\n",
        cfg.d_latent, cfg.d_hidden, cfg.n_hidden_layers
    );
    println!(
        "| configuration | seconds | peak activation bytes | peak vs unchecked | device peak |"
    );
    println!("|---|---:|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} | {:.3} | {} ({}) | {:.1}% | {} |",
            r.label,
            r.seconds,
            r.peak,
            memory::mib(r.peak),
            100.0 * r.peak as f64 / unchecked as f64,
            memory::mib(r.device_peak as usize)
        );
    }
    Ok(())
}
