//! The NaN/inf scan of weight bytes: a float is not finite exactly when its exponent bits are
//! all ones, so the scan masks the raw little-endian words (no conversion), in parallel blocks
//! that the compiler vectorises. The slow path (counting, locating the first) runs only on a hit.

use rayon::prelude::*;

/// Bytes per parallel block.
const BLOCK: usize = 1 << 20;

/// The non-finite values of one tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NonFinite {
    /// How many values are NaN or infinite.
    pub(crate) count: usize,
    /// Element index of the first.
    pub(crate) first: usize,
}

/// Scans `bytes`, little-endian values of the safetensors dtype `dtype` (`F16`, `BF16`, `F32`,
/// `F64`; other dtypes are not scanned). `None` when every value is finite.
pub(crate) fn scan(dtype: &str, bytes: &[u8]) -> Option<NonFinite> {
    match dtype {
        "F16" => scan_words::<2>(bytes, 0x7c00),
        "BF16" => scan_words::<2>(bytes, 0x7f80),
        "F32" => scan_words::<4>(bytes, 0x7f80_0000),
        "F64" => scan_words::<8>(bytes, 0x7ff0_0000_0000_0000),
        _ => None,
    }
}

/// The value of a little-endian word of `N` bytes.
fn word<const N: usize>(c: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w[..N].copy_from_slice(&c[..N]); // ok: `chunks_exact(N)` hands out exactly N bytes
    u64::from_le_bytes(w)
}

fn scan_words<const N: usize>(bytes: &[u8], exponent: u64) -> Option<NonFinite> {
    let bad = |c: &[u8]| word::<N>(c) & exponent == exponent;
    let any = bytes
        .par_chunks(BLOCK)
        .any(|block| block.chunks_exact(N).fold(false, |acc, c| acc | bad(c)));
    if !any {
        return None;
    }
    let first = bytes.chunks_exact(N).position(bad)?;
    let count = bytes
        .par_chunks(BLOCK)
        .map(|b| b.chunks_exact(N).filter(|c| bad(c)).count())
        .sum();
    Some(NonFinite { count, first })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn finds_nan_and_inf_in_every_float_dtype() {
        let clean = [0.0f32, -1.5, f32::MAX, f32::MIN_POSITIVE, 1e-45];
        assert_eq!(scan("F32", &f32_bytes(&clean)), None);
        let dirty = [1.0f32, f32::NAN, 2.0, f32::NEG_INFINITY];
        assert_eq!(
            scan("F32", &f32_bytes(&dirty)),
            Some(NonFinite { count: 2, first: 1 })
        );
        let f16: Vec<u8> = [half::f16::ONE, half::f16::MAX, half::f16::INFINITY]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        assert_eq!(scan("F16", &f16), Some(NonFinite { count: 1, first: 2 }));
        let bf16: Vec<u8> = [half::bf16::NAN, half::bf16::MAX]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        assert_eq!(scan("BF16", &bf16), Some(NonFinite { count: 1, first: 0 }));
        let f64: Vec<u8> = [1.0f64, f64::MAX, f64::NAN]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        assert_eq!(scan("F64", &f64), Some(NonFinite { count: 1, first: 2 }));
        assert_eq!(scan("I64", &[0xff; 16]), None);
    }

    /// A hit in a later parallel block is found, with its global index.
    #[test]
    fn finds_a_value_past_the_first_block() {
        let mut v = vec![0.5f32; BLOCK / 4 * 3];
        v[BLOCK / 4 * 2 + 7] = f32::INFINITY;
        assert_eq!(
            scan("F32", &f32_bytes(&v)),
            Some(NonFinite {
                count: 1,
                first: BLOCK / 4 * 2 + 7
            })
        );
    }
}
