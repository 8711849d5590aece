//! The NaN/inf check of weight bytes: a float is not finite exactly when its exponent bits are
//! all ones. [`read_checked`] reads a tensor from its file (or bytes) in parallel blocks and
//! checks each block while it is still in cache, so the check costs next to nothing beside the
//! read; [`scan`] checks bytes without copying them. The slow path (counting, locating the first) runs only on
//! a hit.

use std::fs::File;

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
trait Float: WithDType + bytemuck::Pod {
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

/// Where a tensor's little-endian bytes come from.
#[derive(Clone, Copy)]
pub(crate) enum Source<'a> {
    /// Bytes in memory (tests).
    #[cfg(test)]
    Bytes(&'a [u8]),
    /// `len` bytes of `file` from `offset`, read straight into the tensor's memory (no map, so
    /// the file's pages never count in the process's resident memory).
    File {
        file: &'a File,
        offset: u64,
        len: u64,
    },
}

impl Source<'_> {
    fn len(&self) -> u64 {
        match self {
            #[cfg(test)]
            Source::Bytes(b) => b.len() as u64,
            Source::File { len, .. } => *len,
        }
    }

    /// Fills `out` with the bytes from `at` on.
    fn read(&self, at: u64, out: &mut [u8]) -> std::io::Result<()> {
        match self {
            #[cfg(test)]
            Source::Bytes(b) => {
                let at = at as usize;
                out.copy_from_slice(&b[at..at + out.len()]); // ok: blocks tile `len()` bytes
                Ok(())
            }
            Source::File { file, offset, .. } => read_exact_at(file, out, offset + at),
        }
    }
}

#[cfg(unix)]
fn read_exact_at(file: &File, out: &mut [u8], at: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, out, at)
}

#[cfg(windows)]
fn read_exact_at(file: &File, mut out: &mut [u8], mut at: u64) -> std::io::Result<()> {
    while !out.is_empty() {
        match std::os::windows::fs::FileExt::seek_read(file, out, at)? {
            0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            n => {
                out = &mut out[n..];
                at += n as u64;
            }
        }
    }
    Ok(())
}

/// The CPU tensor of `shape` whose little-endian values of the safetensors float dtype `dtype`
/// `src` holds, checked for NaN/inf block by block as it is read: `Ok(Err(_))` when some value is
/// not finite. Errors on another dtype, a byte count that does not match the shape, or a failed
/// read.
pub(crate) fn read_checked(
    dtype: &str,
    src: Source,
    shape: &[usize],
) -> candle_core::Result<Result<Tensor, NonFinite>> {
    read_dtype::<true>(dtype, src, shape)
}

/// [`read_checked`] without the check: the same reads, to measure what the check costs.
#[cfg(test)]
pub(crate) fn read_unchecked(
    dtype: &str,
    src: Source,
    shape: &[usize],
) -> candle_core::Result<Tensor> {
    let t = read_dtype::<false>(dtype, src, shape)?;
    t.map_err(|_| candle_core::Error::Msg("unreachable: nothing was checked".into()))
}

/// [`read`] for the safetensors dtype name `dtype`.
fn read_dtype<const CHECK: bool>(
    dtype: &str,
    src: Source,
    shape: &[usize],
) -> candle_core::Result<Result<Tensor, NonFinite>> {
    match dtype {
        "F16" => read::<f16, CHECK>(src, shape),
        "BF16" => read::<bf16, CHECK>(src, shape),
        "F32" => read::<f32, CHECK>(src, shape),
        "F64" => read::<f64, CHECK>(src, shape),
        other => candle_core::bail!("dtype {other} is not a float dtype"),
    }
}

/// The tensor of `shape` read from `src`, checked for NaN/inf when `CHECK`.
fn read<T: Float, const CHECK: bool>(
    src: Source,
    shape: &[usize],
) -> candle_core::Result<Result<Tensor, NonFinite>> {
    let n: usize = shape.iter().product();
    if src.len() != (n * T::N) as u64 {
        candle_core::bail!(
            "{} bytes cannot hold {n} values of {} bytes",
            src.len(),
            T::N
        );
    }
    let mut out = T::zeros(n);
    let bad = out
        .par_chunks_mut(BLOCK / T::N)
        .enumerate()
        .map(|(i, block)| read_block::<T, CHECK>(src, (i * BLOCK) as u64, block))
        .try_reduce(|| false, |a, b| Ok(a | b))?;
    if bad {
        let is_bad = |v: &T| v.bits() & T::EXPONENT == T::EXPONENT;
        if let Some(first) = out.iter().position(is_bad) {
            let count = out.par_iter().filter(|v| is_bad(v)).count();
            return Ok(Err(NonFinite { count, first }));
        }
    }
    Ok(Ok(Tensor::from_vec(out, shape, &Device::Cpu)?))
}

/// Reads one block of values from byte `at` of `src`; true when `CHECK` and one of them is not
/// finite.
fn read_block<T: Float, const CHECK: bool>(
    src: Source,
    at: u64,
    block: &mut [T],
) -> std::io::Result<bool> {
    src.read(at, bytemuck::cast_slice_mut(block))?;
    if cfg!(target_endian = "big") {
        for v in block.iter_mut() {
            *v = T::from_le(bytemuck::bytes_of(v));
        }
    }
    Ok(CHECK
        && block.iter().fold(false, |bad, v| {
            bad | (v.bits() & T::EXPONENT == T::EXPONENT)
        }))
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
        let t = read_checked("F32", Source::Bytes(&f32_bytes(&v)), &[2, 3])
            .unwrap()
            .unwrap();
        assert_eq!(t.dims(), &[2, 3]);
        assert_eq!(t.flatten_all().unwrap().to_vec1::<f32>().unwrap(), v);
        let h: Vec<f16> = v.iter().map(|x| f16::from_f32(*x)).collect();
        let bytes: Vec<u8> = h.iter().flat_map(|x| x.to_le_bytes()).collect();
        let t = read_checked("F16", Source::Bytes(&bytes), &[6])
            .unwrap()
            .unwrap();
        assert_eq!(t.to_vec1::<f16>().unwrap(), h);
        let b: Vec<bf16> = v.iter().map(|x| bf16::from_f32(*x)).collect();
        let bytes: Vec<u8> = b.iter().flat_map(|x| x.to_le_bytes()).collect();
        let t = read_checked("BF16", Source::Bytes(&bytes), &[3, 2])
            .unwrap()
            .unwrap();
        assert_eq!(t.flatten_all().unwrap().to_vec1::<bf16>().unwrap(), b);
        let d: Vec<f64> = v.iter().map(|x| *x as f64 / 3.0).collect();
        let bytes: Vec<u8> = d.iter().flat_map(|x| x.to_le_bytes()).collect();
        let t = read_checked("F64", Source::Bytes(&bytes), &[6, 1])
            .unwrap()
            .unwrap();
        assert_eq!(t.flatten_all().unwrap().to_vec1::<f64>().unwrap(), d);
    }

    /// A NaN in a later block is reported with its index and count; so is an inf in f16.
    #[test]
    fn read_checked_finds_non_finite_values() {
        let n = BLOCK / 4 * 3;
        let mut v: Vec<f32> = (0..n).map(|i| i as f32 * 1e-3).collect();
        v[BLOCK / 4 * 2 + 5] = f32::NAN;
        v[n - 1] = f32::NEG_INFINITY;
        let hit = read_checked("F32", Source::Bytes(&f32_bytes(&v)), &[n])
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
        let hit = read_checked("F16", Source::Bytes(&bytes), &[2])
            .unwrap()
            .unwrap_err();
        assert_eq!(hit, NonFinite { count: 1, first: 1 });
    }

    /// A byte count that does not match the shape, or a non-float dtype, is an error.
    #[test]
    fn read_checked_refuses_mismatched_bytes() {
        assert!(read_checked("F32", Source::Bytes(&[0u8; 10]), &[3]).is_err());
        assert!(read_checked("F32", Source::Bytes(&[0u8; 12]), &[2, 2]).is_err());
        assert!(read_checked("I64", Source::Bytes(&[0u8; 16]), &[2]).is_err());
    }

    /// From a file: the values at an offset, across several blocks; a short file is an error.
    #[test]
    fn read_checked_reads_a_file_range() {
        let n = BLOCK / 4 * 2 + 3;
        let v: Vec<f32> = (0..n).map(|i| (i as f32).sin()).collect();
        let mut bytes = vec![7u8; 5];
        bytes.extend(f32_bytes(&v));
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("w.bin");
        std::fs::write(&p, &bytes).unwrap();
        let file = File::open(&p).unwrap();
        let len = (n * 4) as u64;
        let src = Source::File {
            file: &file,
            offset: 5,
            len,
        };
        let t = read_checked("F32", src, &[n]).unwrap().unwrap();
        assert_eq!(t.to_vec1::<f32>().unwrap(), v);
        let past = Source::File {
            file: &file,
            offset: 9,
            len,
        };
        assert!(read_checked("F32", past, &[n]).is_err());
    }
}
