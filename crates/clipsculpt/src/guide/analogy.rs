//! Consensus completions of a bank of latents: new candidates by latent arithmetic.
//!
//! When a latent space composes attributes additively, the latent of an object the prior never
//! produces can be read off objects it does produce: if `c` shares one attribute with `a` and the
//! other with `b` ("a red cube", "a red sphere" and "a green cube" as `c`, `b`, `a`), then
//! `d = a + b − c` carries `a`'s other attribute and `b`'s ("a green sphere"): the fourth corner
//! of the parallelogram `a, c, b, d`. A triple qualifies when `a` and `b` are at most half as
//! similar to each other as each is to `c` ([`DIAGONAL_FRACTION`]; cosines of the latents
//! centred on the bank's mean, so a component every latent shares does not count as
//! similarity): `a−c` and `b−c` are the short edges, `a−b` the long diagonal.
//!
//! One triple proves little: unrelated latents also form such triples, and their completions are
//! scattered. A completion that many triples agree on is structure, so completions are clustered
//! and a cluster is kept only when its support (the number of triples that land in it) is at
//! least [`MIN_SUPPORT`] and at least half the largest cluster's. Completions that land on a bank
//! latent are that latent again and are dropped. Each kept cluster's mean is a candidate.
//!
//! Nothing here knows which attributes the latents encode: in a space without such structure the
//! clusters stay small and nothing is returned.

/// Smallest number of agreeing triples for a completion to be kept.
pub(crate) const MIN_SUPPORT: usize = 3;

/// A triple `(a, b, c)` qualifies when `cos(a, b) < DIAGONAL_FRACTION · min(cos(a, c), cos(b, c))`
/// and both of those cosines are positive.
pub(crate) const DIAGONAL_FRACTION: f32 = 0.5;

/// Cluster radius as a fraction of the median RMS distance between two bank latents: completions
/// nearer than this to each other are one candidate, and nearer than this to a bank latent are
/// that latent.
pub(crate) const RADIUS_FRACTION: f32 = 0.4;

/// Most element operations the search may take (`triples × latent length`, triples bounded by
/// `n³/2` for a bank of `n`): about a second of scalar work. Larger banks are skipped with a
/// warning: 36 toy latents of 2,048 values take 5·10⁷; 35 latents of the published 1024 × 1024
/// would take 2·10¹⁰.
pub const MAX_WORK: usize = 2_000_000_000;

/// A candidate latent completed from the bank.
#[derive(Debug, Clone)]
pub struct Completion {
    /// The mean of the cluster's completions, clamped to [−1, 1] (same length as a bank latent).
    pub(crate) latent: Vec<f32>,
    /// How many triples landed in the cluster.
    pub(crate) support: usize,
}

/// Consensus completions of `bank` (each latent flattened, all the same length), most supported
/// first. Empty for fewer than three latents or a bank without parallelogram structure.
pub fn completions(bank: &[Vec<f32>]) -> Vec<Completion> {
    let n = bank.len();
    if n < 3 || bank.iter().any(|z| z.len() != bank[0].len()) {
        return Vec::new();
    }
    let len = bank[0].len();
    let work = n * (n - 1) * (n - 2) / 2 * len;
    if work > MAX_WORK {
        tracing::warn!(
            "exploration skipped: completing a bank of {n} latents of {len} values would take about \
             {work:.1e} operations (the bound is {MAX_WORK:.0e}); use fewer negatives or --explore bank"
        );
        return Vec::new();
    }
    let mean: Vec<f32> = (0..len)
        .map(|k| bank.iter().map(|z| z[k]).sum::<f32>() / n as f32)
        .collect();
    let centred: Vec<Vec<f32>> = (bank.iter())
        .map(|z| z.iter().zip(&mean).map(|(v, m)| v - m).collect())
        .collect();
    let norms: Vec<f32> = centred.iter().map(|z| dot(z, z).sqrt()).collect();
    let cos: Vec<Vec<f32>> = (0..n)
        .map(|i| {
            (0..n)
                .map(|j| dot(&centred[i], &centred[j]) / (norms[i] * norms[j]).max(1e-12))
                .collect()
        })
        .collect();
    let mut pair_distances: Vec<f32> = Vec::with_capacity(n * (n - 1) / 2);
    for i in 0..n {
        for j in i + 1..n {
            pair_distances.push(rms_distance(&bank[i], &bank[j]));
        }
    }
    pair_distances.sort_by(f32::total_cmp);
    let radius = RADIUS_FRACTION * pair_distances[pair_distances.len() / 2];
    if radius.is_nan() || radius <= 0.0 {
        return Vec::new();
    }
    let mut clusters: Vec<(Vec<f32>, usize)> = Vec::new();
    let mut d = vec![0f32; len];
    for a in 0..n {
        for b in a + 1..n {
            for c in (0..n).filter(|&c| c != a && c != b) {
                let edge = cos[a][c].min(cos[b][c]);
                if edge <= 0.0 || cos[a][b] >= DIAGONAL_FRACTION * edge {
                    continue;
                }
                for (k, v) in d.iter_mut().enumerate() {
                    *v = (bank[a][k] + bank[b][k] - bank[c][k]).clamp(-1.0, 1.0);
                }
                if bank.iter().any(|z| rms_distance(z, &d) < radius) {
                    continue;
                }
                let home = clusters.iter_mut().find(|(sum, count)| {
                    let mean_distance = (sum.iter().zip(&d))
                        .map(|(s, v)| (s / *count as f32 - v).powi(2))
                        .sum::<f32>();
                    (mean_distance / d.len() as f32).sqrt() < radius
                });
                match home {
                    Some((sum, count)) => {
                        sum.iter_mut().zip(&d).for_each(|(s, v)| *s += v);
                        *count += 1;
                    }
                    None => clusters.push((d.clone(), 1)),
                }
            }
        }
    }
    let largest = clusters.iter().map(|c| c.1).max().unwrap_or(0);
    let floor = MIN_SUPPORT.max(largest.div_ceil(2));
    let mut kept: Vec<Completion> = clusters
        .into_iter()
        .filter(|c| c.1 >= floor)
        .map(|(sum, support)| Completion {
            latent: sum
                .iter()
                .map(|s| (s / support as f32).clamp(-1.0, 1.0))
                .collect(),
            support,
        })
        .collect();
    kept.sort_by_key(|c| std::cmp::Reverse(c.support));
    kept
}

fn dot(x: &[f32], y: &[f32]) -> f32 {
    x.iter().zip(y).map(|(a, b)| a * b).sum()
}

fn rms_distance(x: &[f32], y: &[f32]) -> f32 {
    let s: f32 = x.iter().zip(y).map(|(a, b)| (a - b).powi(2)).sum();
    (s / x.len().max(1) as f32).sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autodiff::rng::Rng;

    /// Latents `shape code + colour code` of a 4 × 4 world with one combination left out, plus
    /// noise: the left-out combination is recovered, and nothing else new is invented.
    #[test]
    fn recovers_the_missing_combination_of_an_additive_space() {
        let dim = 256;
        let mut rng = Rng::new(7);
        let mut code =
            |scale: f32| -> Vec<f32> { (0..dim).map(|_| rng.normal() * scale).collect() };
        let shapes: Vec<Vec<f32>> = (0..4).map(|_| code(0.25)).collect();
        let colours: Vec<Vec<f32>> = (0..4).map(|_| code(0.25)).collect();
        let missing = (2, 1);
        let mut bank = Vec::new();
        for (s, sc) in shapes.iter().enumerate() {
            for (c, cc) in colours.iter().enumerate() {
                if (s, c) != missing {
                    let noise = code(0.02);
                    bank.push((0..dim).map(|k| sc[k] + cc[k] + noise[k]).collect());
                }
            }
        }
        let found = completions(&bank);
        assert_eq!(
            found.len(),
            1,
            "supports: {:?}",
            found.iter().map(|c| c.support).collect::<Vec<_>>()
        );
        let truth: Vec<f32> = (0..dim)
            .map(|k| shapes[missing.0][k] + colours[missing.1][k])
            .collect();
        let err = rms_distance(&found[0].latent, &truth);
        let spread = rms_distance(&bank[0], &bank[5]);
        assert!(err < 0.1 * spread, "error {err} against spread {spread}");
        // (3 other shapes) × (3 other colours) parallelograms complete the missing corner.
        assert_eq!(found[0].support, 9);
    }

    /// The bank of the additive test above, each latent tiled to `tiles` times its length (the
    /// same cosines and parallelograms): past [`MAX_WORK`] the search is skipped, so the missing
    /// corner it recovers at length 256 is not computed at length 256 · 6,000.
    #[test]
    fn an_oversized_bank_is_skipped() {
        let dim = 256;
        let mut rng = Rng::new(7);
        let mut code =
            |scale: f32| -> Vec<f32> { (0..dim).map(|_| rng.normal() * scale).collect() };
        let parts: Vec<Vec<f32>> = (0..8).map(|_| code(0.25)).collect();
        let mut bank: Vec<Vec<f32>> = Vec::new();
        for s in 0..4 {
            for c in 4..8 {
                if (s, c) != (2, 5) {
                    bank.push((0..dim).map(|k| parts[s][k] + parts[c][k]).collect());
                }
            }
        }
        assert_eq!(completions(&bank).len(), 1, "the small bank completes");
        let tiled: Vec<Vec<f32>> = bank.iter().map(|z| z.repeat(6000)).collect();
        assert!(15 * 14 * 13 / 2 * tiled[0].len() > MAX_WORK);
        assert!(completions(&tiled).is_empty());
    }

    /// Unstructured latents give no completion.
    #[test]
    fn random_latents_give_nothing() {
        let mut rng = Rng::new(3);
        let bank: Vec<Vec<f32>> = (0..16)
            .map(|_| (0..128).map(|_| rng.normal() * 0.3).collect())
            .collect();
        assert!(completions(&bank).is_empty());
        assert!(completions(&bank[..2]).is_empty());
    }
}
