//! The attention's head layout on plain arrays: rows of `heads · d` features, `(n, t, heads·d)`,
//! split into one `(t, d)` matrix per (batch × head) pair, `(n, heads, t, d)`, and merged back;
//! pairs in parallel (candle's strided copy runs on the calling thread alone).

use super::real::Real;
use super::rows::new_by_chunks;

/// The sizes of a head layout: `n` batches of `t` tokens, `heads` heads of `d` features.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Heads {
    pub(crate) n: usize,
    pub(crate) t: usize,
    pub(crate) heads: usize,
    pub(crate) d: usize,
}

impl Heads {
    fn len(&self) -> usize {
        self.n * self.t * self.heads * self.d
    }

    /// Where row `r` of pair `p`'s `(t, d)` matrix starts in the `(n, t, heads·d)` layout.
    fn merged_row(&self, p: usize, r: usize) -> usize {
        let (b, h) = (p / self.heads, p % self.heads);
        ((b * self.t + r) * self.heads + h) * self.d
    }
}

/// `x (n, t, heads·d)` as `(n, heads, t, d)`, each element `v·s + 0` when `scale` is `Some(s)`
/// (rounded as candle's `affine(s, 0)`).
pub(crate) fn split_heads<T: Real>(x: &[T], s: Heads, scale: Option<T>) -> Vec<T> {
    assert_eq!(
        x.len(),
        s.len(),
        "split_heads: {} elements for {s:?}",
        x.len()
    );
    let (t, d) = (s.t, s.d);
    new_by_chunks(
        s.len(),
        t * d,
        || (),
        |_, p, out: &mut [T]| {
            for (r, row) in out.chunks_exact_mut(d).enumerate() {
                copy_scaled(row, &x[s.merged_row(p, r)..][..d], scale);
            }
        },
    )
}

/// `o (n, heads, t, d)` as `(n, t, heads·d)`, each element `v·s + 0` when `scale` is `Some(s)`.
pub(crate) fn merge_heads<T: Real>(o: &[T], s: Heads, scale: Option<T>) -> Vec<T> {
    assert_eq!(
        o.len(),
        s.len(),
        "merge_heads: {} elements for {s:?}",
        o.len()
    );
    let (t, width) = (s.t, s.heads * s.d);
    // One token's row of every head per chunk: rows of the merged layout.
    new_by_chunks(
        s.len(),
        width,
        || (),
        |_, row, out: &mut [T]| {
            let (b, r) = (row / t, row % t);
            for (h, part) in out.chunks_exact_mut(s.d).enumerate() {
                let p = b * s.heads + h;
                copy_scaled(part, &o[(p * t + r) * s.d..][..s.d], scale);
            }
        },
    )
}

fn copy_scaled<T: Real>(dst: &mut [T], src: &[T], scale: Option<T>) {
    match scale {
        Some(by) => {
            let zero = T::zero();
            for (y, &v) in dst.iter_mut().zip(src) {
                *y = v * by + zero;
            }
        }
        None => dst.copy_from_slice(src),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Heads = Heads {
        n: 2,
        t: 5,
        heads: 3,
        d: 4,
    };

    fn data() -> Vec<f32> {
        (0..S.len())
            .map(|i| (i as f32 * 0.37).sin() - 0.2)
            .collect()
    }

    /// Element `(b, h, r, c)` of the split is element `(b, r, h·d + c)` of the input, scaled as
    /// `v·s + 0`; merging the split gives the input back bit for bit.
    #[test]
    fn split_permutes_and_merge_inverts() {
        let x = data();
        for scale in [None, Some(0.3f32)] {
            let y = split_heads(&x, S, scale);
            for (b, h, r, c) in (0..S.n).flat_map(|b| {
                (0..S.heads).flat_map(move |h| {
                    (0..S.t).flat_map(move |r| (0..S.d).map(move |c| (b, h, r, c)))
                })
            }) {
                let v = x[(b * S.t + r) * S.heads * S.d + h * S.d + c];
                let want = scale.map_or(v, |s| v * s + 0.0);
                let got = y[((b * S.heads + h) * S.t + r) * S.d + c];
                assert_eq!(got.to_bits(), want.to_bits());
            }
        }
        let back = merge_heads(&split_heads(&x, S, None), S, None);
        assert!(back.iter().zip(&x).all(|(a, b)| a.to_bits() == b.to_bits()));
        // A negative zero scaled by `v·s + 0` becomes +0, as candle's affine makes it.
        let z = split_heads(&vec![-0.0f32; S.len()], S, Some(0.5));
        assert!(z.iter().all(|v| v.to_bits() == 0));
    }
}
