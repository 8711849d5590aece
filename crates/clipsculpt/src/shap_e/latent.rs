//! Latent files: one safetensors tensor named `latent`, `(B, rows, d_latent)` f32, written
//! atomically; a latent holding NaN or inf is refused on load.

use std::collections::HashMap;
use std::path::Path;

use candle_core::{DType, Device, Tensor};

use super::error::LoadError;
use crate::atomic::write_atomic;

/// The tensor name inside a latent file.
pub(crate) const LATENT_KEY: &str = "latent";

/// Saves `latent` (any shape; stored as f32) to `path` as safetensors, atomically.
pub fn save_latent(path: &Path, latent: &Tensor) -> Result<(), LoadError> {
    let build = |source| LoadError::Build {
        path: path.to_path_buf(),
        source,
    };
    let t = latent
        .detach()
        .to_dtype(DType::F32)
        .and_then(|t| t.to_device(&Device::Cpu))
        .and_then(|t| t.contiguous())
        .map_err(build)?;
    let bytes = safetensors::serialize([(LATENT_KEY, &t)], None)
        .map_err(|e| build(candle_core::Error::from(e)))?;
    write_atomic(path, &bytes).map_err(|source| LoadError::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// Loads the `latent` tensor of a file written by [`save_latent`] (f32, on `device`).
pub fn load_latent(path: &Path, device: &Device) -> Result<Tensor, LoadError> {
    let data = std::fs::read(path).map_err(|source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let mut ts: HashMap<String, Tensor> = candle_core::safetensors::load_buffer(&data, device)
        .map_err(|source| LoadError::Weights {
            path: path.to_path_buf(),
            source,
        })?;
    let t = ts.remove(LATENT_KEY).ok_or_else(|| LoadError::Latent {
        path: path.to_path_buf(),
        reason: format!("no tensor named \"{LATENT_KEY}\"; was it written by `clipsculpt sample`?"),
    })?;
    if !t.dtype().is_float() {
        return Err(LoadError::Latent {
            path: path.to_path_buf(),
            reason: format!("dtype {:?} is not floating point", t.dtype()),
        });
    }
    let weights = |source| LoadError::Weights {
        path: path.to_path_buf(),
        source,
    };
    let t = t.to_dtype(DType::F32).map_err(weights)?;
    let bytes: Vec<u8> = t
        .flatten_all()
        .and_then(|f| f.to_vec1::<f32>())
        .map_err(weights)?
        .iter()
        .flat_map(|x| x.to_le_bytes())
        .collect();
    if let Some(h) = crate::weights::finite::scan("F32", &bytes) {
        return Err(LoadError::Latent {
            path: path.to_path_buf(),
            reason: format!(
                "{} NaN or infinite value(s) (first at element {}); the file is corrupt: sample or generate the latent again",
                h.count, h.first
            ),
        });
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_missing_key() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.safetensors");
        let t = Tensor::arange(0f32, 6.0, &Device::Cpu)
            .unwrap()
            .reshape((1, 2, 3))
            .unwrap();
        save_latent(&p, &t).unwrap();
        let back = load_latent(&p, &Device::Cpu).unwrap();
        assert_eq!(back.to_vec3::<f32>().unwrap(), t.to_vec3::<f32>().unwrap());
        let q = dir.path().join("b.safetensors");
        candle_core::safetensors::save(&HashMap::from([("x".to_string(), t)]), &q).unwrap();
        let err = load_latent(&q, &Device::Cpu).unwrap_err().to_string();
        assert!(err.contains("no tensor named \"latent\""), "{err}");
        let nan = Tensor::new(&[[[1f32, f32::NAN]]], &Device::Cpu).unwrap();
        save_latent(&p, &nan).unwrap();
        let err = load_latent(&p, &Device::Cpu).unwrap_err().to_string();
        assert!(err.contains("1 NaN or infinite value(s)"), "{err}");
    }
}
