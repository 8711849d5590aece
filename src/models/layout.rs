//! Which files make up a model of each kind, and resolving a [`ModelSpec`] to a local folder.

use std::path::PathBuf;

use super::hub::{fetch_files, HubError, HubOptions};
use super::spec::ModelSpec;
use crate::weights::files::{under, DECODER_DIRS, DIFFUSERS_WEIGHTS, TRANSFORMERS_WEIGHTS};

/// The kinds of model folders clipsculpt reads (`--kind clip|shap-e` on the command line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum ModelKind {
    /// A Hugging Face `transformers` CLIP model (`config.json`, tokenizer, `model.safetensors`).
    Clip,
    /// A diffusers Shap-E pipeline (`prior/`, `text_encoder/`, `tokenizer/`, `scheduler/`, `renderer/`).
    ShapE,
}

impl ModelKind {
    /// File groups to fetch: from each group the first alternative that exists. Built from the
    /// loaders' own lists ([`crate::weights::files`]).
    pub(crate) fn files(self) -> Vec<Vec<String>> {
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
    pub(crate) fn guess(spec: &ModelSpec) -> ModelKind {
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
pub(crate) enum ResolveError {
    /// Fetching from the hub failed.
    #[error(transparent)]
    Hub(#[from] HubError),
    /// The embedded model is requested but absent from every place searched.
    #[error("the embedded toy model was not found (looked in {}); pass a hub id or a local directory with --model DIR / --clip DIR", .0.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "))]
    NoToy(Vec<PathBuf>),
}

/// Resolves `spec` to a local folder holding the files of `kind` (downloading hub files into the
/// hf cache unless offline). `toy_roots` are the folders searched, in order, for the embedded
/// models.
pub(crate) fn resolve(
    spec: &ModelSpec,
    kind: ModelKind,
    toy_roots: &[PathBuf],
    opts: &HubOptions,
) -> Result<PathBuf, ResolveError> {
    match spec {
        ModelSpec::Dir(d) => Ok(d.clone()),
        ModelSpec::Toy => {
            let sub = match kind {
                ModelKind::Clip => "clip",
                ModelKind::ShapE => "shap_e",
            };
            let tried: Vec<PathBuf> = toy_roots.iter().map(|r| r.join(sub)).collect();
            match tried.iter().find(|d| d.is_dir()) {
                Some(dir) => Ok(dir.clone()),
                None => Err(ResolveError::NoToy(tried)),
            }
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

    /// A missing embedded model names every folder searched and the `--model DIR` way out.
    #[test]
    fn missing_toy_names_every_place_it_looked() {
        let tmp = tempfile::tempdir().unwrap();
        let roots = [tmp.path().join("a"), tmp.path().join("b")];
        let opts = HubOptions {
            offline: true,
            progress: false,
        };
        let err = resolve(&ModelSpec::Toy, ModelKind::ShapE, &roots, &opts).unwrap_err();
        let msg = err.to_string();
        for r in &roots {
            assert!(
                msg.contains(&r.join("shap_e").display().to_string()),
                "{msg}"
            );
        }
        assert!(msg.contains("--model DIR"), "{msg}");
        std::fs::create_dir_all(roots[1].join("shap_e")).unwrap();
        let found = resolve(&ModelSpec::Toy, ModelKind::ShapE, &roots, &opts).unwrap();
        assert_eq!(found, roots[1].join("shap_e"));
    }

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
