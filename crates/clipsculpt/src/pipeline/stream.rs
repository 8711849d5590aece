//! The random streams of a run, forked from its root generator `Rng::new(seed)`: the same
//! stream numbers give `generate`, `sample` and `eval` the same draws for the same seed.

/// The prior's initial noise.
pub const PRIOR: u64 = 1;
/// The guided optimization (cameras, backgrounds, crops).
pub(crate) const GUIDE: u64 = 3;
/// The before/after preview contact sheets.
pub const PREVIEW: u64 = 4;
/// Exploration: the bank's prior noise and the probes' draws.
pub(crate) const EXPLORE: u64 = 5;
/// Guided sampling (cameras, backgrounds, crops of each guided sampler step).
pub(crate) const SAMPLING: u64 = 6;
/// Best of N noises: candidate `k ≥ 1`'s root generator is this stream's fork `k`.
pub(crate) const CANDIDATES: u64 = 7;
/// The fresh noise a saved latent is re-noised with (`vary`, `edit`).
pub(crate) const RENOISE: u64 = 8;
