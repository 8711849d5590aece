//! Fitting the toy decoder by auto-decoding: one latent per world object and the decoder's
//! weights (params projection + NeRSTF MLP) are optimized together so that the decoded fields
//! reproduce the objects' signed distance, density and colour. Latent rows keep a fixed RMS
//! ([`normalize_rows`]), so latents stay in [−1, 1] at the scale diffusion expects.
//!
//! Targets at a point `p` of object `o` (Shap-E conventions, positive inside):
//! `sdf = tanh(k·sdf_o(p))` (channel 0 through `tanh`), STF and NeRF colour = the object's sRGB
//! colour (channels 3..6 and 9..12 through a sigmoid), fine density `relu(raw₂)/D ≈ σ(k·sdf_o(p))`
//! with `D` the density of a solid interior.

use candle_core::{DType, Device, Result, Tensor, Var};
use candle_nn::{AdamW, Optimizer, ParamsAdamW, VarBuilder, VarMap};

use crate::factors;
use crate::render::Solid;
use crate::world::{Colour, Shape, WorldObject};
use clipsculpt::autodiff::rng::Rng;
use clipsculpt::mesh::colour::linear_to_srgb;
use clipsculpt::random::random_varmap;
use clipsculpt::shap_e::nerstf::{self, Level};
use clipsculpt::shap_e::{Decoder, RendererConfig};

/// Settings of the fit.
#[derive(Debug, Clone, serde::Serialize)]
pub struct FitSettings {
    /// Adam steps.
    pub steps: usize,
    /// Random points per object and step.
    pub points: usize,
    /// Learning rate.
    pub lr: f64,
    /// Sharpness `k` of the SDF and occupancy targets.
    pub sharpness: f32,
    /// Density of a solid interior, `D`.
    pub density: f32,
    /// Root-mean-square of every latent row, restored after each step ([`normalize_rows`]).
    pub latent_rms: f64,
    /// Seed of the initial weights, latents and points.
    pub seed: u64,
    /// Latent-only refits (decoder frozen) of objects whose fit collapsed ([`collapsed`]), at most.
    #[serde(default)]
    pub restarts: usize,
    /// Adam steps of each refit.
    #[serde(default)]
    pub restart_steps: usize,
    /// Factorized latents: each object's latent is one code per shape plus one per colour
    /// (rows renormalised), instead of a free code per object ([`Codes`]).
    #[serde(default)]
    pub factorized: bool,
    /// With factorized latents, the row RMS of a free code per object added to its shape's and
    /// colour's codes, which tells apart instances of one combination (size, yaw, shade);
    /// 0: no such code (one instance per combination, the shipped world).
    #[serde(default)]
    pub instance_rms: f64,
    /// With an instance code: build it from codes per shape and per colour weighted by the
    /// object's [`factors`] (size, the cube's yaw, shade) instead of a free code
    /// per object, so that instances of every combination vary along shared directions.
    #[serde(default)]
    pub instance_factors: bool,
}

impl Default for FitSettings {
    fn default() -> Self {
        Self {
            steps: 500,
            points: 2048,
            lr: 3e-3,
            sharpness: 8.0,
            density: 20.0,
            latent_rms: 0.4,
            seed: 0,
            restarts: 3,
            restart_steps: 300,
            factorized: false,
            instance_rms: 0.0,
            instance_factors: false,
        }
    }
}

/// The trainable latent codes of a fit and how they make each object's latent.
enum Codes {
    /// One free latent per object `(objects, rows, d)`.
    PerObject(Var),
    /// A code per shape and per colour `(6, rows, d)` each; an object's latent is the row-
    /// normalised sum of its shape's and its colour's code (and of its own instance code, when
    /// there is one). Latents of combinations never seen together then still lie on a straight
    /// line from every object that shares one factor, as an encoder's latent space tends to be
    /// smooth, rather than at an unrelated random point.
    Factorized {
        shape: Var,
        colour: Var,
        /// What tells instances of one combination apart.
        instance: Option<InstanceCode>,
        /// Per object: (shape index, colour index).
        index: Vec<(u32, u32)>,
    },
}

impl Codes {
    fn new(
        objects: &[WorldObject],
        s: &FitSettings,
        rows: usize,
        d: usize,
        rng: &mut Rng,
        dev: &Device,
    ) -> Result<Self> {
        let mut init = |n: usize| random_codes(n, (rows, d), s.latent_rms, rng, dev);
        if !s.factorized {
            return Ok(Self::PerObject(init(objects.len())?));
        }
        let (shape, colour) = (init(Shape::ALL.len())?, init(Colour::ALL.len())?);
        let instance = match (s.instance_rms > 0.0, s.instance_factors) {
            (false, _) => None,
            (true, false) => Some(InstanceCode::Free(random_codes(
                objects.len(),
                (rows, d),
                s.instance_rms,
                rng,
                dev,
            )?)),
            (true, true) => Some(InstanceCode::factors(objects, s, (rows, d), rng, dev)?),
        };
        fn position<T: PartialEq>(all: &[T], x: &T) -> u32 {
            all.iter().position(|y| y == x).unwrap_or(0) as u32
        }
        let index = objects
            .iter()
            .map(|o| {
                (
                    position(&Shape::ALL, &o.shape),
                    position(&Colour::ALL, &o.colour),
                )
            })
            .collect();
        Ok(Self::Factorized {
            shape,
            colour,
            instance,
            index,
        })
    }

    /// The trainable codes, each with the row RMS it is kept at.
    fn vars(&self, s: &FitSettings) -> Vec<(Var, f64)> {
        match self {
            Self::PerObject(z) => vec![(z.clone(), s.latent_rms)],
            Self::Factorized {
                shape,
                colour,
                instance,
                ..
            } => {
                let mut v = vec![
                    (shape.clone(), s.latent_rms),
                    (colour.clone(), s.latent_rms),
                ];
                if let Some(i) = instance {
                    v.extend(i.vars().into_iter().map(|i| (i, s.instance_rms)));
                }
                v
            }
        }
    }

    /// The objects' latents `(objects, rows, d)`, on the graph of the codes.
    fn latents(&self, rms: f64) -> Result<Tensor> {
        match self {
            Self::PerObject(z) => Ok(z.as_tensor().clone()),
            Self::Factorized {
                shape,
                colour,
                instance,
                index,
            } => {
                let dev = shape.device();
                let si: Vec<u32> = index.iter().map(|i| i.0).collect();
                let ci: Vec<u32> = index.iter().map(|i| i.1).collect();
                let n = si.len();
                let s = shape
                    .as_tensor()
                    .index_select(&Tensor::from_vec(si, n, dev)?, 0)?;
                let c = colour
                    .as_tensor()
                    .index_select(&Tensor::from_vec(ci, n, dev)?, 0)?;
                let sum = (s + c)?;
                let sum = match instance {
                    Some(i) => (sum + i.codes(index)?)?,
                    None => sum,
                };
                normalize_rows(&sum, rms)
            }
        }
    }

    /// Restores the codes' row RMS after an optimizer step.
    fn renormalize(&self, s: &FitSettings) -> Result<()> {
        for (v, rms) in self.vars(s) {
            v.set(&normalize_rows(v.as_tensor(), rms)?)?;
        }
        Ok(())
    }
}

/// `n` random codes `(n, rows, d)` at row RMS `rms`.
fn random_codes(
    n: usize,
    (rows, d): (usize, usize),
    rms: f64,
    rng: &mut Rng,
    dev: &Device,
) -> Result<Var> {
    let z = rng.normal_tensor(&[n, rows, d], dev)?;
    Var::from_tensor(&normalize_rows(&z, rms)?)
}

/// The code that tells instances of one combination apart, at row RMS
/// `FitSettings::instance_rms` per code.
enum InstanceCode {
    /// A free code per object `(objects, rows, d)`.
    Free(Var),
    /// Codes per shape for each geometry factor and per colour for each shade factor
    /// `(6·factors, rows, d)`, summed with the object's factors as weights `(objects, factors)`.
    Factors {
        geometry: Var,
        shade: Var,
        weights: [Tensor; 2],
    },
}

impl InstanceCode {
    fn factors(
        objects: &[WorldObject],
        s: &FitSettings,
        size: (usize, usize),
        rng: &mut Rng,
        dev: &Device,
    ) -> Result<Self> {
        let mut init = |n: usize| random_codes(n, size, s.instance_rms, rng, dev);
        let geometry = init(Shape::ALL.len() * factors::GEOMETRY)?;
        let shade = init(Colour::ALL.len() * factors::SHADE)?;
        let n = objects.len();
        let g: Vec<f32> = objects.iter().flat_map(factors::geometry).collect();
        let c: Vec<f32> = objects.iter().flat_map(factors::shade).collect();
        let weights = [
            Tensor::from_vec(g, (n, factors::GEOMETRY, 1, 1), dev)?,
            Tensor::from_vec(c, (n, factors::SHADE, 1, 1), dev)?,
        ];
        Ok(Self::Factors {
            geometry,
            shade,
            weights,
        })
    }

    fn vars(&self) -> Vec<Var> {
        match self {
            Self::Free(z) => vec![z.clone()],
            Self::Factors {
                geometry, shade, ..
            } => vec![geometry.clone(), shade.clone()],
        }
    }

    /// The objects' instance codes `(objects, rows, d)`; `index`: each object's (shape, colour).
    fn codes(&self, index: &[(u32, u32)]) -> Result<Tensor> {
        match self {
            Self::Free(z) => Ok(z.as_tensor().clone()),
            Self::Factors {
                geometry,
                shade,
                weights,
            } => {
                weighted(geometry, &weights[0], index, |i| i.0)?
                    + weighted(shade, &weights[1], index, |i| i.1)?
            }
        }
    }
}

/// Per object, the sum of its group's `k` factor codes (group `of(index)`, codes `(groups·k, rows,
/// d)`) weighted by its factors `w (objects, k, 1, 1)`.
fn weighted(
    codes: &Var,
    w: &Tensor,
    index: &[(u32, u32)],
    of: fn(&(u32, u32)) -> u32,
) -> Result<Tensor> {
    let k = w.dim(1)?;
    let idx: Vec<u32> = index
        .iter()
        .flat_map(|i| (0..k as u32).map(move |f| of(i) * k as u32 + f))
        .collect();
    let (n, (_, rows, d)) = (index.len(), codes.dims3()?);
    let idx = Tensor::from_vec(idx, n * k, codes.device())?;
    let picked = codes.as_tensor().index_select(&idx, 0)?;
    picked.reshape((n, k, rows, d))?.broadcast_mul(w)?.sum(1)
}

/// The fitted decoder (as trainable variables), one latent per object, and the loss per step.
pub struct DecoderFit {
    /// The decoder's parameters by checkpoint key.
    pub varmap: VarMap,
    /// The decoder built on those parameters (the tests query it).
    #[cfg(test)]
    pub decoder: Decoder,
    /// Latents `(objects, rows, d_latent)` in [−1, 1].
    pub latents: Var,
    /// Loss per step (the joint fit, then each refit's steps).
    pub losses: Vec<f32>,
    /// For each refit round, the indices of the objects refitted.
    pub refits: Vec<Vec<usize>>,
}

/// Fits a decoder of `cfg` and one latent per object of `objects`.
pub fn fit_decoder(
    cfg: &RendererConfig,
    objects: &[WorldObject],
    s: &FitSettings,
    dev: &Device,
    mut on_step: impl FnMut(usize, f32),
) -> Result<DecoderFit> {
    let varmap = random_varmap(s.seed, dev, |vb| Decoder::new(vb, cfg))?;
    let decoder = Decoder::new(VarBuilder::from_varmap(&varmap, DType::F32, dev), cfg)?;
    let mut rng = Rng::new(s.seed ^ 0x5eed);
    let rows = cfg.latent_rows();
    let codes = Codes::new(objects, s, rows, cfg.d_latent, &mut rng, dev)?;
    let mut params = varmap.all_vars();
    params.extend(codes.vars(s).into_iter().map(|(v, _)| v));
    let mut opt = AdamW::new(
        params,
        ParamsAdamW {
            lr: s.lr,
            weight_decay: 0.0,
            ..Default::default()
        },
    )?;
    let mut losses = Vec::with_capacity(s.steps);
    for step in 0..s.steps {
        let (points, targets) = draw_targets(objects, s, &mut rng, dev)?;
        let loss = fit_loss(
            &decoder,
            &codes.latents(s.latent_rms)?,
            &points,
            &targets,
            s,
        )?
        .mean_all()?;
        let l = loss.to_scalar::<f32>()?;
        losses.push(l);
        opt.backward_step(&loss)?;
        on_step(step, l);
        codes.renormalize(s)?;
    }
    let latents = Var::from_tensor(&codes.latents(s.latent_rms)?.detach())?;
    let mut refits = Vec::new();
    for _ in 0..s.restarts {
        let bad = collapsed(&decoder, latents.as_tensor(), objects, s, &mut rng, dev)?;
        if bad.is_empty() {
            break;
        }
        tracing::info!("decoder fit: refitting collapsed latents {bad:?}");
        let refit = refit_latents(
            &decoder,
            latents.as_tensor(),
            objects,
            &bad,
            s,
            &mut rng,
            dev,
        )?;
        losses.extend(refit.1);
        latents.set(&refit.0)?;
        refits.push(bad);
    }
    Ok(DecoderFit {
        varmap,
        #[cfg(test)]
        decoder,
        latents,
        losses,
        refits,
    })
}

/// Targets at random points: sdf `(o, p)`, occupancy `(o, p)`, sRGB colour `(o, p, 3)`.
struct Targets {
    sdf: Tensor,
    occ: Tensor,
    rgb: Tensor,
}

/// Per-object fit loss `(objects)` of `latents (objects, rows, d)` at `points (objects, p, 3)`.
fn fit_loss(
    decoder: &Decoder,
    latents: &Tensor,
    points: &Tensor,
    t: &Targets,
    s: &FitSettings,
) -> Result<Tensor> {
    let weights = decoder.mlp_weights(latents)?;
    let raw = decoder.query(&weights, points)?;
    let sdf = nerstf::sdf(&raw)?;
    let occ = (nerstf::density(&raw, Level::Fine)? / s.density as f64)?;
    let stf = nerstf::stf_rgb(&raw)?;
    let nerf = nerstf::nerf_rgb(&raw, Level::Fine)?;
    let mse = |a: &Tensor, b: &Tensor| -> Result<Tensor> {
        let d = (a - b)?.sqr()?;
        let d = if d.rank() == 3 { d.mean(2)? } else { d };
        d.mean(1)
    };
    ((mse(&sdf, &t.sdf)? + mse(&occ, &t.occ)?)? + mse(&stf, &t.rgb)?)? + mse(&nerf, &t.rgb)?
}

/// Indices of the objects whose decoded field misses most of the object: fewer than half of the
/// random points inside the target are inside the decoded field (a latent stuck in a region where
/// the field is empty everywhere, as the first fits of the yellow cone and cylinder were).
pub fn collapsed<S: Solid>(
    decoder: &Decoder,
    latents: &Tensor,
    objects: &[S],
    s: &FitSettings,
    rng: &mut Rng,
    dev: &Device,
) -> Result<Vec<usize>> {
    let check = FitSettings {
        points: 4096,
        ..s.clone()
    };
    let (points, targets) = draw_targets(objects, &check, rng, dev)?;
    let raw = decoder.query(&decoder.mlp_weights(&latents.detach())?, &points)?;
    let inside_fit = nerstf::sdf(&raw)?.gt(0f32)?.to_dtype(DType::F32)?;
    let inside = targets.sdf.gt(0f32)?.to_dtype(DType::F32)?;
    let hits = (inside_fit * &inside)?.sum(1)?.to_vec1::<f32>()?;
    let total = inside.sum(1)?.to_vec1::<f32>()?;
    Ok((0..objects.len())
        .filter(|&i| total[i] > 0.0 && hits[i] < 0.5 * total[i])
        .collect())
}

/// Refits the latents of objects `bad` with the decoder frozen, each started from the latent of
/// the best-fitting object of the same shape (or a fresh random one when there is none), so the
/// refit only has to change what differs. Returns all latents and the refit's losses.
fn refit_latents(
    decoder: &Decoder,
    latents: &Tensor,
    objects: &[WorldObject],
    bad: &[usize],
    s: &FitSettings,
    rng: &mut Rng,
    dev: &Device,
) -> Result<(Tensor, Vec<f32>)> {
    let (points, targets) = draw_targets(objects, s, rng, dev)?;
    let per_object =
        fit_loss(decoder, &latents.detach(), &points, &targets, s)?.to_vec1::<f32>()?;
    let mut starts = Vec::with_capacity(bad.len());
    for &i in bad {
        let donor = (0..objects.len())
            .filter(|j| !bad.contains(j) && objects[*j].shape == objects[i].shape)
            .min_by(|&a, &b| per_object[a].total_cmp(&per_object[b]));
        let noise = (rng.normal_tensor(&[latents.dim(1)?, latents.dim(2)?], dev)? * 0.05)?;
        starts.push(match donor {
            Some(j) => (latents.get(j)? + noise)?,
            None => rng.normal_tensor(&[latents.dim(1)?, latents.dim(2)?], dev)?,
        });
    }
    let sub_objects: Vec<WorldObject> = bad.iter().map(|&i| objects[i]).collect();
    let starts = normalize_rows(&Tensor::stack(&starts, 0)?, s.latent_rms)?;
    let refit = fit_latents(decoder, &starts, &sub_objects, s.restart_steps, s, rng, dev)?;
    let mut rows: Vec<Tensor> = (0..objects.len())
        .map(|i| latents.get(i))
        .collect::<Result<_>>()?;
    for (k, &i) in bad.iter().enumerate() {
        rows[i] = refit.latents.get(k)?;
    }
    Ok((Tensor::stack(&rows, 0)?, refit.losses))
}

/// Latents fitted with the decoder frozen ([`fit_latents`]).
pub struct LatentFit {
    /// The fitted latents `(solids, rows, d)`, detached.
    pub latents: Tensor,
    /// Mean loss per step.
    pub losses: Vec<f32>,
    /// Each solid's loss at the last step.
    pub last: Vec<f32>,
}

/// Fits one free latent per solid against the frozen `decoder`, from `starts (solids, rows, d)`:
/// `steps` Adam steps at `s.lr` on `s.points` fresh points per solid, rows renormalised to
/// `s.latent_rms` after each step (the refit of collapsed latents; the shape blends of
/// [`crate::distractors`]).
pub fn fit_latents<S: Solid>(
    decoder: &Decoder,
    starts: &Tensor,
    solids: &[S],
    steps: usize,
    s: &FitSettings,
    rng: &mut Rng,
    dev: &Device,
) -> Result<LatentFit> {
    let sub = Var::from_tensor(&starts.detach())?;
    let mut opt = AdamW::new(
        vec![sub.clone()],
        ParamsAdamW {
            lr: s.lr,
            weight_decay: 0.0,
            ..Default::default()
        },
    )?;
    let (mut losses, mut last) = (Vec::with_capacity(steps), Vec::new());
    for _ in 0..steps {
        let (points, targets) = draw_targets(solids, s, rng, dev)?;
        let per_solid = fit_loss(decoder, sub.as_tensor(), &points, &targets, s)?;
        let loss = per_solid.mean_all()?;
        losses.push(loss.to_scalar::<f32>()?);
        last = per_solid.to_vec1::<f32>()?;
        opt.backward_step(&loss)?;
        sub.set(&normalize_rows(sub.as_tensor(), s.latent_rms)?)?;
    }
    Ok(LatentFit {
        latents: sub.as_tensor().detach(),
        losses,
        last,
    })
}

/// Rescales every latent row of `latents (…, rows, d)` to root-mean-square `rms` (then clamps to
/// [−1, 1]). The decoder hardly sees this (each row is projected without bias and then
/// layer-normalised, so a row's scale cancels up to the norm's ε), but diffusion does: the prior's
/// noise schedule assumes latents of order one, and rows of RMS 0.1 would drown at almost every
/// timestep, so the fit keeps the rows at a fixed, sizeable RMS.
pub fn normalize_rows(latents: &Tensor, rms: f64) -> Result<Tensor> {
    let norm = latents
        .sqr()?
        .mean_keepdim(candle_core::D::Minus1)?
        .sqrt()?
        .clamp(1e-12f32, f32::MAX)?;
    (latents.broadcast_div(&norm)? * rms)?.clamp(-1f32, 1f32)
}

/// Points `(objects, points, 3)` uniform in [−1, 1]³ and their targets: sdf `(o, p)`, occupancy
/// `(o, p)`, sRGB colour `(o, p, 3)`.
fn draw_targets<S: Solid>(
    objects: &[S],
    s: &FitSettings,
    rng: &mut Rng,
    dev: &Device,
) -> Result<(Tensor, Targets)> {
    let (n, m) = (objects.len(), s.points);
    let (mut pts, mut sdf, mut occ, mut rgb) = (
        Vec::with_capacity(n * m * 3),
        Vec::with_capacity(n * m),
        Vec::with_capacity(n * m),
        Vec::with_capacity(n * m * 3),
    );
    for o in objects {
        for _ in 0..m {
            let p = [
                rng.range(-1.0, 1.0),
                rng.range(-1.0, 1.0),
                rng.range(-1.0, 1.0),
            ];
            let d = s.sharpness * o.sdf(p);
            pts.extend(p);
            sdf.push(d.tanh());
            occ.push(1.0 / (1.0 + (-d).exp()));
            rgb.extend(o.rgb().map(linear_to_srgb));
        }
    }
    Ok((
        Tensor::from_vec(pts, (n, m, 3), dev)?,
        Targets {
            sdf: Tensor::from_vec(sdf, (n, m), dev)?,
            occ: Tensor::from_vec(occ, (n, m), dev)?,
            rgb: Tensor::from_vec(rgb, (n, m, 3), dev)?,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Scouting run (not a test of behaviour): fit every shape × colour at the embedded default's
    /// size and classify each decoded mesh. `cargo test --release --lib -- --ignored --nocapture fit_all`
    #[test]
    #[ignore = "minutes; prints accuracy"]
    fn fit_all_objects_and_classify() -> Result<()> {
        use crate::train::TOY_SIZES as TOY_SHAP_E;
        use crate::{classify, world::combinations};
        let (h, d) = (TOY_SHAP_E.d_hidden, TOY_SHAP_E.d_latent);
        let cfg: RendererConfig = serde_json::from_str(&format!(
            r#"{{"d_hidden": {h}, "d_latent": {d}, "param_shapes": [[{h}, 93], [{h}, {h}], [{h}, {h}], [{h}, {h}]]}}"#
        ))
        .map_err(|e| candle_core::Error::Msg(e.to_string()))?;
        let objects: Vec<WorldObject> = combinations()
            .into_iter()
            .map(|(s, c)| WorldObject::canonical(s, c))
            .collect();
        let steps: usize = std::env::var("FIT_STEPS")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(300);
        let s = FitSettings {
            steps,
            points: 1024,
            lr: 5e-3,
            ..FitSettings::default()
        };
        let t = std::time::Instant::now();
        let fit = fit_decoder(&cfg, &objects, &s, &Device::Cpu, |_, _| {})?;
        println!(
            "fit: {steps} steps in {:.1} s, loss {:.4} -> {:.4}",
            t.elapsed().as_secs_f64(),
            fit.losses[0],
            fit.losses[steps - 1]
        );
        let (mut shape_ok, mut colour_ok) = (0, 0);
        for (i, o) in objects.iter().enumerate() {
            let z = fit.latents.as_tensor().get(i)?.unsqueeze(0)?.detach();
            let mesh = match clipsculpt::pipeline::extract_mesh(&fit.decoder, &z, 40, &Device::Cpu)
            {
                Ok(m) => m,
                Err(e) => {
                    println!("{}: {e:#}", crate::caption(o.shape, o.colour));
                    continue;
                }
            };
            match classify(&mesh) {
                Ok(c) => {
                    if i < 6 {
                        println!(
                            "{}: mean colour {:?} vs {:?} -> {:?}",
                            crate::caption(o.shape, o.colour),
                            c.mean_colour,
                            o.params.rgb,
                            c.colour
                        );
                    }
                    shape_ok += usize::from(c.shape == o.shape);
                    colour_ok += usize::from(c.colour == o.colour);
                }
                Err(e) => println!("{}: {e}", crate::caption(o.shape, o.colour)),
            }
        }
        println!(
            "shape {shape_ok}/{n}, colour {colour_ok}/{n}",
            n = objects.len()
        );
        Ok(())
    }

    /// A collapsed latent (its field empty everywhere) is detected and refitted from the latent of
    /// the object that shares its shape, after which its decoded field covers the object again.
    #[test]
    fn collapsed_latents_are_found_and_refitted() -> Result<()> {
        let cfg = tiny_config()?;
        let objects = [
            WorldObject::canonical(Shape::Cube, Colour::Red),
            WorldObject::canonical(Shape::Cube, Colour::Blue),
        ];
        let s = FitSettings {
            steps: 150,
            points: 256,
            lr: 1e-2,
            restarts: 0,
            restart_steps: 150,
            ..FitSettings::default()
        };
        let dev = Device::Cpu;
        let fit = fit_decoder(&cfg, &objects, &s, &dev, |_, _| {})?;
        let mut rng = Rng::new(4);
        assert_eq!(
            collapsed(
                &fit.decoder,
                fit.latents.as_tensor(),
                &objects,
                &s,
                &mut rng,
                &dev
            )?,
            Vec::<usize>::new(),
            "the plain fit should cover both cubes"
        );
        // Drive the blue cube's latent into a region where the field is empty everywhere.
        let sunk = Var::from_tensor(&fit.latents.as_tensor().narrow(0, 1, 1)?.detach())?;
        let mut opt = AdamW::new(
            vec![sunk.clone()],
            ParamsAdamW {
                lr: 0.05,
                weight_decay: 0.0,
                ..Default::default()
            },
        )?;
        let pts = Rng::new(5)
            .uniform_tensor(&[1, 2048, 3], &dev)?
            .affine(2.0, -1.0)?;
        for _ in 0..200 {
            let sdf = nerstf::sdf(
                &fit.decoder
                    .query(&fit.decoder.mlp_weights(sunk.as_tensor())?, &pts)?,
            )?;
            opt.backward_step(&(sdf + 1.0)?.mean_all()?)?;
            sunk.set(&normalize_rows(sunk.as_tensor(), s.latent_rms)?)?;
        }
        let empty = sunk.as_tensor().detach();
        let sdf = nerstf::sdf(&fit.decoder.query(&fit.decoder.mlp_weights(&empty)?, &pts)?)?;
        assert!(
            sdf.max_all()?.to_scalar::<f32>()? < 0.0,
            "the sunk latent still has a surface"
        );
        let broken = Tensor::cat(&[&fit.latents.as_tensor().narrow(0, 0, 1)?, &empty], 0)?;
        let bad = collapsed(&fit.decoder, &broken, &objects, &s, &mut rng, &dev)?;
        assert_eq!(bad, vec![1]);
        let (fixed, losses) =
            refit_latents(&fit.decoder, &broken, &objects, &bad, &s, &mut rng, &dev)?;
        assert_eq!(losses.len(), s.restart_steps);
        assert!(collapsed(&fit.decoder, &fixed, &objects, &s, &mut rng, &dev)?.is_empty());
        // The other latent is untouched.
        let diff = (fixed.get(0)? - broken.get(0)?)?
            .abs()?
            .max_all()?
            .to_scalar::<f32>()?;
        assert_eq!(diff, 0.0);
        Ok(())
    }

    /// With instance codes, two sizes of one red sphere get latents nearer each other than the
    /// blue cube's (they share both factor codes), yet apart, and the larger one decodes to the
    /// larger volume: the instance code carries what tells instances apart.
    #[test]
    fn instance_codes_tell_instances_of_one_combination_apart() -> Result<()> {
        let cfg = tiny_config()?;
        let sphere = |scale: f32| {
            let mut o = WorldObject::canonical(Shape::Sphere, Colour::Red);
            o.params.scale = scale;
            o
        };
        let objects = [
            sphere(0.6),
            sphere(1.0),
            WorldObject::canonical(Shape::Cube, Colour::Blue),
        ];
        let s = instance_fit(false);
        let dev = Device::Cpu;
        let fit = fit_decoder(&cfg, &objects, &s, &dev, |_, _| {})?;
        let z = fit.latents.as_tensor().detach();
        let d = |a: usize, b: usize| -> Result<f32> {
            (z.get(a)? - z.get(b)?)?.sqr()?.mean_all()?.to_scalar()
        };
        let (apart, to_cube) = (d(0, 1)?, d(0, 2)?.min(d(1, 2)?));
        assert!(apart > 1e-4 && apart < to_cube, "{apart} vs {to_cube}");
        let (small, large) = (inside_points(&fit, &z, 0)?, inside_points(&fit, &z, 1)?);
        assert!(large > 1.5 * small, "inside points: {small} vs {large}");
        Ok(())
    }

    /// A decoder of 8 hidden units on 16-number latents.
    fn tiny_config() -> Result<RendererConfig> {
        serde_json::from_str(
            r#"{"d_hidden": 8, "d_latent": 16, "param_shapes": [[8, 93], [8, 8], [8, 8], [8, 8]]}"#,
        )
        .map_err(|e| candle_core::Error::Msg(e.to_string()))
    }

    /// A short factorized fit with instance codes (free, or built from factors).
    fn instance_fit(instance_factors: bool) -> FitSettings {
        FitSettings {
            steps: 200,
            points: 512,
            lr: 1e-2,
            factorized: true,
            instance_rms: 0.2,
            instance_factors,
            restarts: 0,
            ..FitSettings::default()
        }
    }

    /// How many of 4096 fixed random points in the unit cube lie inside latent `i` of `z`'s field.
    fn inside_points(fit: &DecoderFit, z: &Tensor, i: usize) -> Result<f32> {
        let pts = Rng::new(5)
            .uniform_tensor(&[1, 4096, 3], z.device())?
            .affine(2.0, -1.0)?;
        let w = fit.decoder.mlp_weights(&z.narrow(0, i, 1)?)?;
        let sdf = nerstf::sdf(&fit.decoder.query(&w, &pts)?)?;
        sdf.gt(0f32)?.to_dtype(DType::F32)?.sum_all()?.to_scalar()
    }

    /// With factor codes, a small and a large sphere differ along the same direction in red and in
    /// green (with free codes, along unrelated ones), and the larger decodes to the larger volume.
    #[test]
    fn factor_codes_share_the_size_direction_across_colours() -> Result<()> {
        let cfg = tiny_config()?;
        let sphere = |colour, scale: f32| {
            let mut o = WorldObject::canonical(Shape::Sphere, colour);
            o.params.scale = scale;
            o
        };
        let objects = [
            sphere(Colour::Red, 0.8),
            sphere(Colour::Red, 1.0),
            sphere(Colour::Green, 0.8),
            sphere(Colour::Green, 1.0),
            WorldObject::canonical(Shape::Cube, Colour::Blue),
        ];
        let dev = Device::Cpu;
        let mut cosines = Vec::new();
        for instance_factors in [false, true] {
            let s = instance_fit(instance_factors);
            let fit = fit_decoder(&cfg, &objects, &s, &dev, |_, _| {})?;
            let z = fit.latents.as_tensor().detach();
            let red = (z.get(1)? - z.get(0)?)?.flatten_all()?;
            let green = (z.get(3)? - z.get(2)?)?.flatten_all()?;
            let dot = |a: &Tensor, b: &Tensor| -> Result<f32> { (a * b)?.sum_all()?.to_scalar() };
            cosines.push(dot(&red, &green)? / (dot(&red, &red)? * dot(&green, &green)?).sqrt());
            if instance_factors {
                for (small, large) in [(0, 1), (2, 3)] {
                    let (a, b) = (
                        inside_points(&fit, &z, small)?,
                        inside_points(&fit, &z, large)?,
                    );
                    assert!(b > 1.2 * a, "inside points: {a} vs {b}");
                }
            }
        }
        assert!(
            cosines[0].abs() < 0.5 && cosines[1] > 0.8,
            "cosines {cosines:?}"
        );
        Ok(())
    }

    /// A short fit on two objects with a tiny decoder lowers its loss and keeps latents in range.
    #[test]
    fn short_fit_lowers_the_loss() -> Result<()> {
        let cfg = tiny_config()?;
        let objects = [
            WorldObject::canonical(Shape::Cube, Colour::Red),
            WorldObject::canonical(Shape::Sphere, Colour::Blue),
        ];
        for factorized in [false, true] {
            short_fit(&cfg, &objects, factorized)?;
        }
        Ok(())
    }

    fn short_fit(cfg: &RendererConfig, objects: &[WorldObject], factorized: bool) -> Result<()> {
        let s = FitSettings {
            steps: 40,
            points: 256,
            lr: 1e-2,
            factorized,
            ..FitSettings::default()
        };
        let fit = fit_decoder(cfg, objects, &s, &Device::Cpu, |_, _| {})?;
        let first: f32 = fit.losses[..5].iter().sum::<f32>() / 5.0;
        let last: f32 = fit.losses[fit.losses.len() - 5..].iter().sum::<f32>() / 5.0;
        assert!(last < 0.7 * first, "loss {first} → {last}");
        let max = fit
            .latents
            .as_tensor()
            .abs()?
            .max_all()?
            .to_scalar::<f32>()?;
        assert!(max <= 1.0);
        // The trained instance and one rebuilt from the saved values agree (no stale copies).
        let rebuilt = Decoder::new(
            VarBuilder::from_tensors(
                clipsculpt::random::varmap_tensors(&fit.varmap)?,
                DType::F32,
                &Device::Cpu,
            ),
            cfg,
        )?;
        let z = fit.latents.as_tensor().detach();
        let pts = Rng::new(9).uniform_tensor(&[2, 64, 3], &Device::Cpu)?;
        let a = fit.decoder.query(&fit.decoder.mlp_weights(&z)?, &pts)?;
        let b = rebuilt.query(&rebuilt.mlp_weights(&z)?, &pts)?;
        let diff = (a - b)?.abs()?.max_all()?.to_scalar::<f32>()?;
        assert!(diff < 1e-6, "rebuilt decoder differs by {diff}");
        Ok(())
    }
}
