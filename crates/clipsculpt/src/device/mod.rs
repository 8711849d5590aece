//! Device selection: `--device cpu|cuda|cuda:N` parsed into a [`DeviceSpec`] and opened as a candle
//! [`Device`]; `--dtype f32|bf16|f16` parsed into a [`Precision`]; per-device memory accounting in
//! [`memory`]; flush-to-zero for the CPU's subnormals in [`subnormals`]. The library never assumes
//! the CPU: every tensor is created on the device it is given.

pub mod kernel_cache;
#[cfg(feature = "cuda")]
mod kernels;
pub mod memory;
pub mod subnormals;

use std::fmt;
use std::str::FromStr;

use candle_core::{DType, Device};
use serde::Serialize;

pub use subnormals::flush_subnormals;

/// Which compute device to run on, as typed on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DeviceSpec {
    /// The host CPU.
    #[default]
    Cpu,
    /// An NVIDIA GPU by ordinal (needs the `cuda` cargo feature).
    Cuda(usize),
}

/// An open device's name as on the command line (`cpu`, `cuda:0`; `metal:0`).
pub(crate) fn device_name(device: &Device) -> String {
    match device.location() {
        candle_core::DeviceLocation::Cpu => "cpu".into(),
        candle_core::DeviceLocation::Cuda { gpu_id } => format!("cuda:{gpu_id}"),
        candle_core::DeviceLocation::Metal { gpu_id } => format!("metal:{gpu_id}"),
    }
}

impl FromStr for DeviceSpec {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "cpu" => Ok(Self::Cpu),
            "cuda" | "gpu" => Ok(Self::Cuda(0)),
            other => match other.strip_prefix("cuda:") {
                Some(n) => n
                    .parse()
                    .map(Self::Cuda)
                    .map_err(|_| format!("invalid device '{s}': expected cpu, cuda or cuda:N")),
                None => Err(format!(
                    "invalid device '{s}': expected cpu, cuda or cuda:N"
                )),
            },
        }
    }
}

impl fmt::Display for DeviceSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Cpu => write!(f, "cpu"),
            Self::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

impl DeviceSpec {
    /// Opens the device. Without the `cuda` feature, asking for CUDA is a clear error.
    pub fn open(self) -> candle_core::Result<Device> {
        match self {
            Self::Cpu => Ok(Device::Cpu),
            Self::Cuda(n) => {
                if cfg!(feature = "cuda") {
                    Device::new_cuda(n).map_err(|e| {
                        candle_core::Error::Msg(format!(
                            "cannot open CUDA device cuda:{n}: {}; check that `nvidia-smi` lists \
                             it and that the NVIDIA driver loads",
                            without_backtrace(e)
                        ))
                    })
                } else {
                    Err(candle_core::Error::Msg(format!(
                        "device cuda:{n} requested but clipsculpt was built without CUDA; \
                         rebuild with `cargo build --release --features cuda`"
                    )))
                }
            }
        }
    }
}

/// Compiles the kernels of candle's CUDA ops on `device` now rather than at their first use
/// (`kernels.rs`, in `cuda` builds); nothing on other devices.
pub(crate) fn load_kernels(device: &Device) -> candle_core::Result<()> {
    #[cfg(feature = "cuda")]
    return kernels::load(device);
    #[cfg(not(feature = "cuda"))]
    {
        let _ = device;
        Ok(())
    }
}

/// `e` without the backtrace candle attaches to driver errors (a user needs the error, not the
/// frames).
fn without_backtrace(e: candle_core::Error) -> candle_core::Error {
    match e {
        candle_core::Error::WithBacktrace { inner, .. } => without_backtrace(*inner),
        e => e,
    }
}

/// The dtype the frozen networks' matrix weights are stored and multiplied in (`--dtype`).
///
/// Only the weights of frozen linear maps (CLIP towers, the prior, the decoder's projection and
/// static MLP layers, the patch embedding) take it; layer norms, softmax, biases, embeddings, the
/// loss, compositing, every accumulation, the latent and Adam's state stay f32
/// (`docs/gpu.md`, "Mixed precision").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// 32-bit floats throughout.
    F32,
    /// bfloat16 weights (8-bit exponent, 8-bit mantissa): f32's range, tensor-core speed.
    Bf16,
    /// IEEE half weights (5-bit exponent, 11-bit mantissa): finer, but overflows above 65504.
    F16,
}

impl Precision {
    /// The default for a device: bf16 on CUDA, f32 elsewhere (CPU half matmuls are slow).
    pub fn default_for(device: &Device) -> Self {
        if device.is_cuda() {
            Self::Bf16
        } else {
            Self::F32
        }
    }

    /// The candle dtype of the weights.
    pub fn dtype(self) -> DType {
        match self {
            Self::F32 => DType::F32,
            Self::Bf16 => DType::BF16,
            Self::F16 => DType::F16,
        }
    }
}

impl FromStr for Precision {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "f32" | "fp32" | "float32" => Ok(Self::F32),
            "bf16" | "bfloat16" => Ok(Self::Bf16),
            "f16" | "fp16" | "float16" | "half" => Ok(Self::F16),
            _ => Err(format!("invalid dtype '{s}': expected f32, bf16 or f16")),
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::F32 => "f32",
            Self::Bf16 => "bf16",
            Self::F16 => "f16",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A driver error reaches the user as its message, without candle's backtrace frames.
    #[test]
    fn device_errors_drop_the_backtrace() {
        let e = candle_core::Error::WithBacktrace {
            inner: Box::new(candle_core::Error::Msg("driver says no".into())),
            backtrace: Box::new(std::backtrace::Backtrace::force_capture()),
        };
        assert_eq!(without_backtrace(e).to_string(), "driver says no");
    }

    #[test]
    fn parses_precisions() {
        assert_eq!("bf16".parse(), Ok(Precision::Bf16));
        assert_eq!("FP16".parse(), Ok(Precision::F16));
        assert_eq!(" f32".parse(), Ok(Precision::F32));
        for bad in ["", "f64", "int8", "bf"] {
            assert!(
                bad.parse::<Precision>().is_err(),
                "{bad} should be rejected"
            );
        }
        assert_eq!(Precision::default_for(&Device::Cpu), Precision::F32);
        assert_eq!(Precision::Bf16.to_string(), "bf16");
        assert_eq!(Precision::F16.dtype(), DType::F16);
    }

    #[test]
    fn parses_device_specs() {
        assert_eq!("cpu".parse(), Ok(DeviceSpec::Cpu));
        assert_eq!("CUDA".parse(), Ok(DeviceSpec::Cuda(0)));
        assert_eq!("cuda:3".parse(), Ok(DeviceSpec::Cuda(3)));
        for bad in ["", "tpu", "cuda:", "cuda:x", "cuda:-1"] {
            assert!(
                bad.parse::<DeviceSpec>().is_err(),
                "{bad} should be rejected"
            );
        }
    }

    /// `cpu` opens the CPU; without the `cuda` feature, `cuda:N` is an error naming the device and
    /// the rebuild, never a silent fallback to the CPU.
    #[test]
    fn cpu_opens_and_cuda_without_the_feature_names_the_rebuild() {
        let cpu = DeviceSpec::Cpu.open().unwrap();
        assert!(cpu.is_cpu());
        assert_eq!(device_name(&cpu), "cpu");
        if !cfg!(feature = "cuda") {
            let e = DeviceSpec::Cuda(1).open().unwrap_err().to_string();
            assert!(e.contains("cuda:1") && e.contains("--features cuda"), "{e}");
        }
    }
}
