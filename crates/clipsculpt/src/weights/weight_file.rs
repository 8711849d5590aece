//! A validated weight file: a safetensors file whose header must account for every byte (a
//! truncated download is named with expected and actual sizes), read tensor by tensor; or a PyTorch pickle
//! (`.bin`, `.pt`, `.pth`) read through candle's pickle reader (float tensors only). Each tensor
//! a model reads is checked for NaN/inf as it is loaded.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};

use candle_core::safetensors::MmapedSafetensors;
use candle_core::{DType, Device, Tensor};
use serde::Deserialize;

use super::error::LoadError;
use super::finite::{self, NonFinite, Source};

#[derive(Debug, Deserialize)]
struct HeaderEntry {
    dtype: String,
    shape: Vec<usize>,
    data_offsets: [u64; 2],
}

/// Where the tensor data lives.
enum Data {
    /// A safetensors file, read tensor by tensor: the data section starts at byte `start`, and
    /// each tensor's byte range within it is in `offsets`.
    File {
        file: std::fs::File,
        start: u64,
        offsets: HashMap<String, [u64; 2]>,
    },
    /// Tensors read into memory (pickles, and in-memory tests).
    Memory(HashMap<String, Tensor>),
}

/// A validated weight file: its header (name → dtype, shape) and its data.
pub struct WeightFile {
    path: PathBuf,
    /// Name → (dtype as safetensors writes it, shape).
    pub(super) header: HashMap<String, (String, Vec<usize>)>,
    data: Data,
}

/// The non-finite values of an in-memory tensor (read as f32).
fn scan_tensor(t: &Tensor) -> Option<NonFinite> {
    let bytes: Vec<u8> = t
        .to_dtype(DType::F32)
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1::<f32>())
        .ok()?
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    finite::scan("F32", &bytes)
}

pub(super) fn is_float_name(dtype: &str) -> bool {
    matches!(dtype, "F16" | "BF16" | "F32" | "F64")
}

fn dtype_name(dtype: DType) -> String {
    format!("{dtype:?}").to_ascii_uppercase()
}

impl WeightFile {
    /// Opens `path`: a `.safetensors` file (size- and layout-checked; tensors are read when a
    /// model asks for them) or a pickle.
    pub fn open(path: &Path) -> Result<Self, LoadError> {
        if path.extension().is_some_and(|e| e == "safetensors") {
            Self::open_safetensors(path)
        } else {
            Self::open_pickle(path)
        }
    }

    /// Wraps tensors already in memory, as if read from `path`.
    pub(crate) fn from_tensors(path: &Path, tensors: HashMap<String, Tensor>) -> Self {
        let header = tensors
            .iter()
            .map(|(k, t)| (k.clone(), (dtype_name(t.dtype()), t.dims().to_vec())))
            .collect();
        Self {
            path: path.to_path_buf(),
            header,
            data: Data::Memory(tensors),
        }
    }

    fn open_pickle(path: &Path) -> Result<Self, LoadError> {
        let weights_err = |source| LoadError::Weights {
            path: path.to_path_buf(),
            source,
        };
        let pth = candle_core::pickle::PthTensors::new(path, None).map_err(weights_err)?;
        let names: Vec<String> = pth
            .tensor_infos()
            .iter()
            .filter(|(_, info)| is_float_name(&dtype_name(info.dtype)))
            .map(|(name, _)| name.clone())
            .collect();
        let mut tensors = HashMap::new();
        for name in names {
            if let Some(t) = pth.get(&name).map_err(weights_err)? {
                tensors.insert(name, t);
            }
        }
        Ok(Self::from_tensors(path, tensors))
    }

    fn open_safetensors(path: &Path) -> Result<Self, LoadError> {
        let corrupt = |reason: String| LoadError::Corrupt {
            path: path.to_path_buf(),
            reason,
        };
        let io = |source| LoadError::Io {
            path: path.to_path_buf(),
            source,
        };
        let truncated = |expected, actual| LoadError::Truncated {
            path: path.to_path_buf(),
            expected,
            actual,
        };
        let mut f = std::fs::File::open(path).map_err(io)?;
        let actual = f.metadata().map_err(io)?.len();
        let mut len = [0u8; 8];
        if actual < 8 {
            return Err(truncated(8, actual));
        }
        f.read_exact(&mut len).map_err(io)?;
        let n = u64::from_le_bytes(len);
        if n > 100 << 20 {
            return Err(corrupt(format!("header of {n} bytes is implausibly large")));
        }
        if actual < 8 + n {
            return Err(truncated(8 + n, actual));
        }
        let mut raw = vec![0u8; n as usize];
        f.read_exact(&mut raw).map_err(io)?;
        let entries: BTreeMap<String, serde_json::Value> =
            serde_json::from_slice(&raw).map_err(|e| corrupt(format!("unreadable header: {e}")))?;
        let mut header = HashMap::new();
        let mut offsets = HashMap::new();
        let mut data_end = 0u64;
        for (name, v) in entries {
            if name == "__metadata__" {
                continue;
            }
            let e: HeaderEntry = serde_json::from_value(v)
                .map_err(|e| corrupt(format!("header entry {name}: {e}")))?;
            data_end = data_end.max(e.data_offsets[1]);
            offsets.insert(name.clone(), e.data_offsets);
            header.insert(name, (e.dtype, e.shape));
        }
        // Saturating: offsets near u64::MAX (a corrupt header) must read as "truncated", not overflow.
        let expected = (8 + n).saturating_add(data_end);
        if actual < expected {
            return Err(truncated(expected, actual));
        }
        // The safetensors crate validates the rest of the layout (dtypes, sizes, contiguous
        // offsets) on a read-only map; only the header's pages are touched.
        // SAFETY: the file is mapped read-only and unmapped before this returns; its size was
        // just checked.
        unsafe { MmapedSafetensors::new(path) }.map_err(|e| corrupt(e.to_string()))?;
        Ok(Self {
            path: path.to_path_buf(),
            header,
            data: Data::File {
                file: f,
                start: 8 + n,
                offsets,
            },
        })
    }

    /// The file this was read from.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Float keys of the file.
    pub(super) fn float_keys(&self) -> impl Iterator<Item = &String> {
        self.header
            .iter()
            .filter(|(_, (dt, _))| is_float_name(dt))
            .map(|(k, _)| k)
    }

    /// The float tensor `name` on `dev`, checked for NaN/inf: `Ok(Err(_))` when some value is
    /// not finite. Files are read with positioned reads straight into the tensor's memory and
    /// checked block by block as they arrive.
    pub(super) fn load(
        &self,
        name: &str,
        dev: &Device,
    ) -> candle_core::Result<Result<Tensor, NonFinite>> {
        let checked = match &self.data {
            Data::File {
                file,
                start,
                offsets,
            } => {
                let (Some((dtype, shape)), Some([from, to])) =
                    (self.header.get(name), offsets.get(name))
                else {
                    candle_core::bail!("cannot find tensor {name}")
                };
                let src = Source::File {
                    file,
                    offset: start.saturating_add(*from),
                    len: to.saturating_sub(*from),
                };
                finite::read_checked(dtype, src, shape)?
            }
            Data::Memory(m) => match m.get(name) {
                Some(t) => scan_tensor(t).map_or(Ok(t.clone()), Err),
                None => candle_core::bail!("cannot find tensor {name}"),
            },
        };
        match checked {
            Ok(t) => Ok(Ok(t.to_device(dev)?)),
            Err(hit) => Ok(Err(hit)),
        }
    }
}
