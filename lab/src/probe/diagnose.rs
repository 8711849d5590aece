//! Why guidance does or does not fix the prior's held-out samples (toy world).
//!
//! `cargo bench --bench diagnose [-- --seeds N]` (`TOY_DIR=DIR` for another toy world) prints,
//! for each held-out combination and seed:
//! - the scoring CLIP's fixed-view cosine of the prior sample and of the fitted latent of the
//!   right object, and the rank of the true caption among all 36 for both;
//! - the cosine and the caption rank along the straight line from the prior sample to the fitted
//!   latent (is there a barrier?);
//! - how much a step along the cosine's gradient changes the shape (occupancy) and the colour of
//!   the decoded field, compared with a step of the same length toward the fitted latent.
//!
//! `-- --reach` prints only how much of a push of the sampler state toward the right object the
//! finished latent keeps, by noise level ([`super::reach`]).
//!
//! `-- --seed-spread` prints only how the prior's plain samples vary with the seed and which
//! fitted latent each lies nearest (every caption, `--seeds N` seeds each).
//!
//! `-- --fitted-only` prints only the first table (the fitted latents). `-- --clip` adds, and
//! `-- --clip-only` prints only, how well the scoring CLIP itself recognises ground-truth renders
//! of the analytic objects (random views, each held-aside background): top-1 caption, shape and
//! colour, the shape confusion matrix, and how often its caption ranks a clean object above a
//! blend of it with another shape.

use std::path::Path;

use crate::blend::Blend;
use crate::fitted::Fitted;
use crate::render::{random_camera, render_object, DensityModel};
use crate::split::held_out_split;
use crate::{caption, classify, is_held_out, world::combinations, Shape, WorldObject, HELD_OUT};
use anyhow::Result;
use candle_core::{Device, Tensor, Var, D};
use clipsculpt::autodiff::checkpoint::Policy;
use clipsculpt::autodiff::rng::Rng;
use clipsculpt::guide::{held_aside_images, GuideSettings};
use clipsculpt::pipeline::extract_mesh;
use clipsculpt::pipeline::{Models, RunSettings};

/// Mean over the held-aside images (4 fixed views) of the cosine to every
/// caption `(36)`, differentiable in `z`.
fn caption_cosines(models: &Models, texts: &Tensor, z: &Tensor) -> Result<Tensor> {
    let res = models.scorer.image_size().max(32);
    let images = held_aside_images(&models.shap_e.decoder, z, res)?;
    let emb = models.scorer.embed_images(&images, &Policy::None)?;
    Ok(emb.matmul(&texts.t()?)?.mean(0)?)
}

fn rank_of(cos: &[f32], i: usize) -> usize {
    1 + cos.iter().filter(|&&c| c > cos[i]).count()
}

/// RMS change of the occupancy (sdf > 0 as a soft step) and of the colour inside, between two latents.
fn field_change(models: &Models, a: &Tensor, b: &Tensor, points: &Tensor) -> Result<(f32, f32)> {
    let dec = &models.shap_e.decoder;
    let (sa, ca) = dec.query_field(a, points)?;
    let (sb, cb) = dec.query_field(b, points)?;
    let occ = |s: &Tensor| -> Result<Tensor> { Ok(candle_nn::ops::sigmoid(&(s * 8.0)?)?) };
    let docc = (occ(&sa)? - occ(&sb)?)?.sqr()?.mean_all()?.sqrt()?;
    let inside = occ(&sa)?.maximum(&occ(&sb)?)?.unsqueeze(1)?;
    let dcol = ((ca - cb)?.broadcast_mul(&inside)?.sqr()?.sum_all()?
        / (inside.sum_all()?.to_scalar::<f32>()? as f64 * 3.0 + 1e-6))?
        .sqrt()?;
    Ok((docc.to_scalar()?, dcol.to_scalar()?))
}

/// White, mid-grey and black: the held-aside views' background and two that show white objects.
const BACKGROUNDS: [[f32; 3]; 3] = [[1.0; 3], [0.5; 3], [0.0; 3]];

/// The scoring CLIP on renders of the true objects (analytic fields, 8 random variations and
/// cameras per combination), scored like the held-aside images: top-1 caption, shape and colour
/// among the 36 captions, per background of [`BACKGROUNDS`].
fn clip_on_ground_truth(
    models: &Models,
    texts: &Tensor,
    caps: &[String],
    dev: &Device,
) -> Result<()> {
    let combos = combinations();
    let res = models.scorer.image_size().max(32);
    let density = DensityModel {
        sharpness: 8.0,
        density: 20.0,
    };
    let mut rng = Rng::new(77);
    let mut right = [[0usize; 3]; 3]; // [background][caption, shape, colour]
    let mut held_right = [0usize; 3];
    let mut total = 0usize;
    let mut held_total = 0usize;
    let mut confusion = [[0usize; 6]; 6]; // [true shape][CLIP's shape], all backgrounds
    for (i, &(shape, colour)) in combos.iter().enumerate() {
        for _ in 0..8 {
            let obj = WorldObject::random(shape, colour, &mut rng);
            let cam = random_camera(res, &mut rng);
            let v = render_object(&obj, &cam, 64, density, &mut rng, dev)?;
            let clear = v.alpha.affine(-1.0, 1.0)?;
            for (b, bg) in BACKGROUNDS.iter().enumerate() {
                let bg = Tensor::new(bg, dev)?.reshape((3, 1, 1))?;
                let img = v
                    .rgb
                    .broadcast_add(&clear.broadcast_mul(&bg)?)?
                    .unsqueeze(0)?;
                let emb = models.scorer.embed_images(&img, &Policy::None)?;
                let best = emb
                    .matmul(&texts.t()?)?
                    .squeeze(0)?
                    .argmax(D::Minus1)?
                    .to_scalar::<u32>()? as usize;
                let (bs, bc) = combos[best];
                confusion[shape as usize][bs as usize] += 1;
                let hits = [best == i, bs == shape, bc == colour];
                for k in 0..3 {
                    right[b][k] += hits[k] as usize;
                    if is_held_out(shape, colour) {
                        held_right[k] += hits[k] as usize;
                    }
                }
            }
            total += 1;
            if is_held_out(shape, colour) {
                held_total += 3;
            }
        }
    }
    let _ = caps;
    println!(
        "## Scoring CLIP on ground-truth renders (8 random views per combination, top-1 of 36)\n"
    );
    println!("| background | caption | shape | colour |\n|---|---:|---:|---:|");
    for (b, name) in ["white", "grey", "black"].iter().enumerate() {
        let pct = |k: usize| 100.0 * right[b][k] as f64 / total as f64;
        println!(
            "| {name} | {:.1} % | {:.1} % | {:.1} % |",
            pct(0),
            pct(1),
            pct(2)
        );
    }
    let pct = |k: usize| 100.0 * held_right[k] as f64 / held_total.max(1) as f64;
    println!(
        "| held-out combinations, all backgrounds | {:.1} % | {:.1} % | {:.1} % |\n",
        pct(0),
        pct(1),
        pct(2)
    );
    let names: Vec<&str> = Shape::ALL.iter().map(|s| s.name()).collect();
    println!("Shape confusion (rows: true shape, columns: the shape of CLIP's top caption):\n");
    println!("| | {} |\n|---|{}", names.join(" | "), "---:|".repeat(6));
    for (r, row) in confusion.iter().enumerate() {
        let cells: Vec<String> = row.iter().map(|c| c.to_string()).collect();
        println!("| {} | {} |", names[r], cells.join(" | "));
    }
    println!();
    Ok(())
}

/// How often the scoring CLIP ranks a clean object above a blend of it with another shape
/// ([`crate::blend`]) under the object's own caption: 8 random objects per combination, each
/// pair seen by one camera, per background of [`BACKGROUNDS`].
fn clip_prefers_clean(models: &Models, texts: &Tensor, dev: &Device) -> Result<()> {
    let res = models.scorer.image_size().max(32);
    let density = DensityModel {
        sharpness: 8.0,
        density: 20.0,
    };
    let mut rng = Rng::new(78);
    let (mut right, mut held_right) = ([0usize; 3], 0usize);
    let (mut total, mut held_total) = (0usize, 0usize);
    for (i, &(shape, colour)) in combinations().iter().enumerate() {
        let text = texts.narrow(0, i, 1)?;
        for _ in 0..8 {
            let obj = WorldObject::random(shape, colour, &mut rng);
            let blend = Blend::random(obj, &mut rng);
            let cam = random_camera(res, &mut rng);
            let views = [
                render_object(&obj, &cam, 64, density, &mut rng, dev)?,
                render_object(&blend, &cam, 64, density, &mut rng, dev)?,
            ];
            for (b, bg) in BACKGROUNDS.iter().enumerate() {
                let bg = Tensor::new(bg, dev)?.reshape((3, 1, 1))?;
                let images = views
                    .iter()
                    .map(|v| {
                        v.rgb
                            .broadcast_add(&v.alpha.affine(-1.0, 1.0)?.broadcast_mul(&bg)?)
                    })
                    .collect::<candle_core::Result<Vec<_>>>()?;
                let emb = models
                    .scorer
                    .embed_images(&Tensor::stack(&images, 0)?, &Policy::None)?;
                let cos = emb.matmul(&text.t()?)?.flatten_all()?.to_vec1::<f32>()?;
                let win = (cos[0] > cos[1]) as usize;
                right[b] += win;
                if is_held_out(shape, colour) {
                    held_right += win;
                    held_total += 1;
                }
            }
            total += 1;
        }
    }
    println!(
        "## Scoring CLIP: clean object above a blend with another shape, own caption
"
    );
    println!("| background | clean above blend |\n|---|---:|");
    for (b, name) in ["white", "grey", "black"].iter().enumerate() {
        println!(
            "| {name} | {:.1} % |",
            100.0 * right[b] as f64 / total as f64
        );
    }
    println!(
        "| held-out combinations, all backgrounds | {:.1} % |\n",
        100.0 * held_right as f64 / held_total.max(1) as f64
    );
    Ok(())
}

/// What every table of the diagnosis reads.
struct Setup {
    models: Models,
    texts: Tensor,
    caps: Vec<String>,
    combos: Vec<(Shape, crate::Colour)>,
    fitted: Tensor,
    dev: Device,
}

/// The probe, with the bench's command-line arguments `args` (see the module docs).
pub fn diagnose(args: &[String]) -> Result<()> {
    let seeds: u64 = args
        .iter()
        .position(|a| a == "--seeds")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let dev = Device::Cpu;
    let root = std::env::var("TOY_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| Path::new(env!("CARGO_MANIFEST_DIR")).join("../assets/toy"));
    let models = Models::load(&root.join("shap_e"), &root.join("clip"), &dev)?;
    let Fitted { all, per_combo } = Fitted::load(&root.join("latents.safetensors"), &dev)?;
    let combos = combinations();
    if args.iter().any(|a| a == "--seed-spread") {
        text_separation(&models, &dev)?;
        return seed_spread(&models, &all, per_combo, seeds, &dev);
    }
    if args.iter().any(|a| a == "--reach") {
        let held_out = held_out_split(&root.join("shap_e")).map_err(anyhow::Error::msg)?;
        let run = RunSettings::for_evaluation(GuideSettings::default());
        return super::reach::reach_table(
            &models, &held_out, &combos, &all, per_combo, &run, seeds, &dev,
        );
    }
    // The first instance of each combination.
    let first: Vec<u32> = (0..combos.len()).map(|i| (i * per_combo) as u32).collect();
    let fitted = all.index_select(&Tensor::new(first.as_slice(), &dev)?, 0)?;
    let caps: Vec<String> = combos.iter().map(|&(s, c)| caption(s, c)).collect();
    let refs: Vec<&str> = caps.iter().map(|s| s.as_str()).collect();
    let texts = models.scorer.embed_texts(&refs)?;
    let run = RunSettings::for_evaluation(GuideSettings::default());
    let points = Rng::new(9)
        .uniform_tensor(&[4096, 3], &dev)?
        .affine(2.0, -1.0)?;
    if args.iter().any(|a| a == "--clip-only") || args.iter().any(|a| a == "--clip") {
        clip_on_ground_truth(&models, &texts, &caps, &dev)?;
        clip_prefers_clean(&models, &texts, &dev)?;
        if args.iter().any(|a| a == "--clip-only") {
            return Ok(());
        }
    }
    let s = Setup {
        models,
        texts,
        caps,
        combos,
        fitted,
        dev,
    };
    let matrix = fitted_table(&s)?;
    held_out_preferences(&s, &matrix);
    if args.iter().any(|a| a == "--fitted-only") {
        return Ok(());
    }
    line_table(&s, &run, &points, seeds)
}

/// How far apart the text towers put each held-out caption from the seen ones: the cosine of
/// its embedding with the nearest seen caption's, for the prior's conditioning and for the scorer.
fn text_separation(models: &Models, dev: &Device) -> Result<()> {
    let combos = combinations();
    let caps: Vec<String> = combos.iter().map(|&(s, c)| caption(s, c)).collect();
    let refs: Vec<&str> = caps.iter().map(String::as_str).collect();
    let unit = |t: Tensor| -> Result<Tensor> {
        Ok(t.broadcast_div(&t.sqr()?.sum_keepdim(D::Minus1)?.sqrt()?)?)
    };
    let prior = unit(Tensor::cat(
        &refs
            .iter()
            .map(|p| models.text_embeds(p, dev))
            .collect::<std::result::Result<Vec<_>, _>>()?,
        0,
    )?)?;
    let scorer = unit(models.scorer.embed_texts(&refs)?)?;
    println!("## Held-out captions against the nearest seen caption (cosine)\n\n| caption | prior's text encoder | scoring CLIP |\n|---|---|---|");
    for (i, &(shape, colour)) in combos.iter().enumerate() {
        if !is_held_out(shape, colour) {
            continue;
        }
        let nearest = |e: &Tensor| -> Result<String> {
            let cos = e
                .matmul(&e.get(i)?.unsqueeze(1)?)?
                .squeeze(1)?
                .to_vec1::<f32>()?;
            let j = (0..cos.len())
                .filter(|&j| !is_held_out(combos[j].0, combos[j].1))
                .max_by(|&a, &b| cos[a].total_cmp(&cos[b]))
                .unwrap_or(0);
            Ok(format!("{} {:.4}", caps[j], cos[j]))
        };
        println!(
            "| {} | {} | {} |",
            caps[i],
            nearest(&prior)?,
            nearest(&scorer)?
        );
    }
    println!();
    Ok(())
}

/// RMS distance between two latents.
fn rms_distance(a: &Tensor, b: &Tensor) -> Result<f32> {
    Ok((a - b)?.sqr()?.mean_all()?.sqrt()?.to_scalar()?)
}

/// Mean RMS distance over every pair of `latents` (0 with fewer than two).
fn mean_pairwise_distance(latents: &[Tensor]) -> Result<f32> {
    let (mut sum, mut count) = (0.0f32, 0usize);
    for a in 0..latents.len() {
        for b in a + 1..latents.len() {
            sum += rms_distance(&latents[a], &latents[b])?;
            count += 1;
        }
    }
    Ok(sum / count.max(1) as f32)
}

/// How the prior's plain samples (64 steps, the world's guidance scale) depend on the seed: per
/// caption, the mean RMS distance between its seeds' samples and the combination whose fitted
/// latent (any instance) lies nearest each sample; then the mean spread within a caption against
/// the mean distance between captions (seed 0), and how many held-out and seen samples lie
/// nearest their own combination.
fn seed_spread(
    models: &Models,
    fitted: &Tensor,
    per_combo: usize,
    seeds: u64,
    dev: &Device,
) -> Result<()> {
    let combos = combinations();
    println!("## Prior samples by seed ({seeds} seeds, 64 steps)\n\n| caption | held out | spread between seeds | to own fitted (seed 0) | nearest fitted combination per seed |\n|---|---|---|---|---|");
    let (mut spread_sum, mut own) = (0.0f32, [[0usize; 2]; 2]);
    let mut first = Vec::new();
    for (i, &(shape, colour)) in combos.iter().enumerate() {
        let cap = caption(shape, colour);
        let samples: Vec<Tensor> = (0..seeds)
            .map(|seed| models.sample(&cap, 64, None, &mut Rng::new(seed), dev))
            .collect::<Result<_>>()?;
        let spread = mean_pairwise_distance(&samples)?;
        spread_sum += spread;
        let held = is_held_out(shape, colour) as usize;
        let to_own = (0..per_combo)
            .map(|k| rms_distance(&samples[0].squeeze(0)?, &fitted.get(i * per_combo + k)?))
            .collect::<Result<Vec<f32>>>()?
            .into_iter()
            .fold(f32::INFINITY, f32::min);
        let mut nearest = Vec::new();
        for z in &samples {
            let d: Vec<f32> = (0..fitted.dim(0)?)
                .map(|j| rms_distance(&z.squeeze(0)?, &fitted.get(j)?))
                .collect::<Result<_>>()?;
            let j = (0..d.len())
                .min_by(|&a, &b| d[a].total_cmp(&d[b]))
                .unwrap_or(0);
            let (sh, c) = combos[j / per_combo];
            own[held][((sh, c) == (shape, colour)) as usize] += 1;
            nearest.push(format!("{} ({:.3})", caption(sh, c), d[j]));
        }
        println!(
            "| {cap} | {} | {spread:.3} | {to_own:.3} | {} |",
            held == 1,
            nearest.join(", ")
        );
        first.push(samples[0].clone());
    }
    let between = mean_pairwise_distance(&first)?;
    println!(
        "\nmean spread between seeds {:.4}, mean distance between captions (seed 0) {:.4}; samples nearest their own combination: seen {}/{}, held out {}/{}",
        spread_sum / combos.len() as f32,
        between,
        own[0][1],
        own[0][0] + own[0][1],
        own[1][1],
        own[1][0] + own[1][1]
    );
    Ok(())
}

/// Table 1: the fitted latents themselves: the evaluator's verdict and CLIP's rank of their own caption.
fn fitted_table(s: &Setup) -> Result<Vec<Vec<f32>>> {
    let (models, texts, caps, combos, fitted, dev) =
        (&s.models, &s.texts, &s.caps, &s.combos, &s.fitted, &s.dev);
    println!("## Fitted latents\n\n| combo | held out | eval shape | eval colour | IoU | components | euler | CLIP rank of own caption | best caption |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut matrix = Vec::new();
    for (i, &(shape, colour)) in combos.iter().enumerate() {
        let zf = fitted.get(i)?.unsqueeze(0)?;
        let cos = caption_cosines(models, texts, &zf)?.to_vec1::<f32>()?;
        let best = (0..cos.len())
            .max_by(|&a, &b| cos[a].total_cmp(&cos[b]))
            .unwrap_or(0);
        let verdict = match extract_mesh(&models.shap_e.decoder, &zf, 64, dev) {
            Ok(m) => {
                let st = m.stats();
                match classify(&m) {
                    Ok(c) => format!(
                        "{:?} | {:?} | {:.2} | {} | {}",
                        c.shape, c.colour, c.shape_iou, st.components, st.euler
                    ),
                    Err(e) => format!("{e} | - | - | {} | {}", st.components, st.euler),
                }
            }
            Err(e) => format!("no mesh ({e}) | - | - | - | -"),
        };
        println!(
            "| {} | {} | {verdict} | {} | {} |",
            caps[i],
            is_held_out(shape, colour),
            rank_of(&cos, i),
            caps[best]
        );
        matrix.push(cos);
    }
    if let Ok(path) = std::env::var("MATRIX_JSON") {
        std::fs::write(path, serde_json::to_string(&matrix)?)?;
    }
    Ok(matrix)
}

/// Table 2: for each held-out caption, the fitted latents CLIP ranks highest.
fn held_out_preferences(s: &Setup, matrix: &[Vec<f32>]) {
    let (caps, combos) = (&s.caps, &s.combos);
    println!("\n## Which fitted latents CLIP prefers for each held-out caption (cosine, best 5)\n");
    for &(shape, colour) in HELD_OUT.iter() {
        let i = combos
            .iter()
            .position(|&c| c == (shape, colour))
            .unwrap_or(0);
        let mut order: Vec<usize> = (0..combos.len()).collect();
        order.sort_by(|&a, &b| matrix[b][i].total_cmp(&matrix[a][i]));
        let top: Vec<String> = order
            .iter()
            .take(5)
            .map(|&j| format!("{} {:.3}", caps[j], matrix[j][i]))
            .collect();
        println!("- {}: {}", caps[i], top.join(", "));
    }
    println!();
}

/// Table 3: per held-out prompt and seed, the line from the prior sample to the fitted latent and
/// the field change along the cosine's gradient.
fn line_table(s: &Setup, run: &RunSettings, points: &Tensor, seeds: u64) -> Result<()> {
    let (models, texts, caps, combos, fitted, dev) =
        (&s.models, &s.texts, &s.caps, &s.combos, &s.fitted, &s.dev);
    println!("| prompt | seed | cos prior | cos fitted | rank prior | rank fitted | line cos (α=0…1) | line rank | barrier | grad: Δocc/Δcol | to fit: Δocc/Δcol |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    for &(shape, colour) in HELD_OUT.iter() {
        let i = combos
            .iter()
            .position(|&c| c == (shape, colour))
            .ok_or_else(|| anyhow::anyhow!("combo"))?;
        let prompt = &caps[i];
        let zf = fitted.get(i)?.unsqueeze(0)?;
        for seed in 0..seeds {
            let zp = models.run_sample(prompt, run, &Rng::new(seed), dev)?;
            let mut line_cos = Vec::new();
            let mut line_rank = Vec::new();
            for k in 0..=10 {
                let a = k as f64 / 10.0;
                let z = ((&zp * (1.0 - a))? + (&zf * a)?)?;
                let cos = caption_cosines(models, texts, &z)?.to_vec1::<f32>()?;
                line_cos.push(cos[i]);
                line_rank.push(rank_of(&cos, i));
            }
            let start = line_cos[0];
            let barrier = line_cos
                .iter()
                .fold(0f32, |m, &c| m.max(start - c))
                .max(0.0);
            // Gradient of the fixed-view cosine at the prior sample.
            let var = Var::from_tensor(&zp)?;
            let cos = caption_cosines(models, texts, var.as_tensor())?;
            let g = cos
                .get(i)?
                .backward()?
                .get(&var)
                .cloned()
                .ok_or_else(|| anyhow::anyhow!("no gradient reached the latent"))?;
            let unit = |t: &Tensor| -> Result<Tensor> {
                Ok(t.broadcast_div(&t.sqr()?.sum_all()?.sqrt()?)?)
            };
            let step = 0.5;
            let along_g = (&zp + (unit(&g)? * step)?)?;
            let along_f = (&zp + (unit(&(&zf - &zp)?)? * step)?)?;
            let (go, gc) = field_change(models, &zp, &along_g, points)?;
            let (fo, fc) = field_change(models, &zp, &along_f, points)?;
            let _ = D::Minus1;
            println!(
                "| {prompt} | {seed} | {:.3} | {:.3} | {} | {} | {} | {} | {:.3} | {:.3}/{:.3} | {:.3}/{:.3} |",
                line_cos[0],
                line_cos[10],
                line_rank[0],
                line_rank[10],
                line_cos
                    .iter()
                    .map(|c| format!("{c:.3}"))
                    .collect::<Vec<_>>()
                    .join(" "),
                line_rank
                    .iter()
                    .map(|r| r.to_string())
                    .collect::<Vec<_>>()
                    .join(" "),
                barrier,
                go,
                gc,
                fo,
                fc
            );
        }
    }
    Ok(())
}
