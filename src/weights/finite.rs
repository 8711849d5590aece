//! The NaN/inf check of weight bytes: a float is not finite exactly when its exponent bits are
//! all ones. [`read_checked`] copies a tensor out of its file bytes and checks each value in the
//! same pass (parallel blocks, so the check costs next to nothing beside the copy); [`scan`]
//! checks bytes without copying them. The slow path (counting, locating the first) runs only on
//! a hit.

use candle_core::{Device, Tensor, WithDType};
use half::vec::HalfBitsVecExt;
use half::{bf16, f16};
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

/// A float dtype of weight files, read from little-endian bytes.
trait Float: WithDType {
    /// Bytes per value.
    const N: usize;
    /// The exponent bits: all set exactly when the value is NaN or infinite.
    const EXPONENT: u64;
    /// The value of `N` little-endian bytes.
    fn from_le(c: &[u8]) -> Self;
    /// The raw bits.
    fn bits(self) -> u64;
    /// `n` zeros (from zeroed memory, so untouched pages cost nothing).
    fn zeros(n: usize) -> Vec<Self>;
}

macro_rules! float {
    ($t:ty, $n:expr, $exp:expr, |$z:ident| $zeros:expr) => {
        impl Float for $t {
            const N: usize = $n;
            const EXPONENT: u64 = $exp;
            fn from_le(c: &[u8]) -> Self {
                let mut w = [0u8; $n];
                w.copy_from_slice(&c[..$n]); // ok: `chunks_exact(N)` hands out exactly N bytes
                <$t>::from_le_bytes(w)
            }
            fn bits(self) -> u64 {
                self.to_bits() as u64
            }
            fn zeros($z: usize) -> Vec<Self> {
                $zeros
            }
        }
    };
}

float!(f16, 2, 0x7c00, |n| vec![0u16; n].reinterpret_into());
float!(bf16, 2, 0x7f80, |n| vec![0u16; n].reinterpret_into());
float!(f32, 4, 0x7f80_0000, |n| vec![0f32; n]);
float!(f64, 8, 0x7ff0_0000_0000_0000, |n| vec![0f64; n]);

/// The CPU tensor of `shape` that `bytes` hold (little-endian values of the safetensors float
/// dtype `dtype`), checked for NaN/inf while it is copied: `Ok(Err(_))` when some value is not
/// finite. Errors on another dtype or a byte count that does not match the shape.
pub(crate) fn read_checked(
    dtype: &str,
    bytes: &[u8],
    shape: &[usize],
) -> candle_core::Result<Result<Tensor, NonFinite>> {
    match dtype {
        "F16" => read::<f16, true>(bytes, shape),
        "BF16" => read::<bf16, true>(bytes, shape),
        "F32" => read::<f32, true>(bytes, shape),
        "F64" => read::<f64, true>(bytes, shape),
        other => candle_core::bail!("dtype {other} is not a float dtype"),
    }
}

/// [`read_checked`] without the check: the same parallel copy, to measure what the check costs.
#[cfg(test)]
pub(crate) fn read_unchecked(
    dtype: &str,
    bytes: &[u8],
    shape: &[usize],
) -> candle_core::Result<Tensor> {
    let t = match dtype {
        "F16" => read::<f16, false>(bytes, shape)?,
        "BF16" => read::<bf16, false>(bytes, shape)?,
        "F32" => read::<f32, false>(bytes, shape)?,
        "F64" => read::<f64, false>(bytes, shape)?,
        other => candle_core::bail!("dtype {other} is not a float dtype"),
    };
    t.map_err(|_| candle_core::Error::Msg("unreachable: nothing was checked".into()))
}

/// The copy of `bytes` as a tensor of `shape`, checked for NaN/inf when `CHECK`.
fn read<T: Float, const CHECK: bool>(
    bytes: &[u8],
    shape: &[usize],
) -> candle_core::Result<Result<Tensor, NonFinite>> {
    let n: usize = shape.iter().product();
    if bytes.len() != n * T::N {
        candle_core::bail!(
            "{} bytes cannot hold {n} values of {} bytes",
            bytes.len(),
            T::N
        );
    }
    let mut out = T::zeros(n);
    let bad = out
        .par_chunks_mut(BLOCK / T::N)
        .zip(bytes.par_chunks(BLOCK))
        .map(|(o, b)| copy_block::<T, CHECK>(o, b))
        .reduce(|| false, |a, b| a | b);
    if bad {
        if let Some(hit) = scan_words_n(bytes, T::N, T::EXPONENT) {
            return Ok(Err(hit));
        }
    }
    Ok(Ok(Tensor::from_vec(out, shape, &Device::Cpu)?))
}

/// Copies one block of values; true when `CHECK` and one of them is not finite.
fn copy_block<T: Float, const CHECK: bool>(out: &mut [T], bytes: &[u8]) -> bool {
    let mut bad = false;
    for (o, c) in out.iter_mut().zip(bytes.chunks_exact(T::N)) {
        let v = T::from_le(c);
        if CHECK {
            bad |= v.bits() & T::EXPONENT == T::EXPONENT;
        }
        *o = v;
    }
    bad
}

/// [`scan_words`] for a run-time word size.
fn scan_words_n(bytes: &[u8], n: usize, exponent: u64) -> Option<NonFinite> {
    match n {
        2 => scan_words::<2>(bytes, exponent),
        4 => scan_words::<4>(bytes, exponent),
        _ => scan_words::<8>(bytes, exponent),
    }
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

    /// The checked read returns the values of every float dtype, bit for bit, with the shape.
    #[test]
    fn read_checked_copies_every_float_dtype() {
        let v = [0.0f32, -1.5, 3.25, 1e-3, 65504.0, -2.0];
        let t = read_checked("F32", &f32_bytes(&v), &[2, 3])
            .unwrap()
            .unwrap();
        assert_eq!(t.dims(), &[2, 3]);
        assert_eq!(t.flatten_all().unwrap().to_vec1::<f32>().unwrap(), v);
        let h: Vec<f16> = v.iter().map(|x| f16::from_f32(*x)).collect();
        let bytes: Vec<u8> = h.iter().flat_map(|x| x.to_le_bytes()).collect();
        let t = read_checked("F16", &bytes, &[6]).unwrap().unwrap();
        assert_eq!(t.to_vec1::<f16>().unwrap(), h);
        let b: Vec<bf16> = v.iter().map(|x| bf16::from_f32(*x)).collect();
        let bytes: Vec<u8> = b.iter().flat_map(|x| x.to_le_bytes()).collect();
        let t = read_checked("BF16", &bytes, &[3, 2]).unwrap().unwrap();
        assert_eq!(t.flatten_all().unwrap().to_vec1::<bf16>().unwrap(), b);
        let d: Vec<f64> = v.iter().map(|x| *x as f64 / 3.0).collect();
        let bytes: Vec<u8> = d.iter().flat_map(|x| x.to_le_bytes()).collect();
        let t = read_checked("F64", &bytes, &[6, 1]).unwrap().unwrap();
        assert_eq!(t.flatten_all().unwrap().to_vec1::<f64>().unwrap(), d);
    }

    /// A NaN in a later block is reported with its index and count; so is an inf in f16.
    #[test]
    fn read_checked_finds_non_finite_values() {
        let n = BLOCK / 4 * 3;
        let mut v: Vec<f32> = (0..n).map(|i| i as f32 * 1e-3).collect();
        v[BLOCK / 4 * 2 + 5] = f32::NAN;
        v[n - 1] = f32::NEG_INFINITY;
        let hit = read_checked("F32", &f32_bytes(&v), &[n])
            .unwrap()
            .unwrap_err();
        assert_eq!(
            hit,
            NonFinite {
                count: 2,
                first: BLOCK / 4 * 2 + 5
            }
        );
        let bytes: Vec<u8> = [f16::ONE, f16::NEG_INFINITY]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let hit = read_checked("F16", &bytes, &[2]).unwrap().unwrap_err();
        assert_eq!(hit, NonFinite { count: 1, first: 1 });
    }

    /// A byte count that does not match the shape, or a non-float dtype, is an error.
    #[test]
    fn read_checked_refuses_mismatched_bytes() {
        assert!(read_checked("F32", &[0u8; 10], &[3]).is_err());
        assert!(read_checked("F32", &[0u8; 12], &[2, 2]).is_err());
        assert!(read_checked("I64", &[0u8; 16], &[2]).is_err());
    }
}
