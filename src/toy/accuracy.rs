//! `clipsculpt eval`: prior-only vs guided accuracy of the toy world over prompts and seeds, judged
//! on the exported meshes by [`classify`] (no CLIP involved).

use std::time::Instant;

use anyhow::Result;
use candle_core::{Device, Tensor};

use super::eval::{classify, Classification, EvalError};
use super::report::EvalTable;
use crate::autodiff::rng::Rng;
use crate::guide::{unscored, Target};
use crate::pipeline::{extract_mesh, Models, RunSettings};

/// Prior-only vs guided accuracy of the toy world: for every prompt and seed, classify the mesh
/// of the prior sample and of the guided latent by shape IoU and mean colour (no CLIP involved).
pub(crate) fn evaluate(
    models: &Models,
    prompts: &[String],
    seeds: &[u64],
    s: &RunSettings,
    device: &Device,
    mut on_item: impl FnMut(&str, u64),
) -> Result<[EvalTable; 2]> {
    let mut tables = [EvalTable::new(), EvalTable::new()];
    for prompt in prompts {
        let target = Target::new(&models.scorer, prompt, &models.negatives, s.guide.contrast)?;
        for &seed in seeds {
            on_item(prompt, seed);
            let rng = Rng::new(seed);
            let t = Instant::now();
            let z0 = models.run_sample(prompt, s, &rng, device)?;
            let prior_secs = t.elapsed().as_secs_f64();
            let judge = |z: &Tensor| -> Result<std::result::Result<Classification, EvalError>> {
                Ok(
                    match extract_mesh(&models.shap_e.decoder, z, s.grid, device) {
                        Ok(m) => classify(&m),
                        Err(e) => {
                            tracing::warn!("{prompt:?} seed {seed}: no mesh ({e:#})");
                            Err(EvalError::Empty)
                        }
                    },
                )
            };
            let before = judge(&z0)?;
            let outcome =
                |table: &mut EvalTable, c: &std::result::Result<_, _>, secs| -> Result<()> {
                    table.push(prompt, c.as_ref(), secs).map_err(|e| {
                        anyhow::anyhow!("prompt {prompt:?} is not a toy caption ({})", e.0)
                    })
                };
            outcome(&mut tables[0], &before, prior_secs)?;
            let t = Instant::now();
            let guided = models.guide(&target, unscored(&z0), s, &rng, device, |_, _| {})?;
            let after = judge(&guided.latent)?;
            outcome(
                &mut tables[1],
                &after,
                prior_secs + t.elapsed().as_secs_f64(),
            )?;
            // The prior's sample is what guidance must not fall below, also when exploration
            // started the loop elsewhere.
            let evals = &guided.trace.evals;
            if let Some(&(_, start)) = evals.first() {
                let best = evals.iter().map(|e| e.1).fold(start, f32::max);
                tables[1].set_last_scores([guided.start.prior_score.unwrap_or(start), best]);
            }
        }
    }
    Ok(tables)
}
