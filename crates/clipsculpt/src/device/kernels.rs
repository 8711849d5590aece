//! candle's CUDA kernels compiled while the models load, not at the first op that needs them.
//!
//! candle ships its kernels as PTX text, one module per kind of op (binary, unary, indexing, …),
//! and loads a module the first time an op needs it. The driver then compiles the whole module to
//! the GPU's machine code and keeps the result in its disk cache (`CUDA_CACHE_PATH`, by default
//! `~/.nv/ComputeCache`; about 12 MB). With an empty cache the eight modules below took 18–28 s on
//! freshly started H200 machines, 8–13 s of it for the binary ops; from the cache, under 0.1 s.
//! Compiling them on several threads at once was no faster (the driver compiled one at a time).
//!
//! [`load`] loads the modules the pipeline's ops use into candle's own store, so that the one-time
//! cost of a fresh machine (or an empty cache) falls in the loading stage, with a message saying
//! where the cache is, instead of in the first stage that computes (`docs/gpu.md`).

use std::time::Instant;

use candle_core::cuda_backend::kernels::{self, Module};
use candle_core::{Device, Result};

/// The modules of the ops the pipeline runs, each with one of its kernels (candle loads a module
/// through one of its functions); not the quantized, convolution or sorting kernels.
static MODULES: [(Module, &str); 8] = [
    (kernels::AFFINE, "affine_f32"),
    (kernels::BINARY, "badd_f32"),
    (kernels::CAST, "cast_f32_bf16"),
    (kernels::FILL, "copy2d_f32"),
    (kernels::INDEXING, "is_u32_f32"),
    (kernels::REDUCE, "sum_f32"),
    (kernels::TERNARY, "where_u8_f32"),
    (kernels::UNARY, "uexp_f32"),
];

/// Slower than this, [`load`] says where the compiled kernels are cached.
const SLOW_SECONDS: f64 = 1.0;

/// The error of a module that the driver could not load, with the usual cause.
fn failed(function: &str, e: candle_core::Error) -> candle_core::Error {
    candle_core::Error::Msg(format!(
        "loading candle's CUDA kernels ({function}): {e}; the usual cause is a driver older than \
         the CUDA toolkit that built this binary (`scripts/build-cuda.sh` uses CUDA 13.0, which \
         needs driver release 580 or newer; `nvidia-smi` shows the driver's version)"
    ))
}

/// Loads [`MODULES`] on `device` (nothing on other devices).
pub(super) fn load(device: &Device) -> Result<()> {
    let Ok(cuda) = device.as_cuda_device() else {
        return Ok(());
    };
    let t = Instant::now();
    for (module, function) in &MODULES {
        cuda.get_or_load_func(function, module)
            .map_err(|e| failed(function, super::without_backtrace(e)))?;
    }
    let seconds = t.elapsed().as_secs_f64();
    if seconds > SLOW_SECONDS {
        match super::kernel_cache::folder_from_env() {
            Some(cache) => tracing::info!(
                "compiled candle's CUDA kernels in {seconds:.1} s; the driver caches them in {} \
                 (CUDA_CACHE_PATH), so later runs with that cache skip this",
                cache.display()
            ),
            None => tracing::info!(
                "compiled candle's CUDA kernels in {seconds:.1} s; the driver's cache is off \
                 (CUDA_CACHE_DISABLE=1) or has no folder (no HOME), so every run does"
            ),
        }
    }
    Ok(())
}
