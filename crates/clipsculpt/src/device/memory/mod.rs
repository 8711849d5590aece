//! Memory accounting per device: a high-water mark per stage, a snapshot of what is held, and a
//! cache release before the graph-free export (`docs/gpu.md`, "Memory").
//!
//! - **CPU**: the figures are the host heap counter's ([`host::CountingAlloc`]); freed memory goes
//!   straight back to the allocator, so [`trim`] has nothing to release.
//! - **CUDA** (`--features cuda`): candle allocates through cudarc with `cuMemAllocAsync`, so a
//!   freed buffer returns to the device's memory pool and stays reserved there; `cuMemGetInfo`
//!   then neither falls when tensors are dropped nor shows a stage's peak. The figures come from
//!   the pool instead (`CU_MEMPOOL_ATTR_USED_MEM_HIGH`, `…_USED_MEM_CURRENT`,
//!   `…_RESERVED_MEM_CURRENT`), and [`trim`] hands the unused reserve back with
//!   `cuMemPoolTrimTo(pool, 0)`, the analogue of PyTorch's `torch.cuda.empty_cache()`.

use std::sync::atomic::{AtomicU64, Ordering};

use candle_core::{Device, Result};
use serde::Serialize;

#[cfg(feature = "cuda")]
mod cuda;
pub(crate) mod host;

/// What a device's memory figures measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Meter {
    /// Live host heap bytes (the counting allocator): every CPU tensor plus everything else the
    /// process allocates. Zero where the allocator is not installed.
    HostHeap,
    /// The CUDA device's current memory pool (what `cuMemAllocAsync` draws from).
    CudaPool,
    /// `cuMemGetInfo` only: the device does not allocate from a pool (no peak is tracked).
    CudaDevice,
}

/// Memory held on a device at one moment, in bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Snapshot {
    /// Bytes the allocator holds: the pool's reservation from the driver (CUDA), the live heap (CPU).
    pub(crate) reserved_bytes: u64,
    /// Bytes in live allocations (on the CPU the same as `reserved_bytes`).
    pub used_bytes: u64,
    /// Free device memory as the driver reports it (`cuMemGetInfo`); `None` on the CPU.
    pub(crate) device_free_bytes: Option<u64>,
    /// Total device memory; `None` on the CPU.
    pub(crate) device_total_bytes: Option<u64>,
}

/// Memory before and after a cache release ([`trim`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Trim {
    /// Before the release (after synchronising the device).
    pub before: Snapshot,
    /// After it.
    pub(crate) after: Snapshot,
}

/// Which meter [`peak_bytes`] and [`snapshot`] read on `device`.
pub fn meter(device: &Device) -> Meter {
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => cuda::meter(device),
        _ => Meter::HostHeap,
    }
}

/// The device's name for reports: `cpu`, or the GPU's name with its ordinal and compute
/// capability (`NVIDIA H200 (cuda:0, sm_90)`).
pub fn device_label(device: &Device) -> Result<String> {
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => cuda::label(device),
        _ => Ok(super::device_name(device)),
    }
}

/// Waits until the work queued on `device` has finished (a no-op on the CPU). Call it before
/// reading a clock or a memory figure.
pub fn synchronize(device: &Device) -> Result<()> {
    device.synchronize()
}

/// The CUDA counterpart of the host heap's floor: the peak a nested [`SpanMeter`] reset away.
static DEVICE_FLOOR: AtomicU64 = AtomicU64::new(0);

/// Starts a stage: the high-water mark is set to what is in use now.
pub fn reset_peak(device: &Device) -> Result<()> {
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => {
            DEVICE_FLOOR.store(0, Ordering::Relaxed);
            cuda::reset_peak(device)
        }
        _ => {
            host::reset_peak();
            Ok(())
        }
    }
}

/// The highest bytes in use since the last [`reset_peak`] (absolute, not above the stage's start;
/// on the CPU 0 when the counting allocator is not installed). Synchronises the device first.
pub fn peak_bytes(device: &Device) -> Result<u64> {
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => Ok(cuda::peak_bytes(device)?.max(DEVICE_FLOOR.load(Ordering::Relaxed))),
        _ => Ok(host::peak() as u64),
    }
}

/// Whether [`peak_bytes`] tracks a high-water mark on `device`: the CPU with the counting
/// allocator installed, a CUDA device that allocates from a pool.
pub fn has_peak(device: &Device) -> bool {
    match meter(device) {
        Meter::HostHeap => device.is_cpu() && host::is_counting(),
        Meter::CudaPool => true,
        Meter::CudaDevice => false,
    }
}

/// Measures a span's bytes above its start on any device, also inside a stage: it resets the
/// high-water mark when it starts, and when it is dropped the mark reached before it is carried
/// over ([`peak_bytes`] reports at least that until the next [`reset_peak`]), so the enclosing
/// stage's peak survives.
pub struct SpanMeter<'a> {
    device: &'a Device,
    base: u64,
    outer_peak: u64,
}

impl<'a> SpanMeter<'a> {
    /// Starts the span; `None` where `device` has no high-water mark ([`has_peak`]).
    pub fn start(device: &'a Device) -> Result<Option<Self>> {
        if !has_peak(device) {
            return Ok(None);
        }
        let outer_peak = peak_bytes(device)?;
        reset_peak(device)?;
        Ok(Some(Self {
            device,
            base: used_bytes(device)?,
            outer_peak,
        }))
    }

    /// Peak bytes above the span's start so far.
    pub fn peak_above_base(&self) -> Result<usize> {
        Ok(peak_bytes(self.device)?.saturating_sub(self.base) as usize)
    }

    /// Live bytes above the span's start now.
    pub fn live_above_base(&self) -> Result<usize> {
        Ok(used_bytes(self.device)?.saturating_sub(self.base) as usize)
    }
}

impl Drop for SpanMeter<'_> {
    fn drop(&mut self) {
        if self.device.is_cpu() {
            host::raise_floor(self.outer_peak as usize);
        } else {
            DEVICE_FLOOR.fetch_max(self.outer_peak, Ordering::Relaxed);
        }
    }
}

/// Bytes in live allocations on `device` now (the pool's used bytes on CUDA, the live heap on the
/// CPU). Synchronises the device first.
pub fn used_bytes(device: &Device) -> Result<u64> {
    Ok(snapshot(device)?.used_bytes)
}

/// What the device holds now. Synchronises the device first.
pub(crate) fn snapshot(device: &Device) -> Result<Snapshot> {
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => cuda::snapshot(device),
        _ => {
            let live = host::current() as u64;
            Ok(Snapshot {
                reserved_bytes: live,
                used_bytes: live,
                device_free_bytes: None,
                device_total_bytes: None,
            })
        }
    }
}

/// Synchronises, then releases the allocator's unused reserve to the driver (CUDA:
/// `cuMemPoolTrimTo(pool, 0)`; the CPU has no reserve, so before and after differ only by what
/// other threads did in between). Returns the figures around the release.
pub(crate) fn trim(device: &Device) -> Result<Trim> {
    synchronize(device)?;
    let before = snapshot(device)?;
    #[cfg(feature = "cuda")]
    if let Device::Cuda(_) = device {
        cuda::trim(device)?;
    }
    let after = snapshot(device)?;
    Ok(Trim { before, after })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPU meter is the heap counter: a span that held 32 MiB, freed before the peak is read,
    /// peaks at least that high (other tests reset the peak concurrently, `Models::load` and every
    /// stage, so the span excludes their resets), and the snapshot's used bytes are the live heap.
    #[test]
    fn cpu_stage_peak_sees_a_large_allocation() {
        let dev = Device::Cpu;
        assert_eq!(meter(&dev), Meter::HostHeap);
        assert_eq!(device_label(&dev).unwrap(), "cpu");
        let peak = host::peak_during(|| {
            let v = vec![1u8; 32 << 20];
            std::hint::black_box(&v);
        });
        assert!(peak >= 32 << 20, "peak {peak}");
        let t = trim(&dev).unwrap();
        assert!(t.before.device_free_bytes.is_none() && t.after.used_bytes > 0);
        assert_eq!(t.after.reserved_bytes, t.after.used_bytes);
    }
}
