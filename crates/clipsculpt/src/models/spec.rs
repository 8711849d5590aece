//! `--model` / `--clip` values: `toy`, a hub id `owner/name[@revision]`, or a local directory.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

/// Where a model's files come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelSpec {
    /// The embedded default shipped in `assets/`.
    Toy,
    /// A Hugging Face hub repository, optionally pinned to a revision (branch, tag or commit).
    Hub {
        /// `owner/name`.
        repo: String,
        /// Revision; `main` when absent.
        revision: Option<String>,
    },
    /// A local directory laid out like the hub repository.
    Dir(PathBuf),
}

/// A model spec that names nothing usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("model spec '{spec}' names nothing usable: not 'toy', not an existing directory, and not a hub id of the form owner/name[@revision]")]
pub struct SpecError {
    /// What was typed.
    pub spec: String,
}

impl FromStr for ModelSpec {
    type Err = SpecError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        if t.eq_ignore_ascii_case("toy") {
            return Ok(ModelSpec::Toy);
        }
        let path = PathBuf::from(t);
        let looks_like_path =
            t.starts_with('.') || t.starts_with('/') || t.starts_with('~') || t.contains('\\');
        if path.is_dir() || looks_like_path {
            return if path.is_dir() {
                Ok(ModelSpec::Dir(path))
            } else {
                Err(SpecError {
                    spec: s.to_string(),
                })
            };
        }
        let (repo, revision) = match t.split_once('@') {
            Some((r, rev)) if !rev.is_empty() => (r, Some(rev.to_string())),
            Some(_) => {
                return Err(SpecError {
                    spec: s.to_string(),
                })
            }
            None => (t, None),
        };
        let valid_part = |p: &str| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        };
        match repo.split_once('/') {
            Some((owner, name)) if valid_part(owner) && valid_part(name) => Ok(ModelSpec::Hub {
                repo: repo.to_string(),
                revision,
            }),
            _ => Err(SpecError {
                spec: s.to_string(),
            }),
        }
    }
}

impl fmt::Display for ModelSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelSpec::Toy => write!(f, "toy"),
            ModelSpec::Hub {
                repo,
                revision: None,
            } => write!(f, "{repo}"),
            ModelSpec::Hub {
                repo,
                revision: Some(r),
            } => write!(f, "{repo}@{r}"),
            ModelSpec::Dir(p) => write!(f, "{}", p.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_and_rejects() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().to_string_lossy().to_string();
        assert_eq!("toy".parse(), Ok(ModelSpec::Toy));
        assert_eq!("TOY".parse(), Ok(ModelSpec::Toy));
        assert_eq!(d.parse(), Ok(ModelSpec::Dir(dir.path().to_path_buf())));
        assert_eq!(
            "openai/shap-e".parse(),
            Ok(ModelSpec::Hub {
                repo: "openai/shap-e".into(),
                revision: None
            })
        );
        assert_eq!(
            "openai/clip-vit-base-patch32@3d74acf".parse(),
            Ok(ModelSpec::Hub {
                repo: "openai/clip-vit-base-patch32".into(),
                revision: Some("3d74acf".into())
            })
        );
        for bad in [
            "",
            "shap-e",
            "a/b/c",
            "openai/",
            "/no/such/dir",
            "./missing",
            "openai/shap-e@",
            "a b/c",
        ] {
            assert!(
                bad.parse::<ModelSpec>().is_err(),
                "{bad} should be rejected"
            );
        }
    }
}
