//! The prior's distractors (`train-toy --prior-distractors N`, issue 53's protocol §1):
//! uncaptioned shape blends ([`Blend`]) of two seen shapes in one colour, each checked by the
//! evaluator (not a held-out combination) and given a latent fitted against the world's frozen
//! decoder. They join the prior's unconditional branch and nothing else: `latents.safetensors`
//! keeps its combinations, and the distractors go to [`DISTRACTORS_FILE`] and [`DISTRACTORS_JSON`].

use candle_core::{Device, Result, Tensor};
use serde::Serialize;

use crate::blend::{Blend, BLEND_RANGE};
use crate::eval::classify;
use crate::fit_decoder::{collapsed, fit_latents, normalize_rows, FitSettings};
use crate::render::Solid;
use crate::world::{Colour, Shape, Variation, WorldObject};
use clipsculpt::autodiff::rng::Rng;
use clipsculpt::mesh::field::DEFAULT_CHUNK;
use clipsculpt::mesh::{
    marching_cubes, sample_colours, sample_grid, Bounds, ExportError, FnField, McOptions,
};
use clipsculpt::shap_e::Decoder;

/// The distractors' latents `(N, rows, d)` (tensor `latent`), beside `latents.safetensors`.
pub const DISTRACTORS_FILE: &str = "distractors.safetensors";
/// What each distractor is, its redraws and fit loss.
pub const DISTRACTORS_JSON: &str = "distractors.json";

/// XORed into the prior's seed: the stream of amendment 1's probe.
pub const PROBE_STREAM: u64 = 0x9b0e;
/// XORed into the prior's seed: the stream of the distractors' draws and fits (§1).
pub const DRAW_STREAM: u64 = 0xd157;
/// XORed into the prior's seed: the stream of amendment 2's redraws of collapsed distractors.
pub const COLLAPSE_STREAM: u64 = 0xc011;

/// How distractors are drawn, checked and fitted.
#[derive(Debug, Clone, Serialize)]
pub struct DistractorSettings {
    /// How many (0: none).
    pub count: usize,
    /// Redraws of a blend judged a held-out combination, without a surface (amendment 1) or
    /// whose latent stays collapsed (amendment 2), at most (then training fails).
    pub redraws: usize,
    /// The evaluator's grid for the check (samples per axis).
    pub check_grid: usize,
    /// Adam steps of each latent fit.
    pub steps: usize,
    /// Refits from random starts of a collapsed latent, at most (then the blend is redrawn).
    pub refits: usize,
    /// Probe blends per type, half with each shape as the base (amendment 1).
    pub probe: usize,
}

impl DistractorSettings {
    /// The protocol's: redraws ≤ 10, check at 64³, 600 fit steps, ≤ 3 refits, 32 probe blends.
    pub fn protocol(count: usize) -> Self {
        Self {
            count,
            redraws: 10,
            check_grid: 64,
            steps: 600,
            refits: 3,
            probe: 32,
        }
    }
}

/// The latent fit's settings: lr 5e-3, 256 points per step, rows at RMS 0.4; the target's
/// sharpness and density are the world's decoder fit's.
pub fn fit_settings(decoder: &FitSettings) -> FitSettings {
    FitSettings {
        points: 256,
        lr: 5e-3,
        latent_rms: 0.4,
        ..decoder.clone()
    }
}

/// One distractor as [`DISTRACTORS_JSON`] lists it.
#[derive(Debug, Clone, Serialize)]
pub struct Distractor {
    /// Always "shape blend".
    pub kind: &'static str,
    /// The base object's shape, then the shape blended in.
    pub shapes: [Shape; 2],
    /// The colour.
    pub colour: Colour,
    /// The blended-in shape's weight.
    pub weight: f32,
    /// The base object's size, yaw and shade.
    pub variation: Variation,
    /// Draws before this one that failed: judged a held-out combination, without a surface, or
    /// (amendment 2) with a latent still collapsed after the refits.
    pub redraws: usize,
    /// Of `redraws`, those for a collapsed latent (amendment 2; absent when 0).
    #[serde(skip_serializing_if = "is_zero")]
    pub collapsed_redraws: usize,
    /// Refits from random starts (the latent collapsed).
    pub refits: usize,
    /// Fit loss at the last step.
    pub fit_loss: f32,
}

/// The distractor types: per colour (in [`Colour::ALL`]), each pair of shapes (in [`Shape::ALL`]
/// order) whose combinations with that colour are both seen (in `combos`, not `held_out`).
pub fn types(
    combos: &[(Shape, Colour)],
    held_out: &[(Shape, Colour)],
) -> Vec<(Colour, Shape, Shape)> {
    let mut out = Vec::new();
    for c in Colour::ALL {
        let seen: Vec<Shape> = Shape::ALL
            .into_iter()
            .filter(|&s| combos.contains(&(s, c)) && !held_out.contains(&(s, c)))
            .collect();
        for (i, &a) in seen.iter().enumerate() {
            out.extend(seen[i + 1..].iter().map(|&b| (c, a, b)));
        }
    }
    out
}

/// What the evaluator makes of a blend: a shape and colour, or `None` when its field has no
/// surface.
pub type Verdict = Option<(Shape, Colour)>;

/// The shape and colour the evaluator judges `blend` (its analytic field meshed at `grid`³), or
/// `None` when the field has no surface there (amendment 1: such a draw is redrawn).
pub fn judge(blend: &Blend, grid: usize) -> Result<Verdict> {
    let field = FnField(|p: [f32; 3]| (blend.sdf(p), blend.rgb()));
    let dev = Device::Cpu;
    let err =
        |e: &dyn std::fmt::Display| candle_core::Error::Msg(format!("judging {blend:?}: {e}"));
    let g = sample_grid(&field, &dev, grid, Bounds::SHAP_E, DEFAULT_CHUNK).map_err(|e| err(&e))?;
    let mut mesh = match marching_cubes(&g, &McOptions::default()) {
        Ok(mesh) => mesh,
        Err(ExportError::EmptySurface { .. }) => return Ok(None),
        Err(e) => return Err(err(&e)),
    };
    mesh.colours =
        sample_colours(&field, &dev, &mesh.positions, DEFAULT_CHUNK).map_err(|e| err(&e))?;
    let v = classify(&mesh).map_err(|e| err(&e))?;
    Ok(Some((v.shape, v.colour)))
}

/// Whether a verdict fails the check: no surface, or a `held_out` combination.
fn fails(verdict: &Verdict, held_out: &[(Shape, Colour)]) -> bool {
    verdict.is_none_or(|v| held_out.contains(&v))
}

/// The blend of base shape `base` and `other` in colour `c`, drawn from `rng`.
fn random_blend(base: Shape, other: Shape, c: Colour, rng: &mut Rng) -> Blend {
    let object = WorldObject::random(base, c, rng);
    let weight = rng.range(BLEND_RANGE.0, BLEND_RANGE.1);
    Blend {
        object,
        other,
        weight,
    }
}

/// A distractor type: the colour and the pair of shapes.
pub type DistractorType = (Colour, Shape, Shape);

/// A type excluded by the probe, with its probe's failed blends.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Excluded {
    /// The colour.
    pub colour: Colour,
    /// The pair of shapes.
    pub shapes: [Shape; 2],
    /// Probe blends judged held out or without a surface, of `probed`.
    pub failed: usize,
    /// Probe blends drawn.
    pub probed: usize,
}

/// Amendment 1's probe: `s.probe` blends per type (half with each shape as the base) from `rng`,
/// judged; a type with at least half of them failing the check is excluded. Returns the eligible
/// types in their order and the excluded ones.
pub fn probe(
    types: &[(Colour, Shape, Shape)],
    held_out: &[(Shape, Colour)],
    s: &DistractorSettings,
    rng: &mut Rng,
    judge: impl Fn(&Blend) -> Result<Verdict>,
) -> Result<(Vec<DistractorType>, Vec<Excluded>)> {
    let (mut eligible, mut excluded) = (Vec::new(), Vec::new());
    for &(c, a, b) in types {
        let mut failed = 0;
        for (base, other) in [(a, b), (b, a)] {
            for _ in 0..s.probe / 2 {
                failed += usize::from(fails(&judge(&random_blend(base, other, c, rng))?, held_out));
            }
        }
        let probed = s.probe / 2 * 2;
        if probed > 0 && 2 * failed >= probed {
            excluded.push(Excluded {
                colour: c,
                shapes: [a, b],
                failed,
                probed,
            });
        } else {
            eligible.push((c, a, b));
        }
    }
    Ok((eligible, excluded))
}

/// Draws `s.count` blends from `rng`: distractor `i` has type `i mod T` and instance
/// `k = ⌊i/T⌋`, its base object of the pair's first shape for even `k`, the second for odd `k`;
/// a blend `judge` calls a `held_out` combination, or finds no surface in, is drawn again, at most
/// `s.redraws` times. Returns each blend with its redraws.
pub fn draw(
    types: &[(Colour, Shape, Shape)],
    held_out: &[(Shape, Colour)],
    s: &DistractorSettings,
    rng: &mut Rng,
    judge: impl Fn(&Blend) -> Result<Verdict>,
) -> Result<Vec<(Blend, usize)>> {
    if types.is_empty() && s.count > 0 {
        candle_core::bail!(
            "no colour has two seen shapes that blend into a seen object: no distractor type"
        );
    }
    let mut out = Vec::with_capacity(s.count);
    for i in 0..s.count {
        let (c, a, b) = types[i % types.len()];
        let (base, other) = if (i / types.len()).is_multiple_of(2) {
            (a, b)
        } else {
            (b, a)
        };
        out.push(draw_one(i, (base, other, c), 0, held_out, s, rng, &judge)?);
    }
    Ok(out)
}

/// Distractor `i`'s blend of `base` and `other` in colour `c`, drawn from `rng` until `judge`
/// passes it, counting failed draws on from `redraws`; fails past `s.redraws`.
fn draw_one(
    i: usize,
    (base, other, c): (Shape, Shape, Colour),
    mut redraws: usize,
    held_out: &[(Shape, Colour)],
    s: &DistractorSettings,
    rng: &mut Rng,
    judge: &impl Fn(&Blend) -> Result<Verdict>,
) -> Result<(Blend, usize)> {
    loop {
        if redraws > s.redraws {
            candle_core::bail!(
                "distractor {i} ({} {}/{}) failed the check {redraws} times: judged a held-out combination, without a surface, or with a latent that stays collapsed",
                c.name(),
                base.name(),
                other.name(),
            );
        }
        let blend = random_blend(base, other, c, rng);
        if !fails(&judge(&blend)?, held_out) {
            return Ok((blend, redraws));
        }
        redraws += 1;
    }
}

/// A latent fit of blends: the latents `(N, rows, d)`, each one's last fit loss and refits, and
/// the blends whose latents are still [`collapsed`] after the refits.
pub struct Fitted {
    /// The latents.
    pub latents: Tensor,
    /// Each one's fit loss at the last step.
    pub loss: Vec<f32>,
    /// Each one's refits from random starts.
    pub refits: Vec<usize>,
    /// Indices whose latent is still collapsed.
    pub collapsed: Vec<usize>,
}

/// Fits a latent per blend against the frozen `decoder`: from `starts (N, rows, d)`, then up to
/// `s.refits` refits from random starts of those [`collapsed`].
pub fn fit(
    decoder: &Decoder,
    blends: &[Blend],
    starts: &Tensor,
    s: &DistractorSettings,
    fs: &FitSettings,
    rng: &mut Rng,
    dev: &Device,
) -> Result<Fitted> {
    let first = fit_latents(decoder, starts, blends, s.steps, fs, rng, dev)?;
    let (mut latents, mut loss) = (first.latents, first.last);
    let mut refits = vec![0; blends.len()];
    let mut bad = collapsed(decoder, &latents, blends, fs, rng, dev)?;
    for _ in 0..s.refits {
        if bad.is_empty() {
            break;
        }
        tracing::info!("distractors: refitting collapsed latents {bad:?}");
        let sub: Vec<Blend> = bad.iter().map(|&i| blends[i]).collect();
        let dims = [bad.len(), latents.dim(1)?, latents.dim(2)?];
        let start = normalize_rows(&rng.normal_tensor(&dims, dev)?, fs.latent_rms)?;
        let refit = fit_latents(decoder, &start, &sub, s.steps, fs, rng, dev)?;
        let mut rows: Vec<Tensor> = (0..blends.len())
            .map(|i| latents.get(i))
            .collect::<Result<_>>()?;
        for (k, &i) in bad.iter().enumerate() {
            rows[i] = refit.latents.get(k)?;
            loss[i] = refit.last[k];
            refits[i] += 1;
        }
        latents = Tensor::stack(&rows, 0)?;
        bad = collapsed(decoder, &latents, blends, fs, rng, dev)?;
    }
    Ok(Fitted {
        latents,
        loss,
        refits,
        collapsed: bad,
    })
}

/// Amendment 2: fits every drawn blend with `fit`, then redraws each blend whose latent stays
/// collapsed (same type and base shape, from `rng`, checked by `judge` as in [`draw`], counted
/// in its redraws) and fits the new ones, until none is collapsed. Returns the fit of the final
/// blends and, per distractor, its redraws for a collapsed latent.
pub fn fit_redrawing(
    drawn: &mut [(Blend, usize)],
    held_out: &[(Shape, Colour)],
    s: &DistractorSettings,
    rng: &mut Rng,
    judge: impl Fn(&Blend) -> Result<Verdict>,
    mut fit: impl FnMut(&[Blend]) -> Result<Fitted>,
) -> Result<(Fitted, Vec<usize>)> {
    let blends: Vec<Blend> = drawn.iter().map(|(b, _)| *b).collect();
    let mut all = fit(&blends)?;
    let mut bad = std::mem::take(&mut all.collapsed);
    let mut collapses = vec![0; drawn.len()];
    if bad.is_empty() {
        return Ok((all, collapses));
    }
    let mut rows: Vec<Tensor> = (0..drawn.len())
        .map(|i| all.latents.get(i))
        .collect::<Result<_>>()?;
    while !bad.is_empty() {
        tracing::info!("distractors: redrawing collapsed blends {bad:?}");
        for &i in &bad {
            let (b, redraws) = drawn[i];
            let kind = (b.object.shape, b.other, b.object.colour);
            drawn[i] = draw_one(i, kind, redraws + 1, held_out, s, rng, &judge)?;
            collapses[i] += 1;
        }
        let sub: Vec<Blend> = bad.iter().map(|&i| drawn[i].0).collect();
        let f = fit(&sub)?;
        for (k, &i) in bad.iter().enumerate() {
            rows[i] = f.latents.get(k)?;
            all.loss[i] = f.loss[k];
            all.refits[i] = f.refits[k];
        }
        bad = f.collapsed.iter().map(|&k| bad[k]).collect();
    }
    all.latents = Tensor::stack(&rows, 0)?;
    Ok((all, collapses))
}

/// Whether `n` is 0 (a count left out of [`DISTRACTORS_JSON`]).
fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// The fit's starting latents: per blend, the row-normalised mean of its two endpoint
/// combinations' first instances (`latent_of(shape, colour)`).
pub fn starts(
    blends: &[Blend],
    latent_of: impl Fn(Shape, Colour) -> Result<Tensor>,
    rms: f64,
) -> Result<Tensor> {
    let rows: Vec<Tensor> = blends
        .iter()
        .map(|b| {
            let c = b.object.colour;
            (latent_of(b.object.shape, c)? + latent_of(b.other, c)?)? * 0.5
        })
        .collect::<Result<_>>()?;
    normalize_rows(&Tensor::stack(&rows, 0)?, rms)
}

/// What [`DISTRACTORS_JSON`] holds: the types the probe excluded, then each distractor.
#[derive(Debug, Clone, Serialize)]
pub struct DistractorsFile {
    /// Types excluded by amendment 1's probe.
    pub excluded_types: Vec<Excluded>,
    /// The distractors, in order.
    pub distractors: Vec<Distractor>,
}

/// The [`DISTRACTORS_JSON`] contents.
pub fn describe(
    excluded: &[Excluded],
    blends: &[(Blend, usize)],
    fitted: &Fitted,
    collapses: &[usize],
) -> DistractorsFile {
    let distractors = blends
        .iter()
        .zip(&fitted.loss)
        .zip(&fitted.refits)
        .zip(collapses)
        .map(
            |((((b, redraws), &fit_loss), &refits), &collapsed_redraws)| Distractor {
                kind: "shape blend",
                shapes: [b.object.shape, b.other],
                colour: b.object.colour,
                weight: b.weight,
                variation: b.object.params,
                redraws: *redraws,
                collapsed_redraws,
                refits,
                fit_loss,
            },
        )
        .collect();
    DistractorsFile {
        excluded_types: excluded.to_vec(),
        distractors,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::world::HELD_OUT;

    /// A Latin split leaves 60 types (6 colours × C(5,2)), colour-major, pairs in shape order.
    #[test]
    fn a_latin_split_leaves_sixty_types() {
        let t = types(&crate::world::combinations(), &HELD_OUT);
        assert_eq!(t.len(), 60);
        // Red's capsule is held out: its first pairs are sphere–cube, sphere–cylinder.
        assert_eq!(t[0], (Colour::Red, Shape::Sphere, Shape::Cube));
        assert_eq!(t[1], (Colour::Red, Shape::Sphere, Shape::Cylinder));
        assert!(t[..10]
            .iter()
            .all(|&(c, a, b)| c == Colour::Red && a != Shape::Capsule && b != Shape::Capsule));
        assert_eq!(t[10].0, Colour::Green);
    }

    /// Distractor i has type i mod T, its base shape alternating with the instance, weights in
    /// the blend range; a judge that calls every other draw held out or without a surface costs
    /// one redraw each; a judge that always does fails after the redraws allowed.
    #[test]
    fn draws_follow_types_and_redraw_held_out_verdicts() -> Result<()> {
        let t = types(&crate::world::combinations(), &HELD_OUT);
        let s = DistractorSettings::protocol(130);
        let calls = std::cell::Cell::new(0);
        let flaky = |_: &Blend| {
            calls.set(calls.get() + 1);
            Ok(match calls.get() % 4 {
                1 => Some(HELD_OUT[0]),
                3 => None,
                _ => Some((Shape::Cube, Colour::Red)),
            })
        };
        let drawn = draw(&t, &HELD_OUT, &s, &mut Rng::new(3), flaky)?;
        assert_eq!(drawn.len(), 130);
        for (i, (b, redraws)) in drawn.iter().enumerate() {
            let (c, x, y) = t[i % 60];
            let (base, other) = if (i / 60) % 2 == 0 { (x, y) } else { (y, x) };
            assert_eq!((b.object.shape, b.other, b.object.colour), (base, other, c));
            assert!((BLEND_RANGE.0..BLEND_RANGE.1).contains(&b.weight));
            assert_eq!(*redraws, 1);
        }
        let always = |_: &Blend| Ok(Some(HELD_OUT[1]));
        assert!(draw(&t, &HELD_OUT, &s, &mut Rng::new(3), always).is_err());
        Ok(())
    }

    /// The evaluator judges a sphere–cube blend at the middle of the range one of its two shapes,
    /// in its colour.
    #[test]
    fn a_blend_is_judged_one_of_its_shapes() -> Result<()> {
        let blend = Blend {
            object: WorldObject::canonical(Shape::Sphere, Colour::Blue),
            other: Shape::Cube,
            weight: 0.5,
        };
        let verdict = judge(&blend, 64)?;
        let (shape, colour) = verdict.expect("a surface");
        assert_eq!(colour, Colour::Blue);
        assert!([Shape::Sphere, Shape::Cube].contains(&shape), "{shape:?}");
        Ok(())
    }

    /// Amendment 1: a type whose probe blends fail the check at least half the time is excluded
    /// (always: excluded; exactly half: excluded; 3 of 8: kept), the rest keep their order, and
    /// distractors then cycle over the eligible types only.
    #[test]
    fn the_probe_excludes_types_failing_half_their_blends() -> Result<()> {
        let t = types(&crate::world::combinations(), &HELD_OUT);
        let s = DistractorSettings {
            probe: 8,
            ..DistractorSettings::protocol(120)
        };
        let calls = std::cell::Cell::new(0);
        let judge = |b: &Blend| {
            calls.set(calls.get() + 1);
            let k = (calls.get() - 1) % 8;
            let bad = Some(HELD_OUT[0]);
            let good = Some((b.object.shape, b.object.colour));
            Ok(match (b.object.colour, b.object.shape, b.other) {
                (Colour::Red, Shape::Sphere, Shape::Cube)
                | (Colour::Red, Shape::Cube, Shape::Sphere) => bad,
                (Colour::Red, Shape::Sphere, _) | (Colour::Red, _, Shape::Sphere) if k < 4 => None,
                (Colour::Green, ..) if k < 3 => bad,
                _ => good,
            })
        };
        let (eligible, excluded) = probe(&t, &HELD_OUT, &s, &mut Rng::new(5), judge)?;
        assert_eq!(calls.get(), 8 * 60);
        let red_sphere_pairs = t
            .iter()
            .filter(|&&(c, a, _)| c == Colour::Red && a == Shape::Sphere)
            .count();
        assert_eq!(excluded.len(), red_sphere_pairs);
        assert_eq!(excluded[0].failed, 8);
        assert!(excluded[1..].iter().all(|e| e.failed == 4 && e.probed == 8));
        assert_eq!(eligible.len() + excluded.len(), 60);
        assert!(eligible.iter().any(|&(c, ..)| c == Colour::Green));
        let drawn = draw(&eligible, &HELD_OUT, &s, &mut Rng::new(3), |b| {
            Ok(Some((b.object.shape, b.object.colour)))
        })?;
        for (i, (b, _)) in drawn.iter().enumerate() {
            let (c, x, y) = eligible[i % eligible.len()];
            assert_eq!(b.object.colour, c);
            assert!([x, y].contains(&b.object.shape) && [x, y].contains(&b.other));
        }
        Ok(())
    }

    /// A fake fit: each blend's latent is its weight; those above `limit` collapse.
    fn fake_fit(limit: f32) -> impl FnMut(&[Blend]) -> Result<Fitted> {
        move |blends: &[Blend]| {
            let w: Vec<f32> = blends.iter().map(|b| b.weight).collect();
            Ok(Fitted {
                latents: Tensor::from_vec(w.clone(), (w.len(), 1, 1), &candle_core::Device::Cpu)?,
                loss: vec![0.0; w.len()],
                refits: vec![3; w.len()],
                collapsed: (0..w.len()).filter(|&i| w[i] > limit).collect(),
            })
        }
    }

    /// Amendment 2: a blend whose latent stays collapsed is redrawn with its type and base
    /// shape, counted in its redraws, until none is; the others keep their blend and latent; with
    /// none collapsed nothing is redrawn; a blend that always collapses fails after the redraws
    /// allowed.
    #[test]
    fn collapsed_latents_are_redrawn() -> Result<()> {
        let t = types(&crate::world::combinations(), &HELD_OUT);
        let s = DistractorSettings::protocol(40);
        let pass = |b: &Blend| Ok(Some((b.object.shape, b.object.colour)));
        let drawn = draw(&t, &HELD_OUT, &s, &mut Rng::new(3), pass)?;
        let limit = 0.55;
        let first: Vec<bool> = drawn.iter().map(|(b, _)| b.weight > limit).collect();
        assert!(first.iter().any(|&c| c) && first.iter().any(|&c| !c));
        let mut after = drawn.clone();
        let (fitted, collapses) = fit_redrawing(
            &mut after,
            &HELD_OUT,
            &s,
            &mut Rng::new(9),
            pass,
            fake_fit(limit),
        )?;
        let latents = fitted.latents.flatten_all()?.to_vec1::<f32>()?;
        for i in 0..drawn.len() {
            let ((old, _), (new, redraws)) = (drawn[i], after[i]);
            assert!(new.weight <= limit);
            assert_eq!(latents[i], new.weight);
            assert_eq!(first[i], collapses[i] > 0);
            assert_eq!(redraws, collapses[i]);
            assert_eq!(
                (old.object.shape, old.other, old.object.colour),
                (new.object.shape, new.other, new.object.colour)
            );
            if !first[i] {
                assert_eq!(old.weight, new.weight);
            }
        }
        let mut untouched = drawn.clone();
        let (_, none) = fit_redrawing(
            &mut untouched,
            &HELD_OUT,
            &s,
            &mut Rng::new(9),
            pass,
            fake_fit(1.0),
        )?;
        assert!(none.iter().all(|&n| n == 0));
        assert!(untouched
            .iter()
            .zip(&drawn)
            .all(|(a, b)| a.0.weight == b.0.weight));
        let always = fit_redrawing(
            &mut after,
            &HELD_OUT,
            &s,
            &mut Rng::new(9),
            pass,
            fake_fit(0.0),
        );
        assert!(always.is_err());
        Ok(())
    }

    /// Scouting run (not a test of behaviour): for issue 53's worlds (S1 and S2 at prior seed 3,
    /// S1 at prior seed 4), amendment 1's probe from its own stream, judged at 64³; prints the
    /// excluded types with their failed probe blends.
    /// `cargo test --release -p clipsculpt-lab --lib -- --ignored --nocapture held_out_verdicts`
    #[test]
    #[ignore = "a minute; prints the excluded types"]
    fn held_out_verdicts_per_type() -> Result<()> {
        let s1 =
            "a red sphere,a green cube,a blue cylinder,a yellow cone,a white torus,a black capsule";
        let s2 =
            "a blue sphere,a yellow cube,a green cylinder,a black cone,a red torus,a white capsule";
        for (name, split, prior_seed) in [("S1", s1, 3), ("S2", s2, 3), ("S1'", s1, 4)] {
            let held = crate::split::parse_split(split).map_err(candle_core::Error::Msg)?;
            let t = types(&crate::world::combinations(), &held);
            let mut rng = Rng::new(prior_seed ^ PROBE_STREAM);
            let s = DistractorSettings::protocol(240);
            let (eligible, excluded) = probe(&t, &held, &s, &mut rng, |b| judge(b, 64))?;
            println!(
                "{name} (prior seed {prior_seed}): {} eligible types",
                eligible.len()
            );
            for e in excluded {
                let [a, b] = e.shapes;
                println!(
                    "  excluded {} {}/{}: {} of {}",
                    e.colour.name(),
                    a.name(),
                    b.name(),
                    e.failed,
                    e.probed
                );
            }
        }
        Ok(())
    }
}
