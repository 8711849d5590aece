//! Releasing device memory before export and reporting what is in use.

use candle_core::Device;

use crate::device::memory::{self as device_memory, Trim};

/// Memory in use around an export, as far as it can be measured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct MemoryReport {
    /// The device's figures around the cache release ([`device_memory::trim`]): the CUDA pool's
    /// reserved/used bytes and the driver's free bytes before and after `cuMemPoolTrimTo`; the
    /// host heap on the CPU.
    pub(crate) trim: Trim,
    /// Live heap bytes of this process, when the counting allocator (`autodiff::memory::CountingAlloc`) is installed.
    pub(crate) host_live_bytes: Option<usize>,
    /// Free bytes on the GPU (CUDA builds only).
    pub(crate) device_free_bytes: Option<usize>,
    /// Total bytes on the GPU (CUDA builds only).
    pub(crate) device_total_bytes: Option<usize>,
}

impl std::fmt::Display for MemoryReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mib = |b: Option<usize>| b.map_or("n/a".to_string(), crate::autodiff::memory::mib);
        write!(
            f,
            "host live {}, device free {} of {}",
            mib(self.host_live_bytes),
            mib(self.device_free_bytes),
            mib(self.device_total_bytes)
        )
    }
}

/// Waits for queued device work to finish so that tensors the caller dropped are really freed,
/// hands the allocator's unused reserve back to the driver, then reports memory.
///
/// On the CPU this only reads the heap counter. Call it after dropping optimisation state and before
/// [`super::sample_grid`]. candle's CUDA allocator returns a dropped buffer to the device's memory
/// pool, which keeps it reserved; synchronising makes sure pending kernels that still used it have
/// completed, and trimming the pool ([`device_memory::trim`]) releases the reserve.
pub(crate) fn release_device_caches(device: &Device) -> candle_core::Result<MemoryReport> {
    let trim = device_memory::trim(device)?;
    let mut report = MemoryReport {
        trim,
        ..MemoryReport::default()
    };
    if let (Some(free), Some(total)) = (trim.after.device_free_bytes, trim.after.device_total_bytes)
    {
        report.device_free_bytes = Some(free as usize);
        report.device_total_bytes = Some(total as usize);
    }
    if crate::autodiff::memory::is_counting() {
        report.host_live_bytes = Some(crate::autodiff::memory::current());
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_release_reports_host_heap() {
        let r = release_device_caches(&Device::Cpu).unwrap();
        assert!(r.device_free_bytes.is_none());
        // Unit tests run under the counting allocator (see lib.rs).
        assert!(r.host_live_bytes.is_some_and(|b| b > 0));
        assert!(r.to_string().contains("host live"));
    }
}
