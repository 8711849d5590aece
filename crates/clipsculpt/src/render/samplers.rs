//! Sample distances along rays (diffusers `StratifiedRaySampler` with depth mode "linear" and
//! `ImportanceRaySampler` without blur pooling; `docs/shap-e.md`, "Rendering"). Pure arithmetic on one ray at a time;
//! the uniform draws are arguments, so tests can inject them and recomputation is deterministic.

/// torch's `linspace(0, 1, n)` in f32 (first half counted up from 0, second half down from 1).
fn unit_linspace(n: usize) -> Vec<f32> {
    if n == 1 {
        return vec![0.0];
    }
    let step = 1.0f32 / (n - 1) as f32;
    (0..n)
        .map(|i| {
            if i < n / 2 {
                i as f32 * step
            } else {
                1.0 - step * (n - 1 - i) as f32
            }
        })
        .collect()
}

/// Bin edges around sorted samples `ts` in `[t0, t1]`: midpoints between neighbours, `t0` below
/// the first and `t1` above the last (diffusers `VolumeRange.partition`).
pub(crate) fn partition(t0: f32, t1: f32, ts: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let mids: Vec<f32> = ts.windows(2).map(|w| (w[1] + w[0]) * 0.5).collect();
    let mut lower = vec![t0];
    lower.extend_from_slice(&mids);
    let mut upper = mids;
    upper.push(t1);
    (lower, upper)
}

/// Stratified samples: `n = draws.len()` evenly spaced points on `[t0, t1]`, each moved
/// uniformly within its bin by `draws[k] ∈ [0, 1)`. Sorted ascending.
pub(crate) fn stratified(t0: f32, t1: f32, draws: &[f32]) -> Vec<f32> {
    let ts: Vec<f32> = unit_linspace(draws.len())
        .into_iter()
        .map(|u| t0 * (1.0 - u) + t1 * u)
        .collect();
    let (lower, upper) = partition(t0, t1, &ts);
    lower
        .iter()
        .zip(&upper)
        .zip(draws)
        .map(|((&lo, &hi), &r)| lo + (hi - lo) * r)
        .collect()
}

/// Importance samples from a coarse pass: the coarse samples `coarse_ts` (sorted, in
/// `[t0, t1]`) define bins ([`partition`]); bin `k` is chosen with probability
/// `(w_k + 1e-5)/Σ(w + 1e-5)` by inverse CDF of `index_draws` (searchsorted left), and the
/// sample is placed in the bin by `offset_draws`. Returns the new samples, sorted.
pub(crate) fn importance(
    t0: f32,
    t1: f32,
    coarse_ts: &[f32],
    weights: &[f32],
    index_draws: &[f32],
    offset_draws: &[f32],
) -> Vec<f32> {
    let (lower, upper) = partition(t0, t1, coarse_ts);
    let w: Vec<f32> = weights.iter().map(|w| w + 1e-5).collect();
    let total: f32 = w.iter().sum();
    let mut acc = 0.0f32;
    let cdf: Vec<f32> = w
        .iter()
        .map(|x| {
            acc += x / total;
            acc
        })
        .collect();
    let last = cdf.len() - 1;
    let mut out: Vec<f32> = index_draws
        .iter()
        .zip(offset_draws)
        .map(|(&u, &r)| {
            let k = cdf.partition_point(|&c| c < u).min(last);
            lower[k] + (upper[k] - lower[k]) * r
        })
        .collect();
    out.sort_by(f32::total_cmp);
    out
}

/// Sorted union of two sample sets.
pub(crate) fn merge(a: &[f32], b: &[f32]) -> Vec<f32> {
    let mut out: Vec<f32> = a.iter().chain(b).copied().collect();
    out.sort_by(f32::total_cmp);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// With draws of ½, stratified samples on [0, 3] with 4 bins (points 0, 1, 2, 3, bin edges
    /// 0, .5, 1.5, 2.5, 3) sit at the bin centres .25, 1, 2, 2.75.
    #[test]
    fn stratified_centres() {
        let ts = stratified(0.0, 3.0, &[0.5; 4]);
        for (a, b) in ts.iter().zip([0.25, 1.0, 2.0, 2.75]) {
            assert!((a - b).abs() < 1e-6, "{ts:?}");
        }
    }

    /// All coarse weight in bin 2 sends (almost) every fine sample there.
    #[test]
    fn importance_follows_the_weights() {
        let coarse = [0.5, 1.5, 2.5, 3.5];
        let w = [0.0, 0.0, 1.0, 0.0];
        let u: Vec<f32> = (0..8).map(|i| 0.05 + 0.9 * i as f32 / 7.0).collect();
        let ts = importance(0.0, 4.0, &coarse, &w, &u, &[0.5; 8]);
        assert!(ts.iter().all(|&t| (t - 2.5).abs() < 1e-6), "{ts:?}");
        assert!(ts.windows(2).all(|p| p[0] <= p[1]));
        assert_eq!(merge(&[3.0, 1.0], &[2.0]), vec![1.0, 2.0, 3.0]);
    }
}
