//! Loading CLIP from a model directory: `config.json` plus safetensors weights (`model.safetensors`,
//! or `model.fp16.safetensors` / `model.bf16.safetensors`), f16/bf16 upcast to f32.
//!
//! The weights file is validated before anything runs: its header must account for every byte
//! (a truncated download is named with expected and actual sizes), and the model constructors run
//! on a checking backend that records every key they ask for, so all missing, mis-shaped or
//! non-float tensors are reported together, each with its expected and found shape. Keys the model
//! never asks for (the `position_ids` buffers of older checkpoints) are ignored.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use candle_core::safetensors::MmapedSafetensors;
use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;
use candle_nn::VarBuilder;
use serde::Deserialize;

use super::config::{ClipConfig, ClipTextConfig, ConfigFile};
use super::error::{LoadError, TensorProblem};
use super::model::ClipModel;
use super::text::ClipTextModelWithProjection;

/// Weight file names tried, in order.
pub const WEIGHT_FILES: [&str; 3] = [
    "model.safetensors",
    "model.fp16.safetensors",
    "model.bf16.safetensors",
];

/// Loads a full CLIP (`CLIPModel`: text + vision) from `dir`.
pub fn load_clip(dir: &Path, device: &Device) -> Result<ClipModel, LoadError> {
    let (path, config) = read_config(dir)?;
    let ConfigFile::Full(cfg) = config else {
        return Err(LoadError::WrongModel {
            path,
            expected: "a CLIPModel (text_config + vision_config)",
            found: "a text-only CLIP (use the text-encoder loader)".into(),
        });
    };
    let weights = Weights::open(dir)?;
    weights.build(device, |vb| ClipModel::new(vb, &cfg))
}

/// Loads the `CLIPTextModelWithProjection` layout (`text_model.*`, `text_projection.weight`), as in
/// openai/shap-e's `text_encoder/`. A full CLIP directory works too (its text half is loaded, with
/// the top-level `projection_dim`).
pub fn load_text_with_projection(
    dir: &Path,
    device: &Device,
) -> Result<ClipTextModelWithProjection, LoadError> {
    let (_, config) = read_config(dir)?;
    let (cfg, projection_dim) = text_config(config);
    let weights = Weights::open(dir)?;
    weights.build(device, |vb| {
        ClipTextModelWithProjection::new(vb, &cfg, projection_dim)
    })
}

/// The text tower's config and projection size of either config form.
pub(crate) fn text_config(config: ConfigFile) -> (ClipTextConfig, usize) {
    match config {
        ConfigFile::Full(ClipConfig {
            text_config,
            projection_dim,
            ..
        }) => (text_config, projection_dim),
        ConfigFile::Text(t) => {
            let p = t.projection_dim;
            (t, p)
        }
    }
}

/// Reads and parses `dir/config.json`.
pub fn read_config(dir: &Path) -> Result<(PathBuf, ConfigFile), LoadError> {
    let path = dir.join("config.json");
    if !path.is_file() {
        return Err(LoadError::MissingConfig {
            dir: dir.to_path_buf(),
        });
    }
    let text = std::fs::read_to_string(&path).map_err(|source| LoadError::Io {
        path: path.clone(),
        source,
    })?;
    let config = ConfigFile::from_json(&text).map_err(|source| LoadError::Config {
        path: path.clone(),
        source,
    })?;
    Ok((path, config))
}

/// The first of [`WEIGHT_FILES`] present in `dir`.
pub fn find_weights(dir: &Path) -> Result<PathBuf, LoadError> {
    WEIGHT_FILES
        .iter()
        .map(|f| dir.join(f))
        .find(|p| p.is_file())
        .ok_or_else(|| LoadError::MissingWeights {
            dir: dir.to_path_buf(),
            tried: WEIGHT_FILES.join(", "),
        })
}

#[derive(Debug, Deserialize)]
struct HeaderEntry {
    dtype: String,
    shape: Vec<usize>,
    data_offsets: [u64; 2],
}

/// A validated safetensors file: its header (name → dtype, shape) and a memory map.
pub(crate) struct Weights {
    path: PathBuf,
    header: HashMap<String, (String, Vec<usize>)>,
    file: MmapedSafetensors,
}

impl Weights {
    /// Finds, size-checks and maps the weights file of `dir`.
    pub(crate) fn open(dir: &Path) -> Result<Self, LoadError> {
        Self::open_file(&find_weights(dir)?)
    }

    /// Size-checks and maps one safetensors file.
    pub(crate) fn open_file(path: &Path) -> Result<Self, LoadError> {
        let corrupt = |reason: String| LoadError::Corrupt {
            path: path.to_path_buf(),
            reason,
        };
        let io = |source| LoadError::Io {
            path: path.to_path_buf(),
            source,
        };
        let mut f = std::fs::File::open(path).map_err(io)?;
        let actual = f.metadata().map_err(io)?.len();
        let mut len = [0u8; 8];
        if actual < 8 {
            return Err(LoadError::Truncated {
                path: path.to_path_buf(),
                expected: 8,
                actual,
            });
        }
        f.read_exact(&mut len).map_err(io)?;
        let n = u64::from_le_bytes(len);
        if n > 100 << 20 {
            return Err(corrupt(format!("header of {n} bytes is implausibly large")));
        }
        if actual < 8 + n {
            return Err(LoadError::Truncated {
                path: path.to_path_buf(),
                expected: 8 + n,
                actual,
            });
        }
        let mut raw = vec![0u8; n as usize];
        f.read_exact(&mut raw).map_err(io)?;
        let entries: BTreeMap<String, serde_json::Value> =
            serde_json::from_slice(&raw).map_err(|e| corrupt(format!("unreadable header: {e}")))?;
        let mut header = HashMap::new();
        let mut data_end = 0u64;
        for (name, v) in entries {
            if name == "__metadata__" {
                continue;
            }
            let e: HeaderEntry = serde_json::from_value(v)
                .map_err(|e| corrupt(format!("header entry {name}: {e}")))?;
            data_end = data_end.max(e.data_offsets[1]);
            header.insert(name, (e.dtype, e.shape));
        }
        let expected = 8 + n + data_end;
        if actual < expected {
            return Err(LoadError::Truncated {
                path: path.to_path_buf(),
                expected,
                actual,
            });
        }
        // SAFETY: the file is mapped read-only; like every mmap-based loader we rely on it not
        // being truncated or rewritten while the model loads (its size was just checked).
        let file = unsafe { MmapedSafetensors::new(path) }.map_err(|e| corrupt(e.to_string()))?;
        Ok(Self {
            path: path.to_path_buf(),
            header,
            file,
        })
    }

    /// Runs `build` on a checking backend; returns all tensor problems at once if there are any.
    pub(crate) fn build<T>(
        self,
        device: &Device,
        build: impl FnOnce(VarBuilder) -> candle_core::Result<T>,
    ) -> Result<T, LoadError> {
        let path = self.path.clone();
        let backend = Shared(std::sync::Arc::new(CheckingBackend::new(self)));
        let vb = VarBuilder::from_backend(Box::new(backend.clone()), DType::F32, device.clone());
        let built = build(vb);
        let problems = backend.take_problems();
        if !problems.is_empty() {
            return Err(LoadError::Tensors { path, problems });
        }
        built.map_err(|source| LoadError::Build { path, source })
    }
}

/// A VarBuilder backend that serves tensors from a [`Weights`] file (upcast to the requested dtype)
/// and records every problem instead of stopping at the first. Without a file ("dry") it serves
/// zero views; both count the requested elements.
pub(crate) struct CheckingBackend {
    weights: Option<Weights>,
    problems: Mutex<Vec<TensorProblem>>,
    used: Mutex<BTreeSet<String>>,
    requested: AtomicUsize,
}

impl CheckingBackend {
    fn new(weights: Weights) -> Self {
        Self {
            weights: Some(weights),
            problems: Mutex::default(),
            used: Mutex::default(),
            requested: AtomicUsize::new(0),
        }
    }

    pub(crate) fn dry() -> Self {
        Self {
            weights: None,
            problems: Mutex::default(),
            used: Mutex::default(),
            requested: AtomicUsize::new(0),
        }
    }

    /// Elements of all tensors requested so far (the parameter count after a build).
    pub(crate) fn requested_elements(&self) -> usize {
        self.requested.load(Ordering::Relaxed)
    }

    fn take_problems(&self) -> Vec<TensorProblem> {
        // ok: the lock is only held for pushes that cannot panic.
        std::mem::take(
            &mut *self
                .problems
                .lock()
                .expect("problem list lock poisoned (bug)"), // ok: no thread panics while holding it
        )
    }

    /// Keys served so far.
    #[cfg(test)]
    pub(crate) fn used(&self) -> BTreeSet<String> {
        // ok: see take_problems.
        self.used
            .lock()
            .expect("used-key lock poisoned (bug)")
            .clone()
    }

    fn problem(&self, p: TensorProblem) {
        // ok: see take_problems.
        self.problems
            .lock()
            .expect("problem list lock poisoned (bug)")
            .push(p);
    }

    /// A zero tensor of `shape` that owns one element (a stand-in after a problem).
    fn placeholder(shape: &Shape, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        Tensor::zeros((), dtype, dev)?.broadcast_as(shape)
    }
}

/// A shared handle, so the problems can be read after the VarBuilder is gone.
#[derive(Clone)]
pub(crate) struct Shared(pub(crate) std::sync::Arc<CheckingBackend>);

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
        // ok: see take_problems.
        self.used
            .lock()
            .expect("used-key lock poisoned (bug)")
            .insert(name.to_string());
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
            Some((dt, _)) if !matches!(dt.as_str(), "F16" | "BF16" | "F32" | "F64") => self
                .problem(TensorProblem::DType {
                    name: name.into(),
                    found: dt.clone(),
                }),
            Some(_) => return w.file.load(name, dev)?.to_dtype(dtype),
        }
        CheckingBackend::placeholder(&s, dtype, dev)
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> candle_core::Result<Tensor> {
        match &self.weights {
            Some(w) => w.file.load(name, dev)?.to_dtype(dtype),
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

    /// Every tensor of the fixture checkpoint is read, except the int64 `position_ids` buffers that
    /// transformers no longer uses; an unused key would be as much a bug as a missing one.
    #[test]
    fn every_tensor_in_the_file_is_used() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/clip");
        for (dir, full) in [("tiny-clip", true), ("tiny-text-proj", false)] {
            let dir = root.join(dir);
            let (_, config) = read_config(&dir).unwrap();
            let weights = Weights::open(&dir).unwrap();
            let mut in_file: BTreeSet<String> = weights.header.keys().cloned().collect();
            in_file.retain(|k| !k.ends_with("position_ids"));
            let backend = Shared(std::sync::Arc::new(CheckingBackend::new(weights)));
            let vb = VarBuilder::from_backend(Box::new(backend.clone()), DType::F32, Device::Cpu);
            match (config, full) {
                (ConfigFile::Full(cfg), true) => drop(ClipModel::new(vb, &cfg).unwrap()),
                (config, false) => {
                    let (cfg, p) = text_config(config);
                    drop(ClipTextModelWithProjection::new(vb, &cfg, p).unwrap())
                }
                _ => panic!("fixture {} has the wrong config form", dir.display()),
            }
            assert!(backend.take_problems().is_empty());
            assert_eq!(backend.used(), in_file, "{}", dir.display());
        }
    }
}
