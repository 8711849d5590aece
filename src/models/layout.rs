//! Which files make up a model of each kind, and resolving a [`ModelSpec`] to a local folder.

use std::path::{Path, PathBuf};

use super::hub::{fetch_files, HubError, HubOptions};
use super::spec::ModelSpec;

/// The kinds of model folders clipsculpt reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelKind {
    /// A Hugging Face `transformers` CLIP model (`config.json`, tokenizer, `model.safetensors`).
    Clip,
    /// A diffusers Shap-E pipeline (`prior/`, `text_encoder/`, `tokenizer/`, `scheduler/`, `renderer/`).
    ShapE,
}

impl ModelKind {
    /// File groups to fetch: from each group the first alternative that exists.
    pub fn files(self) -> &'static [&'static [&'static str]] {
        match self {
            ModelKind::Clip => &[
                &["config.json"],
                &["tokenizer.json", "vocab.json"],
                &["model.safetensors", "model.fp16.safetensors"],
            ],
            ModelKind::ShapE => &[
                &["model_index.json"],
                &["prior/config.json"],
                &[
                    "prior/diffusion_pytorch_model.safetensors",
                    "prior/diffusion_pytorch_model.fp16.safetensors",
                ],
                &["text_encoder/config.json"],
                &[
                    "text_encoder/model.safetensors",
                    "text_encoder/model.fp16.safetensors",
                ],
                &["tokenizer/vocab.json"],
                &["tokenizer/merges.txt"],
                &["scheduler/scheduler_config.json"],
                &["renderer/config.json"],
                &[
                    "renderer/diffusion_pytorch_model.safetensors",
                    "renderer/diffusion_pytorch_model.fp16.safetensors",
                ],
            ],
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
    /// The embedded model is requested but absent.
    #[error("the embedded toy model was not found in {0}; pass a hub id or a local directory with --model/--clip")]
    NoToy(PathBuf),
}

/// Resolves `spec` to a local folder holding the files of `kind` (downloading hub files into the
/// hf cache unless offline). `toy_root` is the folder of the embedded models.
pub fn resolve(
    spec: &ModelSpec,
    kind: ModelKind,
    toy_root: &Path,
    opts: &HubOptions,
) -> Result<PathBuf, ResolveError> {
    match spec {
        ModelSpec::Dir(d) => Ok(d.clone()),
        ModelSpec::Toy => {
            let sub = match kind {
                ModelKind::Clip => "clip",
                ModelKind::ShapE => "shap_e",
            };
            let dir = toy_root.join(sub);
            if dir.is_dir() {
                Ok(dir)
            } else {
                Err(ResolveError::NoToy(dir))
            }
        }
        ModelSpec::Hub { repo, revision } => {
            let groups = kind.files();
            let paths = fetch_files(repo, revision.as_deref(), groups, opts)?;
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
