//! SHA-256 digests of the weight files a model folder's loaders read, for provenance: which
//! weights made an asset ([`crate::pipeline::Provenance`]).

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::files::{DIFFUSERS_WEIGHTS, TRANSFORMERS_WEIGHTS};

/// Lower-case hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Lower-case hex SHA-256 of the file at `path`, read in 1 MiB pieces.
pub fn file_sha256(path: &Path) -> std::io::Result<String> {
    let mut file = std::fs::File::open(path)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf)?;
        if n == 0 {
            return Ok(hex(&hasher.finalize()));
        }
        hasher.update(&buf[..n]);
    }
}

/// The weight files of `dir` and of its immediate subfolders, as the loaders choose them: in each
/// folder the first present of the `transformers` names, else of the diffusers names.
fn weight_files(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut folders = vec![dir.to_path_buf()];
    for entry in std::fs::read_dir(dir)? {
        let p = entry?.path();
        if p.is_dir() {
            folders.push(p);
        }
    }
    folders.sort();
    Ok(folders
        .iter()
        .filter_map(|f| {
            let first = |names: &[&str]| names.iter().map(|n| f.join(n)).find(|p| p.is_file());
            first(&TRANSFORMERS_WEIGHTS).or_else(|| first(&DIFFUSERS_WEIGHTS))
        })
        .collect())
}

/// The SHA-256 of every weight file of the model folder `dir`, by its path under `dir` (`/`
/// separators), prefixed with `role/` (`model/prior/diffusion_pytorch_model.safetensors`).
pub fn folder_digests(dir: &Path, role: &str) -> std::io::Result<BTreeMap<String, String>> {
    weight_files(dir)?
        .into_iter()
        .map(|p| {
            let rel = p.strip_prefix(dir).unwrap_or(&p);
            let parts: Vec<_> = rel.iter().map(|c| c.to_string_lossy()).collect();
            Ok((format!("{role}/{}", parts.join("/")), file_sha256(&p)?))
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The digest of a known string, and a folder's weight files as the loaders pick them (the
    /// first name present per folder; other files ignored).
    #[test]
    fn digests_name_the_files_the_loaders_read() -> anyhow::Result<()> {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let tmp = tempfile::tempdir()?;
        let d = tmp.path();
        std::fs::create_dir_all(d.join("prior"))?;
        std::fs::write(d.join("prior/diffusion_pytorch_model.safetensors"), b"abc")?;
        std::fs::write(d.join("prior/diffusion_pytorch_model.bin"), b"x")?;
        std::fs::write(d.join("model.safetensors"), b"")?;
        std::fs::write(d.join("config.json"), b"{}")?;
        let got = folder_digests(d, "clip")?;
        let keys: Vec<_> = got.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "clip/model.safetensors",
                "clip/prior/diffusion_pytorch_model.safetensors"
            ]
        );
        assert_eq!(
            got["clip/prior/diffusion_pytorch_model.safetensors"],
            sha256_hex(b"abc")
        );
        Ok(())
    }
}
