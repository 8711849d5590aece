//! One checking backend for every loader: models are built from a [`WeightFile`] on a VarBuilder
//! backend that records every key the constructors ask for, so all missing, mis-shaped or
//! non-float tensors are reported together; float keys the model never asks for come back in
//! [`Loaded::unused`]. f16/bf16 are upcast to the requested dtype.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::VarBuilder;

use super::error::LoadError;
use super::finite::NonFinite;
use super::problem::TensorProblem;
use super::weight_file::{is_float_name, WeightFile};

/// A model built from a weight file, with the keys of the file it did not read.
#[derive(Debug)]
pub struct Loaded<T> {
    /// The model.
    pub model: T,
    /// Float keys in the file that the model did not ask for, sorted.
    pub unused: Vec<String>,
}

impl WeightFile {
    /// Runs `build` on a checking backend with tensors of `dtype`; returns all tensor problems at
    /// once if there are any, else the model and the float keys it did not read.
    pub fn build<T>(
        self,
        dtype: DType,
        device: &Device,
        build: impl FnOnce(VarBuilder<'static>) -> candle_core::Result<T>,
    ) -> Result<Loaded<T>, LoadError> {
        let path = self.path().to_path_buf();
        let backend = Shared(Arc::new(CheckingBackend::new(Some(self))));
        let vb = VarBuilder::from_backend(Box::new(backend.clone()), dtype, device.clone());
        let built = build(vb);
        if let Some((tensor, hit)) = backend.first_non_finite() {
            return Err(LoadError::NonFinite {
                path,
                tensor,
                count: hit.count,
                first: hit.first,
            });
        }
        let problems = backend.take_problems();
        if !problems.is_empty() {
            return Err(LoadError::Tensors { path, problems });
        }
        let model = built.map_err(|source| LoadError::Build {
            path: path.clone(),
            source,
        })?;
        let used = backend.used();
        let mut unused: Vec<String> = match &backend.weights {
            Some(w) => w
                .float_keys()
                .filter(|k| !used.contains(*k))
                .cloned()
                .collect(),
            None => Vec::new(),
        };
        unused.sort();
        Ok(Loaded { model, unused })
    }
}

/// The number of parameters `build` asks for, counted on a dry backend (zero views, nothing read).
pub(crate) fn count_parameters<T>(
    build: impl FnOnce(VarBuilder<'static>) -> candle_core::Result<T>,
) -> candle_core::Result<usize> {
    let dry = Shared(Arc::new(CheckingBackend::new(None)));
    let vb = VarBuilder::from_backend(Box::new(dry.clone()), DType::F32, Device::Cpu);
    build(vb)?;
    Ok(dry.requested.load(Ordering::Relaxed))
}

/// A VarBuilder backend that serves tensors from a [`WeightFile`] (converted to the requested
/// dtype) and records every problem instead of stopping at the first, handing out a zero-stride
/// placeholder (no allocation) after one; tensors holding NaN/inf are recorded apart. Without a
/// file ("dry") it serves placeholders; both count the requested elements.
struct CheckingBackend {
    weights: Option<WeightFile>,
    problems: Mutex<Vec<TensorProblem>>,
    non_finite: Mutex<Vec<(String, NonFinite)>>,
    used: Mutex<BTreeSet<String>>,
    requested: AtomicUsize,
}

impl CheckingBackend {
    fn new(weights: Option<WeightFile>) -> Self {
        Self {
            weights,
            problems: Mutex::default(),
            non_finite: Mutex::default(),
            used: Mutex::default(),
            requested: AtomicUsize::new(0),
        }
    }

    fn take_problems(&self) -> Vec<TensorProblem> {
        std::mem::take(
            &mut *self
                .problems
                .lock()
                .expect("problem list lock poisoned (bug)"), // ok: no thread panics while holding it
        )
    }

    /// The first tensor (by name) found holding NaN/inf, with its count.
    fn first_non_finite(&self) -> Option<(String, NonFinite)> {
        self.non_finite
            .lock()
            .expect("non-finite list lock poisoned (bug)") // ok: no thread panics while holding it
            .iter()
            .min_by(|a, b| a.0.cmp(&b.0))
            .cloned()
    }

    /// Loads `name` from the file; a tensor holding NaN/inf is recorded and served as a
    /// placeholder of `shape`.
    fn load(
        &self,
        w: &WeightFile,
        name: &str,
        shape: &Shape,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        match w.load(name, dev)? {
            Ok(t) => t.to_dtype(dtype),
            Err(hit) => {
                self.non_finite
                    .lock()
                    .expect("non-finite list lock poisoned (bug)") // ok: no thread panics while holding it
                    .push((name.to_string(), hit));
                Self::placeholder(shape, dtype, dev)
            }
        }
    }

    /// Keys asked for so far.
    fn used(&self) -> BTreeSet<String> {
        self.used
            .lock()
            .expect("used-key lock poisoned (bug)") // ok: no thread panics while holding it
            .clone()
    }

    fn mark_used(&self, name: &str) {
        self.used
            .lock()
            .expect("used-key lock poisoned (bug)") // ok: no thread panics while holding it
            .insert(name.to_string());
    }

    fn problem(&self, p: TensorProblem) {
        self.problems
            .lock()
            .expect("problem list lock poisoned (bug)") // ok: no thread panics while holding it
            .push(p);
    }

    /// A zero tensor of `shape` that owns one element (a stand-in after a problem).
    fn placeholder(shape: &Shape, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        Tensor::zeros((), dtype, dev)?.broadcast_as(shape)
    }
}

/// A shared handle, so the problems can be read after the VarBuilder is gone.
#[derive(Clone)]
struct Shared(Arc<CheckingBackend>);

impl std::ops::Deref for Shared {
    type Target = CheckingBackend;
    fn deref(&self) -> &CheckingBackend {
        &self.0
    }
}

impl SimpleBackend for Shared {
    fn get(
        &self,
        s: Shape,
        name: &str,
        _: candle_nn::Init,
        dtype: DType,
        dev: &Device,
    ) -> candle_core::Result<Tensor> {
        self.mark_used(name);
        self.requested.fetch_add(s.elem_count(), Ordering::Relaxed);
        let Some(w) = &self.weights else {
            return CheckingBackend::placeholder(&s, dtype, dev);
        };
        let expected = s.dims().to_vec();
        match w.header.get(name) {
            None => self.problem(TensorProblem::Missing {
                name: name.into(),
                expected,
            }),
            Some((_, found)) if found != &expected => self.problem(TensorProblem::Shape {
                name: name.into(),
                expected,
                found: found.clone(),
            }),
            Some((dt, _)) if !is_float_name(dt) => self.problem(TensorProblem::DType {
                name: name.into(),
                found: dt.clone(),
            }),
            Some(_) => return self.load(w, name, &s, dtype, dev),
        }
        CheckingBackend::placeholder(&s, dtype, dev)
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        match &self.weights {
            Some(w) => {
                self.mark_used(name);
                let shape = match w.header.get(name) {
                    Some((_, dims)) => Shape::from_dims(dims),
                    None => candle_core::bail!("cannot find tensor {name}"),
                };
                self.load(w, name, &shape, dtype, dev)
            }
            None => candle_core::bail!("no weights to read {name} from"),
        }
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.weights
            .as_ref()
            .is_some_and(|w| w.header.contains_key(name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::weights::find_weights;
    use std::collections::HashMap;
    use std::path::Path;

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
        let file = WeightFile::from_tensors(Path::new("w.safetensors"), ts);
        let err = file
            .build(DType::F32, &dev, |vb| {
                vb.get((3, 3), "a.weight")?;
                vb.get(4, "b.bias")?;
                vb.get((1, 2), "c.weight")
            })
            .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("tensor a.weight has shape [2, 3], expected [3, 3]"),
            "{msg}"
        );
        assert!(
            msg.contains("missing tensor b.bias (expected shape [4])"),
            "{msg}"
        );
        assert!(msg.contains("missing tensor c.weight"), "{msg}");
        assert!(
            msg.starts_with("w.safetensors does not match its config (3 tensor problem(s))"),
            "{msg}"
        );
    }

    /// fp16 is upcast, an int64 tensor is neither read nor reported unused, and an unread float
    /// key is reported.
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
        let found = find_weights(dir.path(), &crate::weights::files::DIFFUSERS_WEIGHTS).unwrap();
        assert_eq!(found, p);
        let loaded = WeightFile::open(&p)
            .unwrap()
            .build(DType::F32, &dev, |vb| vb.get(3, "w"))
            .unwrap();
        assert_eq!(loaded.model.dtype(), DType::F32);
        assert_eq!(loaded.unused, vec!["clip_mean".to_string()]);
        let err = WeightFile::open(&p)
            .unwrap()
            .build(DType::F32, &dev, |vb| vb.get(2, "idx"))
            .unwrap_err();
        assert!(
            err.to_string().contains("tensor idx has dtype I64"),
            "{err}"
        );
    }

    /// A read tensor holding NaN/inf fails the build, named with its count and first index (the
    /// first by name when several do); an unread one does not.
    #[test]
    fn refuses_non_finite_tensors_it_reads() {
        let dev = Device::Cpu;
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("model.safetensors");
        let t = |v: &[f32]| Tensor::new(v, &dev).unwrap();
        let ts = HashMap::from([
            ("a".to_string(), t(&[1.0, f32::NAN, f32::INFINITY])),
            ("b".to_string(), t(&[f32::NAN, 0.0])),
            ("c".to_string(), t(&[1.0, 2.0])),
            ("unread".to_string(), t(&[f32::NAN])),
        ]);
        candle_core::safetensors::save(&ts, &p).unwrap();
        let err = WeightFile::open(&p)
            .unwrap()
            .build(DType::F32, &dev, |vb| {
                vb.get(2, "c")?;
                vb.get(2, "b")?;
                vb.get(3, "a")
            })
            .unwrap_err();
        assert!(
            matches!(&err, LoadError::NonFinite { tensor, count: 2, first: 1, .. } if tensor == "a"),
            "{err}"
        );
        let ok = WeightFile::open(&p)
            .unwrap()
            .build(DType::F32, &dev, |vb| vb.get(2, "c"))
            .unwrap();
        assert_eq!(ok.model.to_vec1::<f32>().unwrap(), [1.0, 2.0]);
        assert_eq!(ok.unused, ["a", "b", "unread"]);
    }
}
