//! One-time costs of a fresh process on the bench's device: opening it, then the first use of each
//! of candle's kernel modules (one small op per module), each beside the same op run again.
//!
//! On a CUDA device candle ships its kernels as PTX text; the driver compiles a module to the GPU's
//! machine code when a process first uses it, and caches the result on disk (`CUDA_CACHE_PATH`,
//! by default `~/.nv/ComputeCache`). Run with an empty cache to see the cold cost, then again to
//! see the cached one:
//!
//! ```text
//! CUDA_CACHE_PATH=$(mktemp -d) CLIPSCULPT_DEVICE=cuda cargo bench --features cuda --bench kernel_load
//! ```
//!
//! `generate` and the other commands compile these modules while they load the models
//! (`src/device/kernels.rs`); this bench loads them one op at a time, as candle does alone.
//!
//! Prints one markdown row per step: milliseconds for the first call (the module's load included)
//! and for the second. On the CPU every row is a plain op (nothing to load).

#[path = "common/mod.rs"]
mod common;

use std::time::Instant;

use candle_core::{DType, Device, Result, Tensor};
use clipsculpt::device::memory as device_memory;
use common::BenchEnv;

/// One small op that needs the named kernel module.
type Probe = fn(&Tensor, &Device) -> Result<Tensor>;

/// The probes, one per module, in the order a pipeline would first meet them.
const PROBES: [(&str, Probe); 12] = [
    ("fill (full)", |_, d| Tensor::full(2f32, 4096, d)),
    ("affine", |x, _| x.affine(2.0, 1.0)),
    ("unary (exp)", |x, _| x.exp()),
    ("binary (add)", |x, _| x.add(x)),
    ("cast (f32→bf16)", |x, _| x.to_dtype(DType::BF16)),
    ("reduce (sum)", |x, _| x.sum_keepdim(0)),
    ("ternary (where)", |x, _| {
        x.ge(0f32)?.where_cond(x, &x.neg()?)
    }),
    ("indexing (index_select)", |x, d| {
        x.index_select(&Tensor::new(&[3u32, 1, 2], d)?, 0)
    }),
    ("sort (arg_sort)", |x, _| {
        x.reshape((64, 64))?.arg_sort_last_dim(true)
    }),
    ("conv (upsample)", |x, _| {
        x.reshape((1, 1, 64, 64))?.upsample_nearest2d(128, 128)
    }),
    ("cuBLAS (matmul)", |x, _| {
        let m = x.reshape((64, 64))?;
        m.matmul(&m)
    }),
    ("fused softmax", |x, _| {
        candle_nn::ops::softmax_last_dim(&x.reshape((64, 64))?)
    }),
];

fn millis(env: &BenchEnv, t: Instant) -> Result<f64> {
    device_memory::synchronize(&env.device)?;
    Ok(t.elapsed().as_secs_f64() * 1e3)
}

fn main() -> Result<()> {
    let t = Instant::now();
    let env = BenchEnv::from_env()?;
    let open_ms = millis(&env, t)?;
    println!("{}", env.describe()?);
    let var = |k| std::env::var(k).unwrap_or_else(|_| "(unset)".into());
    println!(
        "CUDA_CACHE_PATH={}, CUDA_CACHE_DISABLE={}",
        var("CUDA_CACHE_PATH"),
        var("CUDA_CACHE_DISABLE")
    );
    println!();
    println!("| step | first call ms | second call ms |");
    println!("|---|---|---|");
    println!("| open the device | {open_ms:.1} | |");
    // Made on the host, so that no kernel module is loaded before its probe.
    let host: Vec<f32> = (0..4096).map(|i| i as f32 * 1e-3 - 2.0).collect();
    let x = Tensor::from_vec(host, 4096, &env.device)?;
    let mut total = open_ms;
    for (name, probe) in PROBES {
        let mut ms = [0f64; 2];
        for m in &mut ms {
            let t = Instant::now();
            let y = probe(&x, &env.device)?;
            drop(y);
            *m = millis(&env, t)?;
        }
        total += ms[0];
        println!("| {name} | {:.1} | {:.2} |", ms[0], ms[1]);
    }
    println!("| **all first calls, the open included** | {total:.1} | |");
    Ok(())
}
