//! Weight loading: safetensors (fp16/bf16 upcast to the model dtype) or, as a fallback, PyTorch
//! `.bin` pickles through candle's pickle reader. Non-float tensors (`mesh_decoder.cases` int64,
//! `mesh_decoder.masks` bool) are never read. Every key and shape the model asks for is checked
//! first and *all* problems are reported together ([`LoadError::Tensors`]).

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use candle_core::safetensors::Load;
use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::VarBuilder;

use super::error::{LoadError, TensorProblem};

/// File names tried, in order, inside a diffusers component folder.
pub const WEIGHT_FILES: [&str; 3] = [
    "diffusion_pytorch_model.safetensors",
    "diffusion_pytorch_model.fp16.safetensors",
    "diffusion_pytorch_model.bin",
];

/// The first existing weight file of a diffusers component folder.
pub fn find_weights(dir: &Path) -> Result<PathBuf, LoadError> {
    WEIGHT_FILES
        .iter()
        .map(|f| dir.join(f))
        .find(|p| p.is_file())
        .ok_or_else(|| LoadError::NoWeights {
            dir: dir.to_path_buf(),
            tried: WEIGHT_FILES.iter().map(|s| s.to_string()).collect(),
        })
}

fn is_float(dtype: DType) -> bool {
    matches!(dtype, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
}

/// Reads every floating-point tensor of a `.safetensors` or pickle (`.bin`, `.pt`, `.pth`) file,
/// converted to `dtype`.
pub fn read_weights(
    path: &Path,
    dtype: DType,
    device: &Device,
) -> Result<HashMap<String, Tensor>, LoadError> {
    let weights_err = |source| LoadError::Weights {
        path: path.to_path_buf(),
        source,
    };
    let is_safetensors = path.extension().is_some_and(|e| e == "safetensors");
    let mut out = HashMap::new();
    if is_safetensors {
        let data = std::fs::read(path).map_err(|source| LoadError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let st = safetensors::SafeTensors::deserialize(&data)
            .map_err(|e| weights_err(candle_core::Error::from(e)))?;
        for (name, view) in st.tensors() {
            let Ok(dt) = DType::try_from(view.dtype()) else {
                continue;
            };
            if is_float(dt) {
                let t = view
                    .load(device)
                    .and_then(|t| t.to_dtype(dtype))
                    .map_err(weights_err)?;
                out.insert(name, t);
            }
        }
    } else {
        let pth = candle_core::pickle::PthTensors::new(path, None).map_err(weights_err)?;
        let names: Vec<String> = pth
            .tensor_infos()
            .iter()
            .filter(|(_, info)| is_float(info.dtype))
            .map(|(name, _)| name.clone())
            .collect();
        for name in names {
            if let Some(t) = pth.get(&name).map_err(weights_err)? {
                let t = t
                    .to_dtype(dtype)
                    .and_then(|t| t.to_device(device))
                    .map_err(weights_err)?;
                out.insert(name, t);
            }
        }
    }
    Ok(out)
}

#[derive(Default)]
struct CheckState {
    problems: Vec<TensorProblem>,
    used: HashSet<String>,
}

/// A VarBuilder backend over loaded tensors that records every key it is asked for, and on a
/// missing or mis-shaped key records the problem and hands out a zero-stride placeholder (no
/// allocation), so that one construction pass lists all problems.
struct CheckingBackend {
    tensors: HashMap<String, Tensor>,
    state: Arc<Mutex<CheckState>>,
}

impl CheckingBackend {
    fn record(&self, f: impl FnOnce(&mut CheckState)) -> candle_core::Result<()> {
        let mut st = self
            .state
            .lock()
            .map_err(|_| candle_core::Error::Msg("weight check lock poisoned (bug)".into()))?;
        f(&mut st);
        Ok(())
    }
}

impl SimpleBackend for CheckingBackend {
    fn get(
        &self,
        s: Shape,
        name: &str,
        _: candle_nn::Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        let expected = s.dims().to_vec();
        let problem = match self.tensors.get(name) {
            Some(t) if t.dims() == expected.as_slice() => {
                self.record(|st| {
                    st.used.insert(name.to_string());
                })?;
                return t.to_dtype(dtype)?.to_device(dev);
            }
            Some(t) => TensorProblem::Shape {
                key: name.to_string(),
                expected,
                found: t.dims().to_vec(),
            },
            None => TensorProblem::Missing {
                key: name.to_string(),
                expected,
            },
        };
        self.record(|st| {
            st.used.insert(name.to_string());
            st.problems.push(problem);
        })?;
        Tensor::zeros((), dtype, dev)?.broadcast_as(s)
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        match self.tensors.get(name) {
            Some(t) => {
                self.record(|st| {
                    st.used.insert(name.to_string());
                })?;
                t.to_dtype(dtype)?.to_device(dev)
            }
            None => candle_core::bail!("cannot find tensor {name}"),
        }
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.tensors.contains_key(name)
    }
}

/// A model built from a weight file, with the keys of the file it did not read.
#[derive(Debug)]
pub struct Loaded<T> {
    /// The model.
    pub model: T,
    /// Float keys in the file that the model did not ask for, sorted.
    pub unused: Vec<String>,
}

/// Builds a model with `build` over `tensors` (read from `path`), checking every key and shape.
pub fn build_checked<T>(
    tensors: HashMap<String, Tensor>,
    path: &Path,
    dtype: DType,
    device: &Device,
    build: impl FnOnce(VarBuilder<'static>) -> candle_core::Result<T>,
) -> Result<Loaded<T>, LoadError> {
    let all: Vec<String> = tensors.keys().cloned().collect();
    let state = Arc::new(Mutex::new(CheckState::default()));
    let backend: Box<dyn SimpleBackend> = Box::new(CheckingBackend {
        tensors,
        state: state.clone(),
    });
    let vb = VarBuilder::from_backend(backend, dtype, device.clone());
    let built = build(vb);
    let st = state.lock().map_err(|_| LoadError::Build {
        path: path.to_path_buf(),
        source: candle_core::Error::Msg("weight check lock poisoned (bug)".into()),
    })?;
    if !st.problems.is_empty() {
        return Err(LoadError::Tensors {
            path: path.to_path_buf(),
            problems: st.problems.clone(),
        });
    }
    let model = built.map_err(|source| LoadError::Build {
        path: path.to_path_buf(),
        source,
    })?;
    let mut unused: Vec<String> = all.into_iter().filter(|k| !st.used.contains(k)).collect();
    unused.sort();
    Ok(Loaded { model, unused })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two missing keys and one wrong shape are all reported, with expected and found shapes.
    #[test]
    fn lists_every_problem() {
        let dev = Device::Cpu;
        let mut ts = HashMap::new();
        ts.insert(
            "a.weight".to_string(),
            Tensor::zeros((2, 3), DType::F32, &dev).unwrap(),
        );
        ts.insert(
            "extra".to_string(),
            Tensor::zeros(1, DType::F32, &dev).unwrap(),
        );
        let err = build_checked(ts, Path::new("w.safetensors"), DType::F32, &dev, |vb| {
            vb.get((3, 3), "a.weight")?;
            vb.get(4, "b.bias")?;
            vb.get((1, 2), "c.weight")
        })
        .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("a.weight: expected [3, 3], found [2, 3]"),
            "{msg}"
        );
        assert!(msg.contains("missing b.bias (expected [4])"), "{msg}");
        assert!(msg.contains("missing c.weight"), "{msg}");
        assert!(
            msg.starts_with("3 tensor problem(s) in w.safetensors"),
            "{msg}"
        );
    }

    #[test]
    fn reports_unused_keys_and_upcasts_fp16() {
        let dev = Device::Cpu;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("diffusion_pytorch_model.fp16.safetensors");
        let mut ts = HashMap::new();
        ts.insert("w".to_string(), Tensor::ones(3, DType::F16, &dev).unwrap());
        ts.insert(
            "clip_mean".to_string(),
            Tensor::ones(2, DType::F16, &dev).unwrap(),
        );
        ts.insert(
            "idx".to_string(),
            Tensor::ones(2, DType::I64, &dev).unwrap(),
        );
        candle_core::safetensors::save(&ts, &p).unwrap();
        assert_eq!(find_weights(dir.path()).unwrap(), p);
        let read = read_weights(&p, DType::F32, &dev).unwrap();
        assert_eq!(read.len(), 2, "the int64 tensor is skipped");
        let loaded = build_checked(read, &p, DType::F32, &dev, |vb| vb.get(3, "w")).unwrap();
        assert_eq!(loaded.model.dtype(), DType::F32);
        assert_eq!(loaded.unused, vec!["clip_mean".to_string()]);
    }
}
