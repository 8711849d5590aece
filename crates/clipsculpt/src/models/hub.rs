//! Fetching a hub repository's files through hf-hub into the standard cache (`HF_HOME`), with a
//! progress bar, or from the cache alone when offline.

use std::path::PathBuf;

use hf_hub::api::sync::ApiBuilder;
use hf_hub::{Cache, Repo, RepoType};

/// How to reach the hub.
#[derive(Debug, Clone, Default)]
pub struct HubOptions {
    /// Use only the local cache (`HF_HUB_OFFLINE=1`).
    pub offline: bool,
    /// Show download progress bars.
    pub progress: bool,
}

/// Errors while fetching hub files.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    /// Offline and the file is not cached.
    #[error("{repo}: '{file}' is not in the hf cache and HF_HUB_OFFLINE is set; run `clipsculpt download {repo}` with network access, or unset HF_HUB_OFFLINE")]
    NotCached {
        /// Repository id.
        repo: String,
        /// File that was looked for.
        file: String,
    },
    /// None of the alternatives for a file exists in the repository.
    #[error("{repo}: none of {tried:?} could be fetched (last error: {last}); check the id and revision, or pass a local directory")]
    Missing {
        /// Repository id.
        repo: String,
        /// Alternatives tried in order.
        tried: Vec<String>,
        /// The last download error.
        last: String,
    },
    /// The hf-hub client could not be set up.
    #[error("cannot set up the hub client: {0}")]
    Client(String),
}

/// Fetches one file per group (the first alternative that exists) and returns their local paths.
/// Example group: `["model.safetensors", "model.fp16.safetensors"]`.
pub fn fetch_files(
    repo: &str,
    revision: Option<&str>,
    groups: &[Vec<String>],
    opts: &HubOptions,
) -> Result<Vec<PathBuf>, HubError> {
    let hub_repo = match revision {
        Some(r) => Repo::with_revision(repo.to_string(), RepoType::Model, r.to_string()),
        None => Repo::new(repo.to_string(), RepoType::Model),
    };
    if opts.offline {
        let cache = Cache::from_env().repo(hub_repo);
        return groups
            .iter()
            .map(|alts| {
                alts.iter()
                    .find_map(|f| cache.get(f))
                    .ok_or_else(|| HubError::NotCached {
                        repo: repo.to_string(),
                        file: alts.join(" or "),
                    })
            })
            .collect();
    }
    let api = ApiBuilder::from_env()
        .with_progress(opts.progress)
        .build()
        .map_err(|e| HubError::Client(e.to_string()))?
        .repo(hub_repo);
    groups
        .iter()
        .map(|alts| {
            let mut last = String::new();
            for f in alts.iter() {
                match api.get(f) {
                    Ok(p) => return Ok(p),
                    Err(e) => last = e.to_string(),
                }
            }
            Err(HubError::Missing {
                repo: repo.to_string(),
                tried: alts.iter().map(|s| s.to_string()).collect(),
                last,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Offline with an empty cache: a clear error that names the repo, the file and the fix.
    #[test]
    fn offline_and_uncached_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        std::env::set_var("HF_HOME", dir.path());
        let err = fetch_files(
            "openai/shap-e",
            None,
            &[vec!["prior/config.json".to_string()]],
            &HubOptions {
                offline: true,
                progress: false,
            },
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("openai/shap-e")
                && msg.contains("prior/config.json")
                && msg.contains("HF_HUB_OFFLINE")
        );
    }
}
