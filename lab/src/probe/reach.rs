//! How far a push of the sampler state reaches the finished latent (`cargo bench --bench diagnose
//! -- --reach`).
//!
//! Guidance through the prior edits the sampler state; the later denoising steps then decide how
//! much of the edit survives. For each held-out caption and seed, the unguided sample `z` is
//! compared with the fitted latent `f` of the right object, and the state at a chosen step is
//! pushed by the whole difference `v = f − z` before sampling on unguided. The table gives, per
//! step (σ), the share of `v` the finished latent keeps, `⟨z' − z, v⟩ / ⟨v, v⟩` (1: it ends at the
//! right latent; 0: the prior undoes the push), and the evaluator's verdict on `z'`. Control rows
//! push a seen caption's sample toward another of its own training instances (worlds with
//! several), which a prior that denoises keeps when the push is made at low noise, or else toward
//! another seen object of its colour. The last row gives the median of the instance rows per σ.
//!
//! On worlds with several instances per caption, two more tables give the same instance rows for
//! the two [reference denoisers](super::reference) of each caption's training instances (what a
//! prior trained to its optimum would keep, memorising them or generalising linearly), sampled
//! by the same Heun schedule from the same noise.

use anyhow::Result;
use candle_core::{Device, Tensor};

use super::reference::{Instances, Reference};
use crate::accuracy::judge;
use crate::{caption, Colour, Shape};
use clipsculpt::autodiff::checkpoint::Policy;
use clipsculpt::autodiff::rng::Rng;
use clipsculpt::pipeline::{stream, Models, RunSettings};
use clipsculpt::shap_e::{initial_noise, Denoiser, HeunDiscreteScheduler};

/// An x0 prediction for the state at the schedule's next evaluation.
type X0<'a> = dyn Fn(&HeunDiscreteScheduler, &Tensor) -> candle_core::Result<Tensor> + 'a;

/// The noise levels at which the state is pushed (the nearest Heun step to each).
const SIGMAS: [f32; 8] = [40.0, 20.0, 12.0, 5.0, 2.0, 1.0, 0.5, 0.2];

/// Prints the reach table for the `held_out` combinations, each pushed toward its own fitted
/// latent, and as many seen ones (see [`targets`]). `latents` holds `per_combo` fitted
/// instances of every combination, in `combos` order.
#[allow(clippy::too_many_arguments)]
pub fn reach_table(
    models: &Models,
    held_out: &[(Shape, Colour)],
    combos: &[(Shape, Colour)],
    latents: &Tensor,
    per_combo: usize,
    run: &RunSettings,
    seeds: u64,
    dev: &Device,
) -> Result<()> {
    let sched = HeunDiscreteScheduler::new(&models.shap_e.scheduler, run.prior_steps)?;
    let steps: Vec<usize> = SIGMAS.iter().map(|&s| nearest_step(&sched, s)).collect();
    let sigmas: Vec<String> = steps
        .iter()
        .map(|&i| format!("σ {:.2}", step_sigma(&sched, i)))
        .collect();
    println!("\n## Reach: share of the push toward the fitted latent kept at the end (verdict)\n");
    println!("| prompt | seed | unguided | {} |", sigmas.join(" | "));
    println!("|---|---|---|{}", "---|".repeat(steps.len()));
    let mut control: Vec<Vec<f32>> = vec![Vec::new(); steps.len()];
    for (shape, colour, i, instance) in targets(held_out, combos, per_combo) {
        let prompt = caption(shape, colour);
        let seen = !held_out.contains(&(shape, colour));
        let label = match combos[i] {
            _ if seen && instance > 0 => format!("{prompt} (seen) → its instance {instance}"),
            c if c == (shape, colour) => prompt.clone(),
            (s, c) => format!("{prompt} (seen) → {}", caption(s, c)),
        };
        let target = latents.get(i * per_combo + instance)?.unsqueeze(0)?;
        let embeds = models.text_embeds(&prompt, dev)?;
        let guidance = run
            .guidance_scale
            .map_or(models.shap_e.sampling.guidance_scale, |g| g as f32);
        let denoiser = Denoiser::new(&models.shap_e.prior, &embeds, guidance)?;
        let x0 = |s: &HeunDiscreteScheduler, x: &Tensor| denoiser.x0(s, x, &Policy::None);
        let (want_shape, want_colour) = combos[i];
        let right =
            |z: &Tensor| judge(models, z, run.grid, dev, &label).right(want_shape, want_colour);
        let mark = |ok: bool| if ok { "right" } else { "wrong" };
        for seed in 0..seeds {
            let mut rng = Rng::new(seed).fork(stream::PRIOR);
            let noise = initial_noise(&models.shap_e.prior, &embeds, &mut rng)?;
            let start = denoiser.initial_state(&sched, &noise)?;
            let (z, pushed) = push_at(&x0, &sched, &start, &target, &steps)?;
            let mut cells = Vec::new();
            for (k, (kept, z2)) in pushed.iter().enumerate() {
                cells.push(format!("{kept:.3} ({})", mark(right(z2))));
                if seen && instance > 0 {
                    control[k].push(*kept);
                }
            }
            let row = cells.join(" | ");
            println!("| {label} | {seed} | {} | {row} |", mark(right(&z)));
        }
    }
    if control.iter().all(|c| !c.is_empty()) {
        let medians: Vec<String> = control
            .iter_mut()
            .map(|c| format!("{:.3}", median(c)))
            .collect();
        println!("| median of the seen rows | | | {} |", medians.join(" | "));
    }
    if per_combo > 1 {
        for reference in Reference::ALL {
            reference_table(
                models, reference, held_out, combos, latents, per_combo, &sched, &steps, &sigmas,
                seeds, dev,
            )?;
        }
    }
    Ok(())
}

/// The instance control rows of [`reach_table`] for `reference`'s denoiser of each caption's
/// training instances (shares only), from the prior's initial noise of each seed.
#[allow(clippy::too_many_arguments)]
fn reference_table(
    models: &Models,
    reference: Reference,
    held_out: &[(Shape, Colour)],
    combos: &[(Shape, Colour)],
    latents: &Tensor,
    per_combo: usize,
    sched: &HeunDiscreteScheduler,
    steps: &[usize],
    sigmas: &[String],
    seeds: u64,
    dev: &Device,
) -> Result<()> {
    println!("\n## Reach of the {}\n", reference.name());
    println!("| prompt | seed | {} |", sigmas.join(" | "));
    println!("|---|---|{}", "---|".repeat(steps.len()));
    let mut columns: Vec<Vec<f32>> = vec![Vec::new(); steps.len()];
    for (shape, colour, i, instance) in targets(held_out, combos, per_combo) {
        if held_out.contains(&(shape, colour)) {
            continue;
        }
        let prompt = caption(shape, colour);
        let own = latents.narrow(0, i * per_combo, per_combo)?;
        let instances = Instances::new(&own)?;
        let target = own.get(instance)?.unsqueeze(0)?;
        let x0 =
            |s: &HeunDiscreteScheduler, x: &Tensor| instances.x0(reference, x, s.current_sigma());
        let embeds = models.text_embeds(&prompt, dev)?;
        // The prior's sampler only to start from its initial state (the same noise as the prior's rows).
        let prior = Denoiser::new(&models.shap_e.prior, &embeds, 1.0)?;
        for seed in 0..seeds {
            let mut rng = Rng::new(seed).fork(stream::PRIOR);
            let noise = initial_noise(&models.shap_e.prior, &embeds, &mut rng)?;
            let start = prior.initial_state(sched, &noise)?;
            let (_, pushed) = push_at(&x0, sched, &start, &target, steps)?;
            let cells: Vec<String> = pushed
                .iter()
                .map(|(kept, _)| format!("{kept:.3}"))
                .collect();
            for (c, (kept, _)) in columns.iter_mut().zip(&pushed) {
                c.push(*kept);
            }
            println!(
                "| {prompt} → its instance {instance} | {seed} | {} |",
                cells.join(" | ")
            );
        }
    }
    let medians: Vec<String> = columns
        .iter_mut()
        .map(|c| format!("{:.3}", median(c)))
        .collect();
    println!("| median | | {} |", medians.join(" | "));
    Ok(())
}

/// The sample from the state `start`, and for each of `steps` the share of the push toward
/// `target` that the finished latent keeps when the state at that step is pushed by the whole
/// difference, with that finished latent.
fn push_at(
    x0: &X0,
    sched: &HeunDiscreteScheduler,
    start: &Tensor,
    target: &Tensor,
    steps: &[usize],
) -> Result<(Tensor, Vec<(f32, Tensor)>)> {
    let mut states = Vec::new();
    let z = finish(x0, sched.clone(), start.clone(), &mut states)?;
    let v = (target - &z)?;
    let vv = v.sqr()?.sum_all()?.to_scalar::<f32>()?;
    let mut out = Vec::new();
    for &step in steps {
        let pushed = (&states[step] + &v)?;
        let z2 = finish(x0, sched.at_step(step)?, pushed, &mut Vec::new())?;
        let kept = ((&z2 - &z)? * &v)?.sum_all()?.to_scalar::<f32>()? / vv;
        out.push((kept, z2));
    }
    Ok((z, out))
}

/// The median of `values` (sorted in place; not empty).
fn median(values: &mut [f32]) -> f32 {
    values.sort_by(|a, b| a.total_cmp(b));
    let n = values.len();
    match n % 2 {
        0 => (values[n / 2 - 1] + values[n / 2]) / 2.0,
        _ => values[n / 2],
    }
}

/// `(shape, colour, target combination, target instance)`: every held-out combination toward
/// its own first instance, then as many seen ones: toward another instance of their own
/// combination when the world has several (a prior that denoises keeps such a push made at low
/// noise), else toward the next seen shape of their colour.
fn targets(
    held_out: &[(Shape, Colour)],
    combos: &[(Shape, Colour)],
    per_combo: usize,
) -> Vec<(Shape, Colour, usize, usize)> {
    let mut out: Vec<_> = held_out
        .iter()
        .filter_map(|&(s, c)| Some((s, c, combos.iter().position(|&x| x == (s, c))?, 0)))
        .collect();
    let seen: Vec<usize> = (0..combos.len())
        .filter(|&i| !held_out.contains(&combos[i]))
        .collect();
    for (k, &i) in seen.iter().enumerate().take(held_out.len()) {
        let (shape, colour) = combos[i];
        if per_combo > 1 {
            out.push((shape, colour, i, 1));
            continue;
        }
        let other = seen[k + 1..]
            .iter()
            .chain(&seen[..k])
            .find(|&&j| combos[j].1 == colour);
        if let Some(&j) = other {
            out.push((shape, colour, j, 0));
        }
    }
    out
}

/// Runs `sched` to the end from state `x` with the x0 prediction `x0`, pushing the state at the start of every
/// Heun step onto `states`; returns the finished latent.
fn finish(
    x0: &X0,
    mut sched: HeunDiscreteScheduler,
    mut x: Tensor,
    states: &mut Vec<Tensor>,
) -> Result<Tensor> {
    while !sched.done() {
        if sched.starts_step() {
            states.push(x.clone());
        }
        let out = x0(&sched, &x)?;
        x = sched.step(&out, &x)?;
    }
    Ok(x)
}

/// The σ at which Heun step `i` starts.
fn step_sigma(sched: &HeunDiscreteScheduler, i: usize) -> f32 {
    sched.at_step(i).map_or(0.0, |s| s.step_sigmas().0)
}

/// The Heun step whose starting σ is nearest to `sigma` (in log σ).
fn nearest_step(sched: &HeunDiscreteScheduler, sigma: f32) -> usize {
    let gap = |i: usize| (step_sigma(sched, i).ln() - sigma.ln()).abs();
    (0..sched.num_steps().saturating_sub(1))
        .min_by(|&a, &b| gap(a).total_cmp(&gap(b)))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::world::combinations;
    use crate::HELD_OUT;

    /// Held-out rows target their own combination; seen rows another instance of their own when
    /// the world has several, else another shape of their colour, never a held-out one.
    #[test]
    fn control_rows_pick_their_targets() {
        let combos = combinations();
        let rows = targets(&HELD_OUT, &combos, 4);
        assert_eq!(rows.len(), 2 * HELD_OUT.len());
        for &(s, c, i, instance) in &rows[..HELD_OUT.len()] {
            assert_eq!((combos[i], instance), ((s, c), 0));
        }
        for &(s, c, i, instance) in &rows[HELD_OUT.len()..] {
            assert!(!HELD_OUT.contains(&(s, c)));
            assert_eq!((combos[i], instance), ((s, c), 1));
        }
        for &(s, c, i, instance) in &targets(&HELD_OUT, &combos, 1)[HELD_OUT.len()..] {
            let (ts, tc) = combos[i];
            assert!(ts != s && tc == c && instance == 0 && !HELD_OUT.contains(&(ts, tc)));
        }
    }

    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(median(&mut [0.3, 0.1, 0.2]), 0.2);
        assert!((median(&mut [0.4, 0.1, 0.3, 0.2]) - 0.25).abs() < 1e-6);
    }
}
