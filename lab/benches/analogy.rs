//! The cost of exploration's analogy search (`--explore analogies`) at the published latent size (1024 × 1024
//! values per latent) for banks of 10, 35 and 100 negatives plus the prompt's own sample: seconds and the work
//! estimate the search checks against its bound. Random latents (uniform in [−1, 1]): the cost does not depend on
//! their structure, only on the bank's size. The bank itself (one prior sample per negative) is not timed here:
//! at the published size each sample is a full sampler run.
//!
//! Run: `cargo bench --bench analogy` (under a minute; about 0.9 GB for the largest bank).

use std::time::Instant;

use clipsculpt::autodiff::rng::Rng;
use clipsculpt::guide::{analogy_completions, ANALOGY_MAX_WORK};

const LATENT_LEN: usize = 1024 * 1024;

fn main() -> candle_core::Result<()> {
    println!("| negatives | bank | work (n³/2 × length) | bound | seconds | completions |");
    println!("|---|---|---|---|---|---|");
    for negatives in [10usize, 35, 100] {
        let n = negatives + 1;
        let mut rng = Rng::new(negatives as u64);
        let bank: Vec<Vec<f32>> = (0..n)
            .map(|_| -> candle_core::Result<Vec<f32>> {
                let u = rng.uniform_tensor(&[LATENT_LEN], &candle_core::Device::Cpu)?;
                ((u * 2.0)? - 1.0)?.to_vec1::<f32>()
            })
            .collect::<candle_core::Result<_>>()?;
        let work = n * (n - 1) * (n - 2) / 2 * LATENT_LEN;
        let t = Instant::now();
        let found = analogy_completions(&bank);
        let secs = t.elapsed().as_secs_f64();
        let verdict = if work > ANALOGY_MAX_WORK {
            "skipped (over the bound)"
        } else {
            "searched"
        };
        println!(
            "| {negatives} | {n} | {work:.1e} | {verdict} | {secs:.2} | {} |",
            found.len()
        );
    }
    Ok(())
}
