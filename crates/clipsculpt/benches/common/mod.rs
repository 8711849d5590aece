//! What the device-generic benches share: the device, dtype and workload size chosen by the
//! environment, and a timer that synchronises the device and reads the memory meters.
//!
//! - `CLIPSCULPT_DEVICE=cpu|cuda|cuda:N` (default cpu; cuda needs `--features cuda`)
//! - `CLIPSCULPT_DTYPE=f32|bf16|f16` (the frozen weights' dtype; default bf16 on CUDA, f32 on CPU)
//! - `CLIPSCULPT_BENCH_SIZE=cpu|gpu|tiny` (default cpu: the sizes the tables in the README were
//!   measured with; gpu: GPU-sized workloads; tiny: a seconds-long smoke run)
#![allow(dead_code)]

pub mod guide_step;

use std::time::Instant;

use candle_core::{DType, Device, Result};
use clipsculpt::autodiff::memory::PeakMeter;
use clipsculpt::device::memory as device_memory;
use clipsculpt::device::{DeviceSpec, Precision};

/// The workload size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    /// The CPU workloads (the README's tables).
    Cpu,
    /// GPU-sized workloads.
    Gpu,
    /// A smoke run that finishes in seconds on a CPU.
    Tiny,
}

/// The bench's device, weight dtype and size.
pub struct BenchEnv {
    /// The device every tensor is made on.
    pub device: Device,
    /// The frozen weights' dtype.
    pub precision: Precision,
    /// The workload size.
    pub size: Size,
}

fn var(key: &str) -> Option<String> {
    std::env::var(key).ok().filter(|v| !v.trim().is_empty())
}

fn bad(msg: String) -> candle_core::Error {
    candle_core::Error::Msg(msg)
}

/// A repeat count from the environment variable `key`: 1 when unset, an error unless a positive
/// integer.
pub fn repeats(key: &str) -> Result<usize> {
    match var(key) {
        None => Ok(1),
        Some(v) => v
            .parse::<usize>()
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| bad(format!("{key}={v}: a positive count"))),
    }
}

impl BenchEnv {
    /// Reads `CLIPSCULPT_DEVICE`, `CLIPSCULPT_DTYPE` and `CLIPSCULPT_BENCH_SIZE`, and flushes
    /// subnormals as the binaries do unless `CLIPSCULPT_BENCH_SUBNORMALS=keep`.
    pub fn from_env() -> Result<Self> {
        if var("CLIPSCULPT_BENCH_SUBNORMALS").as_deref() != Some("keep") {
            clipsculpt::device::flush_subnormals();
        }
        let spec: DeviceSpec = match var("CLIPSCULPT_DEVICE") {
            Some(v) => v
                .parse()
                .map_err(|e| bad(format!("CLIPSCULPT_DEVICE: {e}")))?,
            None => DeviceSpec::Cpu,
        };
        let device = spec.open()?;
        let precision = match var("CLIPSCULPT_DTYPE") {
            Some(v) => v
                .parse()
                .map_err(|e| bad(format!("CLIPSCULPT_DTYPE: {e}")))?,
            None => Precision::default_for(&device),
        };
        let size = match var("CLIPSCULPT_BENCH_SIZE").as_deref() {
            None | Some("cpu") => Size::Cpu,
            Some("gpu") => Size::Gpu,
            Some("tiny") => Size::Tiny,
            Some(other) => {
                return Err(bad(format!(
                    "CLIPSCULPT_BENCH_SIZE={other}: use cpu, gpu or tiny"
                )))
            }
        };
        Ok(Self {
            device,
            precision,
            size,
        })
    }

    /// The weights' dtype.
    pub fn dtype(&self) -> DType {
        self.precision.dtype()
    }

    /// One line naming the device, dtype, size and memory meter.
    pub fn describe(&self) -> Result<String> {
        Ok(format!(
            "device {}, weights {}, size {:?}, memory meter {:?}, subnormals {}",
            device_memory::device_label(&self.device)?,
            self.precision,
            self.size,
            device_memory::meter(&self.device),
            if clipsculpt::device::subnormals::subnormals_flushed() {
                "flushed"
            } else {
                "kept"
            }
        ))
    }

    /// Starts a timed, metered span: synchronises, notes the device's bytes in use, resets the
    /// device's high-water mark and the host heap meter, starts the clock.
    pub fn start(&self) -> Result<Span> {
        let device_base = device_memory::used_bytes(&self.device)?;
        device_memory::reset_peak(&self.device)?;
        let host = PeakMeter::start();
        Ok(Span {
            host,
            device_base,
            t: Instant::now(),
        })
    }
}

/// A timed, metered span ([`BenchEnv::start`]).
pub struct Span {
    host: PeakMeter,
    device_base: u64,
    t: Instant,
}

/// What a span measured.
#[derive(Debug, Clone, Copy)]
pub struct Measured {
    /// Wall seconds, the device synchronised at both ends.
    pub seconds: f64,
    /// Peak host heap bytes above the span's start.
    pub host_peak: usize,
    /// The device's high-water mark (absolute: weights included). On the CPU the host heap's.
    pub device_peak: u64,
    /// The device's high-water mark above the bytes in use at the span's start.
    pub device_above_start: u64,
}

impl Measured {
    /// The span's peak above its start on the bench's device: the host heap on the CPU, the
    /// device's high-water mark elsewhere.
    pub fn activation_peak(&self, env: &BenchEnv) -> usize {
        if env.device.is_cpu() {
            self.host_peak
        } else {
            self.device_above_start as usize
        }
    }
}

impl Span {
    /// Synchronises the device, stops the clock and reads the meters.
    pub fn finish(self, env: &BenchEnv) -> Result<Measured> {
        device_memory::synchronize(&env.device)?;
        let seconds = self.t.elapsed().as_secs_f64();
        let device_peak = device_memory::peak_bytes(&env.device)?;
        Ok(Measured {
            seconds,
            host_peak: self.host.peak_above_base(),
            device_peak,
            device_above_start: device_peak.saturating_sub(self.device_base),
        })
    }
}
