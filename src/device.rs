//! Device selection: `--device cpu|cuda|cuda:N` parsed into a [`DeviceSpec`] and opened as a candle
//! [`Device`]. The library never assumes the CPU: every tensor is created on the device it is given.

use std::fmt;
use std::str::FromStr;

use candle_core::Device;

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
pub fn device_name(device: &Device) -> String {
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
                    Device::new_cuda(n)
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

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn cpu_opens() {
        assert!(DeviceSpec::Cpu.open().is_ok());
    }
}
