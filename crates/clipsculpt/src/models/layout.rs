//! Which files make up a model of each kind, and resolving a [`ModelSpec`] to a local folder.

use std::path::PathBuf;

use super::hub::{fetch_files, HubError, HubOptions};
use super::spec::ModelSpec;
use crate::weights::files::{under, DECODER_DIRS, DIFFUSERS_WEIGHTS, TRANSFORMERS_WEIGHTS};

/// The kinds of model folders clipsculpt reads (`--kind clip|shap-e` on the command line).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelKind {
    /// A Hugging Face `transformers` CLIP model (`config.json`, tokenizer, `model.safetensors`).
    Clip,
    /// A diffusers Shap-E pipeline (`prior/`, `text_encoder/`, `tokenizer/`, `scheduler/`, `renderer/`).
    ShapE,
}

impl std::str::FromStr for ModelKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "clip" => Ok(Self::Clip),
            "shap-e" => Ok(Self::ShapE),
            _ => Err(format!("unknown model kind {s:?} (clip, shap-e)")),
        }
    }
}

impl ModelKind {
    /// File groups to fetch: from each group the first alternative that exists. Built from the
    /// loaders' own lists ([`crate::weights::files`]).
    pub fn files(self) -> Vec<Vec<String>> {
        let one = |f: &str| vec![f.to_string()];
        let owned = |names: &[&str]| names.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        match self {
            ModelKind::Clip => vec![
                one("config.json"),
                owned(&["tokenizer.json", "vocab.json"]),
                owned(&TRANSFORMERS_WEIGHTS),
            ],
            ModelKind::ShapE => {
                let in_decoder_dirs = |names: &[&str]| {
                    DECODER_DIRS
                        .iter()
                        .flat_map(|d| under(d, names))
                        .collect::<Vec<_>>()
                };
                vec![
                    one("model_index.json"),
                    one("prior/config.json"),
                    under("prior", &DIFFUSERS_WEIGHTS),
                    one("text_encoder/config.json"),
                    under("text_encoder", &TRANSFORMERS_WEIGHTS),
                    one("tokenizer/vocab.json"),
                    one("tokenizer/merges.txt"),
                    one("scheduler/scheduler_config.json"),
                    in_decoder_dirs(&["config.json"]),
                    in_decoder_dirs(&DIFFUSERS_WEIGHTS),
                ]
            }
        }
    }

    /// A guess from a hub id or folder name (`shap-e` → Shap-E, else CLIP).
    pub fn guess(spec: &ModelSpec) -> ModelKind {
        let name = spec.to_string().to_ascii_lowercase();
        if name.contains("shap-e") || name.contains("shap_e") || name.contains("shape") {
            ModelKind::ShapE
        } else {
            ModelKind::Clip
        }
    }
}

/// Errors resolving a spec to files.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// Fetching from the hub failed.
    #[error(transparent)]
    Hub(#[from] HubError),
    /// The embedded model could not be written to the cache.
    #[error("{0}")]
    NoToy(String),
}

/// Resolves `spec` to a local folder holding the files of `kind` (downloading hub files into the
/// hf cache unless offline); the embedded model is written to the user's cache on first use.
pub fn resolve(
    spec: &ModelSpec,
    kind: ModelKind,
    opts: &HubOptions,
) -> Result<PathBuf, ResolveError> {
    match spec {
        ModelSpec::Dir(d) => Ok(d.clone()),
        ModelSpec::Toy => {
            let sub = match kind {
                ModelKind::Clip => "clip",
                ModelKind::ShapE => "shap_e",
            };
            Ok(super::embedded::folder()
                .map_err(ResolveError::NoToy)?
                .join(sub))
        }
        ModelSpec::Hub { repo, revision } => {
            let groups = kind.files();
            let paths = fetch_files(repo, revision.as_deref(), &groups, opts)?;
            // Every file lives in one snapshot folder: strip the first file's relative name.
            let first = &paths[0];
            let depth = groups[0][0].split('/').count();
            let mut root = first.clone();
            for _ in 0..depth {
                root.pop();
            }
            Ok(root)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The download lists come from the loaders' own file lists (bf16, `.bin`, both decoder
    /// folders).
    #[test]
    fn download_lists_follow_the_loaders() {
        let clip = ModelKind::Clip.files();
        assert!(clip
            .iter()
            .any(|g| g.contains(&"model.bf16.safetensors".to_string())));
        let shap_e = ModelKind::ShapE.files();
        let all: Vec<&String> = shap_e.iter().flatten().collect();
        for f in [
            "prior/diffusion_pytorch_model.bin",
            "shap_e_renderer/config.json",
            "renderer/diffusion_pytorch_model.safetensors",
        ] {
            assert!(all.iter().any(|g| *g == f), "{f} not in {all:?}");
        }
    }
}
