//! Softmax over the rows of a plain array, with an optional additive mask.

use super::real::Real;

/// Softmax of each row of `s (rows, t)` in place after adding the mask's rows (0 or −∞).
pub(crate) fn softmax_rows<T: Real>(s: &mut [T], t: usize, mask: Option<&[T]>) {
    for (i, row) in s.chunks_exact_mut(t).enumerate() {
        if let Some(mask) = mask {
            for (v, &m) in row.iter_mut().zip(&mask[i * t..(i + 1) * t]) {
                *v += m;
            }
        }
        let max = row
            .iter()
            .fold(T::from_f64(f64::NEG_INFINITY), |a, &b| a.max_of(b));
        let mut sum = T::zero();
        for v in row.iter_mut() {
            // A masked score (−∞) weighs exactly 0, as the composed softmax gives.
            *v = if *v == T::from_f64(f64::NEG_INFINITY) {
                T::zero()
            } else {
                (*v - max).exp()
            };
            sum += *v;
        }
        let inv = T::one() / sum;
        for v in row.iter_mut() {
            *v *= inv;
        }
    }
}
