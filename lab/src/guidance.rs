//! A world's frozen guidance settings as world data: `shap_e/guidance.json` beside a toy prior,
//! e.g. `{"sampling_scale": 0.5, "e2e_lr": 0.1, "keep_margin": 0.05, "sampler_export":
//! "guarded", "clip": "../clip"}`. `eval` takes them as the defaults of the flags not given
//! (an explicit flag wins); `clip` is relative to the `shap_e/` folder.

use std::path::{Component, Path, PathBuf};

use serde::Deserialize;

/// The file beside a toy prior that holds its world's guidance settings.
pub const GUIDANCE_FILE: &str = "guidance.json";

/// The settings a `guidance.json` may hold, each optional.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorldGuidance {
    /// `--sampling-scale`.
    pub sampling_scale: Option<f64>,
    /// `--e2e-lr`.
    pub e2e_lr: Option<f64>,
    /// `--keep-margin`.
    pub keep_margin: Option<f32>,
    /// `--sampler-export` (`guarded` or `guided`).
    pub sampler_export: Option<String>,
    /// The scoring CLIP's folder, relative to the `shap_e/` folder.
    pub clip: Option<String>,
}

impl WorldGuidance {
    /// The [`GUIDANCE_FILE`] in `shap_e_dir`, `None` without one; an error names the file when
    /// it does not parse or holds an unknown key.
    pub fn read(shap_e_dir: &Path) -> Result<Option<Self>, String> {
        let path = shap_e_dir.join(GUIDANCE_FILE);
        let text = match std::fs::read_to_string(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            r => r.map_err(|e| format!("reading {}: {e}", path.display()))?,
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|e| format!("{}: {e}", path.display()))
    }

    /// The scoring CLIP's folder, `shap_e_dir` joined with `clip` and `..` resolved lexically
    /// (`W/shap_e` and `../clip` give `W/clip`, as `--clip W/clip` names it).
    pub fn clip_dir(&self, shap_e_dir: &Path) -> Option<PathBuf> {
        let clip = self.clip.as_ref()?;
        let mut out = PathBuf::new();
        for c in shap_e_dir.join(clip).components() {
            match c {
                Component::CurDir => {}
                Component::ParentDir
                    if matches!(out.components().next_back(), Some(Component::Normal(_))) =>
                {
                    out.pop();
                }
                other => out.push(other),
            }
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The protocol's file parses; `../clip` resolves beside `shap_e/`; an unknown key is an
    /// error naming the file; no file is `None`.
    #[test]
    fn reads_the_protocols_file_and_resolves_its_clip() -> Result<(), String> {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let shap_e = dir.path().join("w").join("shap_e");
        std::fs::create_dir_all(&shap_e).map_err(|e| e.to_string())?;
        assert_eq!(WorldGuidance::read(&shap_e)?, None);
        let text = r#"{"sampling_scale":0.5,"e2e_lr":0.1,"keep_margin":0.05,"sampler_export":"guarded","clip":"../clip"}"#;
        std::fs::write(shap_e.join(GUIDANCE_FILE), text).map_err(|e| e.to_string())?;
        let g = WorldGuidance::read(&shap_e)?.ok_or("no guidance")?;
        assert_eq!(
            (g.sampling_scale, g.e2e_lr, g.keep_margin),
            (Some(0.5), Some(0.1), Some(0.05))
        );
        assert_eq!(g.clip_dir(&shap_e), Some(dir.path().join("w").join("clip")));
        assert_eq!(
            g.clip_dir(Path::new("lab/worlds/x/shap_e")),
            Some(PathBuf::from("lab/worlds/x/clip"))
        );
        std::fs::write(
            shap_e.join(GUIDANCE_FILE),
            r#"{"sampling_scale":0.5,"lr":1}"#,
        )
        .map_err(|e| e.to_string())?;
        let err = WorldGuidance::read(&shap_e).err().unwrap_or_default();
        assert!(err.contains(GUIDANCE_FILE) && err.contains("lr"), "{err}");
        Ok(())
    }

    /// Every world in `lab/worlds` carries its scoring CLIP (`clip/`) or names one in its
    /// `guidance.json` that exists, so `eval --model W/shap_e` needs no `--clip`.
    #[test]
    fn every_lab_world_carries_or_names_its_scoring_clip() -> Result<(), String> {
        let worlds = Path::new(env!("CARGO_MANIFEST_DIR")).join("worlds");
        let mut checked = 0;
        for entry in std::fs::read_dir(&worlds).map_err(|e| e.to_string())? {
            let world = entry.map_err(|e| e.to_string())?.path();
            let shap_e = world.join("shap_e");
            let named = WorldGuidance::read(&shap_e)?.and_then(|g| g.clip_dir(&shap_e));
            let clip = named.unwrap_or_else(|| world.join("clip"));
            assert!(
                clip.join("config.json").is_file(),
                "{}: no scoring CLIP at {} (add clip/ or name one in shap_e/{GUIDANCE_FILE})",
                world.display(),
                clip.display()
            );
            checked += 1;
        }
        assert!(
            checked >= 11,
            "only {checked} worlds found in {}",
            worlds.display()
        );
        Ok(())
    }
}
