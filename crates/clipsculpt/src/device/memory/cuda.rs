//! The CUDA memory pool through cudarc's driver API (the crate candle's CUDA backend is built on).
//! Every call binds the device's context to the calling thread first.

use std::sync::Arc;

use candle_core::cuda_backend::cudarc::driver::{sys, CudaContext, DriverError};
use candle_core::{Device, Result};

use super::{Meter, Snapshot};

fn err(what: &str, e: DriverError) -> candle_core::Error {
    candle_core::Error::Msg(format!("CUDA memory: {what}: {e:?}"))
}

/// The device's context, bound to this thread.
fn context(device: &Device) -> Result<Arc<CudaContext>> {
    let ctx = device.as_cuda_device()?.cuda_stream().context().clone();
    ctx.bind_to_thread()
        .map_err(|e| err("binding the context", e))?;
    Ok(ctx)
}

/// The device's current memory pool (the one `cuMemAllocAsync` allocates from), or `None` when
/// the device does not allocate asynchronously (then cudarc uses `cuMemAlloc` and no pool).
fn pool(ctx: &CudaContext) -> Result<Option<sys::CUmemoryPool>> {
    if !ctx.has_async_alloc() {
        return Ok(None);
    }
    let mut pool: sys::CUmemoryPool = std::ptr::null_mut();
    // SAFETY: `pool` is a valid out-pointer and the device handle belongs to the live context.
    unsafe { sys::cuDeviceGetMemPool(&mut pool, ctx.cu_device()) }
        .result()
        .map_err(|e| err("cuDeviceGetMemPool", e))?;
    Ok(Some(pool))
}

fn get(pool: sys::CUmemoryPool, attr: sys::CUmemPool_attribute) -> Result<u64> {
    let mut v: u64 = 0;
    // SAFETY: the USED/RESERVED attributes are cuuint64_t, and `v` outlives the call.
    unsafe { sys::cuMemPoolGetAttribute(pool, attr, (&mut v as *mut u64).cast()) }
        .result()
        .map_err(|e| err("cuMemPoolGetAttribute", e))?;
    Ok(v)
}

pub(super) fn meter(device: &Device) -> Meter {
    match context(device) {
        Ok(ctx) if ctx.has_async_alloc() => Meter::CudaPool,
        _ => Meter::CudaDevice,
    }
}

pub(super) fn label(device: &Device) -> Result<String> {
    let ctx = context(device)?;
    let name = ctx.name().map_err(|e| err("device name", e))?;
    let (major, minor) = ctx
        .compute_capability()
        .map_err(|e| err("compute capability", e))?;
    Ok(format!(
        "{name} ({}, sm_{major}{minor})",
        super::super::device_name(device)
    ))
}

pub(super) fn reset_peak(device: &Device) -> Result<()> {
    device.synchronize()?;
    let ctx = context(device)?;
    if let Some(pool) = pool(&ctx)? {
        let mut zero: u64 = 0;
        // SAFETY: the high-water attribute is a cuuint64_t and may only be set to 0, which resets
        // it to the bytes in use now.
        unsafe {
            sys::cuMemPoolSetAttribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH,
                (&mut zero as *mut u64).cast(),
            )
        }
        .result()
        .map_err(|e| err("cuMemPoolSetAttribute", e))?;
    }
    Ok(())
}

pub(super) fn peak_bytes(device: &Device) -> Result<u64> {
    device.synchronize()?;
    let ctx = context(device)?;
    match pool(&ctx)? {
        Some(pool) => get(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_HIGH,
        ),
        // Without a pool there is no high-water mark: report what is in use now.
        None => {
            let (free, total) = ctx.mem_get_info().map_err(|e| err("cuMemGetInfo", e))?;
            Ok(total.saturating_sub(free) as u64)
        }
    }
}

pub(super) fn snapshot(device: &Device) -> Result<Snapshot> {
    device.synchronize()?;
    let ctx = context(device)?;
    let (free, total) = ctx.mem_get_info().map_err(|e| err("cuMemGetInfo", e))?;
    let (reserved, used) = match pool(&ctx)? {
        Some(pool) => (
            get(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
            )?,
            get(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_USED_MEM_CURRENT,
            )?,
        ),
        None => {
            let held = total.saturating_sub(free) as u64;
            (held, held)
        }
    };
    Ok(Snapshot {
        reserved_bytes: reserved,
        used_bytes: used,
        device_free_bytes: Some(free as u64),
        device_total_bytes: Some(total as u64),
    })
}

pub(super) fn trim(device: &Device) -> Result<()> {
    device.synchronize()?;
    let ctx = context(device)?;
    if let Some(pool) = pool(&ctx)? {
        // SAFETY: a valid pool handle; trimming only releases memory no allocation uses.
        unsafe { sys::cuMemPoolTrimTo(pool, 0) }
            .result()
            .map_err(|e| err("cuMemPoolTrimTo", e))?;
    }
    Ok(())
}
