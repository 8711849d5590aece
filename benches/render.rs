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

use std::collections::HashMap;
use std::time::Instant;

use candle_core::{DType, Device, Result, Tensor, Var};
use candle_nn::VarBuilder;
use clipsculpt::autodiff::memory::{self, CountingAlloc, PeakMeter};
use clipsculpt::autodiff::rng::Rng;
use clipsculpt::render::{render_views_with, Camera, RayDraws, RenderSettings};
use clipsculpt::shap_e::{Decoder, RendererConfig};

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
}

fn run(
    dec: &Decoder,
    latent: &Tensor,
    cam: &Camera,
    s: &RenderSettings,
    draws: &RayDraws,
    label: &str,
) -> Result<Row> {
    let var = Var::from_tensor(latent)?;
    let c = Rng::new(7).normal_tensor(&[1, cam.height, cam.width, 3], latent.device())?;
    let meter = PeakMeter::start();
    let start = Instant::now();
    let out = render_views_with(dec, var.as_tensor(), std::slice::from_ref(cam), s, draws)?;
    let loss = ((out.rgb * &c)?.sum_all()? + out.opacity.sum_all()?)?;
    let grads = loss.backward()?;
    let g = grads
        .get(&var)
        .map(|g| g.abs().and_then(|a| a.sum_all()))
        .transpose()?;
    let seconds = start.elapsed().as_secs_f64();
    let peak = meter.peak_above_base();
    drop(grads);
    if g.is_none() {
        candle_core::bail!("no gradient reached the latent");
    }
    Ok(Row {
        label: label.to_string(),
        seconds,
        peak,
    })
}

fn main() -> Result<()> {
    // As the CLI does (see its doc: large temporaries reuse the heap).
    clipsculpt::autodiff::memory::keep_freed_pages();
    let dev = Device::Cpu;
    let cfg: RendererConfig =
        serde_json::from_str("{}").map_err(|e| candle_core::Error::Msg(e.to_string()))?;
    let mut rng = Rng::new(0);
    let weights = random_weights(&cfg, &mut rng, &dev)?;
    let dec = Decoder::new(VarBuilder::from_tensors(weights, DType::F32, &dev), &cfg)?;
    let latent = rng
        .uniform_tensor(&[1, cfg.latent_rows(), cfg.d_latent], &dev)?
        .affine(2.0, -1.0)?;
    let cam = Camera::orbit(0.5, 0.4, 4.0, 0.7, 64, 64);
    let base = RenderSettings {
        n_coarse: 64,
        n_fine: 128,
        chunk_rays: None,
        background: None,
    };
    let draws = RayDraws::draw(&mut rng, 64 * 64, &base, &dev)?;
    println!("weights loaded: {}", memory::mib(memory::current()));
    let mut rows = Vec::new();
    for chunk in [512usize, 256] {
        let s = RenderSettings {
            chunk_rays: Some(chunk),
            ..base.clone()
        };
        rows.push(run(
            &dec,
            &latent,
            &cam,
            &s,
            &draws,
            &format!("ray chunks of {chunk}"),
        )?);
        eprintln!("done: chunks of {chunk}");
    }
    rows.push(run(
        &dec,
        &latent,
        &cam,
        &base,
        &draws,
        "one graph (no checkpointing)",
    )?);
    let unchecked = rows[rows.len() - 1].peak.max(1);
    println!("\n64×64 view, 64+128 samples/ray, d_latent 1024, MLP 256 wide × 6 hidden, forward+backward\n");
    println!("| configuration | seconds | peak activation bytes | peak vs unchecked |");
    println!("|---|---:|---:|---:|");
    for r in &rows {
        println!(
            "| {} | {:.2} | {} ({}) | {:.1}% |",
            r.label,
            r.seconds,
            r.peak,
            memory::mib(r.peak),
            100.0 * r.peak as f64 / unchecked as f64
        );
    }
    Ok(())
}
