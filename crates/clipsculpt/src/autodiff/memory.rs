//! Memory meters for in-process comparisons. The heap counter itself, [`CountingAlloc`] (installed
//! as the `#[global_allocator]` by the binary, the benches and the tests), lives in
//! [`crate::device::memory`] beside the device pool's meters and is re-exported here; it counts
//! live heap bytes and their peak, which includes every candle CPU tensor. RSS cannot rank
//! configurations inside one process (freed memory stays resident), so all in-process comparisons
//! use this counter.

pub use crate::device::memory::host::{current, is_counting, CountingAlloc};
pub(crate) use crate::device::memory::host::{peak, reset_peak};

/// Keeps freed heap memory mapped for reuse (glibc: no `mmap` for large blocks, no trimming of
/// the heap top). Call once at program start, before threads allocate.
///
/// By default glibc serves every block of 32 MiB or more (its largest mmap threshold) with its
/// own `mmap` and unmaps it on free. The fused passes allocate such temporaries for every chunk of
/// rays (one 512-ray chunk of the 256-wide decoder: ~100 MiB per hidden layer), so each chunk paid
/// a page fault per 4 KiB and the kernel's page clearing: 13 % `clear_page_erms` and ~5 % fault
/// handling in the profile of `cargo bench --bench render`, which took 48.7 s with the default
/// and 34.1 s with the heap reused (same build, same machine). The cost: the process keeps its
/// high-water mark of heap resident instead of returning it. The live-byte counters are
/// unaffected. A no-op off glibc.
pub fn keep_freed_pages() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: `mallopt` only changes allocator parameters; both are documented options, and a
    // rejected value leaves the default in place (the return value says so; nothing to undo).
    unsafe {
        libc::mallopt(libc::M_MMAP_MAX, 0);
        libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX);
    }
}

/// Measures the peak heap bytes a phase adds above the live bytes at its start.
#[derive(Debug, Clone, Copy)]
pub struct PeakMeter {
    base: usize,
}

impl PeakMeter {
    /// Starts a phase: resets the peak to the current live bytes.
    pub fn start() -> Self {
        Self { base: reset_peak() }
    }

    /// Peak bytes above the phase's start so far.
    pub fn peak_above_base(&self) -> usize {
        peak().saturating_sub(self.base)
    }
}

/// Formats a byte count as MiB with one decimal.
pub fn mib(bytes: usize) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// Parses a byte size such as `6GiB`, `512MiB`, `1.5GB`, `800k` or `1048576` (case-insensitive;
/// KiB/MiB/GiB are powers of 1024, KB/MB/GB of 1000, a bare K/M/G means KiB/MiB/GiB).
pub fn parse_bytes(s: &str) -> Result<usize, String> {
    let t = s.trim().to_ascii_lowercase();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let unit = unit.trim();
    let mult: f64 = match unit {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "m" | "mib" => 1024.0 * 1024.0,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        _ => {
            return Err(format!(
                "invalid size '{s}': unknown unit '{unit}' (use B, KiB, MiB, GiB, KB, MB, GB)"
            ))
        }
    };
    let value: f64 = num.parse().map_err(|_| {
        format!("invalid size '{s}': expected a number followed by a unit, e.g. 6GiB")
    })?;
    if !value.is_finite() || value <= 0.0 {
        return Err(format!("invalid size '{s}': must be positive"));
    }
    Ok((value * mult).round() as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sizes() {
        assert_eq!(parse_bytes("6GiB"), Ok(6 << 30));
        assert_eq!(parse_bytes("512 MiB"), Ok(512 << 20));
        assert_eq!(parse_bytes("1.5GB"), Ok(1_500_000_000));
        assert_eq!(parse_bytes("800k"), Ok(800 * 1024));
        assert_eq!(parse_bytes("1048576"), Ok(1 << 20));
        for bad in ["", "GiB", "-1GiB", "0", "3 parsecs", "1.2.3MB"] {
            assert!(parse_bytes(bad).is_err(), "{bad} should be rejected");
        }
    }

    #[test]
    fn meter_sees_allocations_when_counting() {
        assert!(is_counting(), "the unit-test binary installs CountingAlloc");
        // Other tests allocate and free concurrently, so only assert what they cannot undo.
        let v = vec![1u8; 64 << 20];
        assert!(current() >= 64 << 20 && peak() >= current());
        drop(v);
    }
}
