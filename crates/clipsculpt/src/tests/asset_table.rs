//! The measurements of `docs/mesh.md`, "Measured on the toy": for each toy prompt (seed 0, default settings), the
//! full vertex-coloured mesh against simplified, textured and smoothed assets: faces, GLB size, asset time, IoU
//! against the full mesh, mean pixel difference of the mesh renders (the preview's 8 views) and the scoring
//! CLIP's cosine of those renders with the prompt. Ignored in CI (a few minutes):
//!
//! `CLIPSCULPT_ASSET_IMAGES=docs/images cargo test -p clipsculpt --lib asset_table -- --ignored --nocapture`

use std::time::Instant;

use candle_core::{Device, Tensor};

use crate::autodiff::checkpoint::Policy;
use crate::device::Precision;
use crate::mesh::asset::build;
use crate::mesh::glb::to_glb;
use crate::mesh::preview::contact_sheet;
use crate::mesh::raster::{render, View};
use crate::mesh::{
    marching_cubes, sample_colours, sample_grid, Asset, AssetOptions, Bounds, Field, FnField,
    McOptions, Mesh,
};
use crate::models::HubOptions;
use crate::pipeline::{generate, LatentField, Models, RunContext, RunSettings};
use crate::shap_e::load_latent;

const PROMPTS: [&str; 3] = ["a red cube", "a green sphere", "a yellow torus"];
/// Voxels per axis of the IoU.
const VOXELS: usize = 96;
/// Pixels a side of each scored view.
const TILE: u32 = 128;

fn configs() -> Vec<(String, AssetOptions)> {
    let raw = AssetOptions::RAW;
    let mut v = vec![("full".to_string(), raw)];
    for faces in [20_000, 5_000, 2_000, 500] {
        for texture in [None, Some(1024)] {
            let name = match texture {
                None => format!("{faces}"),
                Some(t) => format!("{faces} + {t}² texture"),
            };
            v.push((
                name,
                AssetOptions {
                    faces: Some(faces),
                    texture,
                    ..raw
                },
            ));
        }
    }
    for smooth in [5, 20] {
        v.push((
            format!("full, smooth {smooth}"),
            AssetOptions { smooth, ..raw },
        ));
    }
    v
}

#[test]
#[ignore = "measurements for docs/mesh.md (a few minutes)"]
fn asset_table() -> anyhow::Result<()> {
    let device = Device::Cpu;
    let settings = RunSettings {
        formats: vec![],
        ..RunSettings::default()
    };
    let models = Models::load_choice(
        &settings.models,
        &device,
        Precision::default_for(&device),
        &HubOptions::default(),
    )?;
    let images = std::env::var_os("CLIPSCULPT_ASSET_IMAGES").map(std::path::PathBuf::from);
    println!(
        "| prompt | asset | faces | GLB KiB | asset s | IoU vs full | pixel diff | CLIP cos |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|");
    for prompt in PROMPTS {
        let dir = tempfile::tempdir()?;
        generate(
            &RunContext::new(&models, &settings, &device),
            prompt,
            dir.path(),
            |_| {},
        )?;
        let z = load_latent(&dir.path().join("latent.safetensors"), &device)?;
        let field = LatentField::new(&models.shap_e.decoder, &z)?;
        let save = images.as_deref().filter(|_| prompt == "a red cube");
        rows(
            &models,
            prompt,
            &field,
            settings.grid,
            save.map(|d| (d, "asset")),
        )?;
    }
    // Colour detail the toy's objects lack: red and white stripes 0.1 apart on an analytic ball.
    let stripes = FnField(|p: [f32; 3]| {
        let red = (p[2] * 31.4).sin() > 0.0;
        let c = if red {
            [0.8, 0.02, 0.02]
        } else {
            [0.9, 0.9, 0.9]
        };
        (crate::mesh::shapes::sphere(p, [0.0; 3], 0.7), c)
    });
    let save = images.as_deref().map(|d| (d, "stripes"));
    rows(
        &models,
        "a red and white striped ball",
        &stripes,
        settings.grid,
        save,
    )?;
    Ok(())
}

/// The table's rows for one field: the full mesh, then every config against it.
fn rows(
    models: &Models,
    prompt: &str,
    field: &dyn Field,
    grid_size: usize,
    images: Option<(&std::path::Path, &str)>,
) -> anyhow::Result<()> {
    let device = Device::Cpu;
    let grid = sample_grid(field, &device, grid_size, Bounds::SHAP_E, 32_768)?;
    let mut full = marching_cubes(&grid, &McOptions::default())?;
    full.colours = sample_colours(field, &device, &full.positions, 32_768)?;
    let text = models.scorer.embed_texts(&[prompt])?;
    let mut reference: Option<(Vec<bool>, image::RgbImage)> = None;
    for (name, opts) in configs() {
        let t = Instant::now();
        let (asset, _) = build(full.clone(), field, &device, &opts, 32_768)?;
        let secs = t.elapsed().as_secs_f64();
        let glb = to_glb(&asset.mesh, asset.texture.as_ref(), "mesh")?.len();
        let voxels = voxelise(&asset.mesh);
        let sheet = contact_sheet(&asset, TILE);
        let (iou, diff) = match &reference {
            Some((v, s)) => (iou(v, &voxels), pixel_diff(s, &sheet)),
            None => (1.0, 0.0),
        };
        let cos = clip_cosine(models, &asset, &text, &device)?;
        println!(
            "| {prompt} | {name} | {} | {:.0} | {secs:.2} | {iou:.4} | {diff:.4} | {cos:.4} |",
            asset.mesh.faces.len(),
            glb as f64 / 1024.0
        );
        // Pictures for docs/mesh.md: the cube full and textured, the striped ball at 2000 faces without and with.
        let file = match (images.map(|i| i.1), name.as_str()) {
            (Some("asset"), "full") => Some("full"),
            (Some("stripes"), "2000") => Some("2000"),
            (Some(_), "2000 + 1024² texture") => Some("2000-textured"),
            _ => None,
        };
        if let (Some((dir, prefix)), Some(f)) = (images, file) {
            let img = render(&asset.mesh, asset.texture.as_ref(), front(), 384);
            img.save(dir.join(format!("{prefix}-{f}.png")))?;
        }
        if reference.is_none() {
            reference = Some((voxels, sheet));
        }
    }
    Ok(())
}

fn front() -> View {
    View {
        azimuth: 0.6,
        elevation: crate::mesh::preview::ELEVATION,
    }
}

/// Mean of the scoring CLIP's cosine with `text` over the 8 turntable views.
fn clip_cosine(
    models: &Models,
    asset: &Asset,
    text: &Tensor,
    device: &Device,
) -> anyhow::Result<f32> {
    let sheet = contact_sheet(asset, TILE);
    let mut sum = 0.0;
    for k in 0..8u32 {
        let tile = image::imageops::crop_imm(&sheet, (k % 4) * TILE, (k / 4) * TILE, TILE, TILE)
            .to_image();
        let data: Vec<f32> = (0..3)
            .flat_map(|c| tile.pixels().map(move |p| f32::from(p.0[c]) / 255.0))
            .collect();
        let x = Tensor::from_vec(data, (1, 3, TILE as usize, TILE as usize), device)?;
        let e = models.scorer.embed_images(&x, &Policy::None)?;
        sum += e.matmul(&text.t()?)?.flatten_all()?.to_vec1::<f32>()?[0];
    }
    Ok(sum / 8.0)
}

/// Inside voxels of the field's [−1, 1]³ box by parity along +z columns.
fn voxelise(mesh: &Mesh) -> Vec<bool> {
    let n = VOXELS;
    let step = 2.0 / n as f32;
    let centre = |i: usize| -1.0 + (i as f32 + 0.5) * step + 1.3e-5;
    let mut hits: Vec<Vec<f32>> = vec![Vec::new(); n * n];
    for t in &mesh.faces {
        let [a, b, c] = t.map(|i| mesh.positions[i as usize]);
        let cell = |x: f32| ((x + 1.0) / step - 0.5).clamp(0.0, (n - 1) as f32);
        let (x0, x1) = (
            cell(a[0].min(b[0]).min(c[0])).floor() as usize,
            cell(a[0].max(b[0]).max(c[0])).ceil() as usize,
        );
        let (y0, y1) = (
            cell(a[1].min(b[1]).min(c[1])).floor() as usize,
            cell(a[1].max(b[1]).max(c[1])).ceil() as usize,
        );
        let area = (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0]);
        if area == 0.0 {
            continue;
        }
        for i in x0..=x1 {
            for j in y0..=y1 {
                let p = [centre(i), centre(j)];
                let w = |u: [f32; 3], v: [f32; 3]| {
                    ((v[0] - u[0]) * (p[1] - u[1]) - (v[1] - u[1]) * (p[0] - u[0])) / area
                };
                let (wa, wb, wc) = (w(b, c), w(c, a), w(a, b));
                if wa >= 0.0 && wb >= 0.0 && wc >= 0.0 {
                    hits[j * n + i].push(wa * a[2] + wb * b[2] + wc * c[2]);
                }
            }
        }
    }
    let mut inside = vec![false; n * n * n];
    for (col, zs) in hits.iter_mut().enumerate() {
        zs.sort_by(f32::total_cmp);
        for pair in zs.chunks_exact(2) {
            for k in 0..n {
                let z = centre(k);
                if z > pair[0] && z < pair[1] {
                    inside[k * n * n + col] = true;
                }
            }
        }
    }
    inside
}

fn iou(a: &[bool], b: &[bool]) -> f64 {
    let both = a.iter().zip(b).filter(|(x, y)| **x && **y).count();
    let either = a.iter().zip(b).filter(|(x, y)| **x || **y).count();
    both as f64 / either.max(1) as f64
}

/// Mean absolute difference of two renders, per channel, in [0, 1].
fn pixel_diff(a: &image::RgbImage, b: &image::RgbImage) -> f64 {
    let sum: u64 = a
        .as_raw()
        .iter()
        .zip(b.as_raw())
        .map(|(x, y)| u64::from(x.abs_diff(*y)))
        .sum();
    sum as f64 / a.as_raw().len() as f64 / 255.0
}
