//! `train-toy --resume`: the prior stage's checkpoint in `W/.checkpoint/`, written after the
//! distractor fit and every [`EVERY`] prior steps, each file atomically (temp + rename; the
//! state file last, naming the weights file it belongs to). It is tied to one command line: a
//! checkpoint of another command is refused. `train-toy` removes it before it writes the
//! manifest, and [`crate::train::checksums`] never lists it.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use candle_core::{Device, Result, Tensor};
use serde::{Deserialize, Serialize};

use crate::train_prior::PriorSnapshot;
use clipsculpt::atomic::write_atomic;
use clipsculpt::random::save_tensors;

/// The checkpoint's folder inside a world.
pub const CHECKPOINT_DIR: &str = ".checkpoint";
/// Prior steps between two checkpoints.
pub const EVERY: usize = 250;

const STATE: &str = "state.json";
const DISTRACTOR_TENSORS: &str = "distractors.safetensors";
const DISTRACTOR_JSON: &str = "distractors.json";

/// The checkpoint of one command's run in one world.
pub struct Checkpoint {
    dir: PathBuf,
    command: String,
}

/// `state.json`: the command and the prior's progress (without its tensors).
#[derive(Serialize, Deserialize, Default)]
struct State {
    command: String,
    distractors: bool,
    prior: Option<PriorState>,
}

#[derive(Serialize, Deserialize)]
struct PriorState {
    step: usize,
    weights: String,
    losses: Vec<f32>,
    draws: Vec<[u64; 2]>,
    rng: String,
    adam_step: usize,
}

fn msg(e: impl std::fmt::Display) -> candle_core::Error {
    candle_core::Error::Msg(e.to_string())
}

impl Checkpoint {
    /// The checkpoint of `command` in world `out`.
    pub fn new(out: &Path, command: &str) -> Self {
        Self {
            dir: out.join(CHECKPOINT_DIR),
            command: command.to_string(),
        }
    }

    /// Whether a checkpoint is there (of any command).
    pub fn exists(&self) -> bool {
        self.dir.join(STATE).is_file()
    }

    /// Removes the checkpoint, if any.
    pub fn remove(&self) -> Result<()> {
        match std::fs::remove_dir_all(&self.dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(msg(format!(
                "removing the checkpoint {}: {e}",
                self.dir.display()
            ))),
            _ => Ok(()),
        }
    }

    /// The state, `Default` when there is none; an error when it is another command's.
    fn state(&self) -> Result<State> {
        let path = self.dir.join(STATE);
        let text = match std::fs::read_to_string(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(State::default()),
            r => r.map_err(|e| msg(format!("reading {}: {e}", path.display())))?,
        };
        let state: State = serde_json::from_str(&text)
            .map_err(|e| msg(format!("{} does not parse: {e}", path.display())))?;
        if state.command != self.command {
            candle_core::bail!(
                "{} is the checkpoint of another command ({}); rerun that command, or remove it",
                self.dir.display(),
                state.command
            );
        }
        Ok(state)
    }

    fn write_state(&self, state: &State) -> Result<()> {
        let text = serde_json::to_string_pretty(state).map_err(msg)?;
        write_atomic(&self.dir.join(STATE), text.as_bytes()).map_err(msg)
    }

    /// Saves the fitted distractors (latents and the text of their description, kept byte for
    /// byte); any prior progress is dropped, since it was trained on other distractors.
    pub fn save_distractors(&self, latents: &Tensor, json: &str) -> Result<()> {
        std::fs::create_dir_all(&self.dir).map_err(msg)?;
        let tensors = HashMap::from([("latent".to_string(), latents.clone())]);
        save_tensors(&tensors, &self.dir.join(DISTRACTOR_TENSORS))?;
        write_atomic(&self.dir.join(DISTRACTOR_JSON), json.as_bytes()).map_err(msg)?;
        self.write_state(&State {
            command: self.command.clone(),
            distractors: true,
            prior: None,
        })
    }

    /// The distractors a checkpoint holds, if any.
    pub fn distractors(&self, dev: &Device) -> Result<Option<(Tensor, String)>> {
        if !self.state()?.distractors {
            return Ok(None);
        }
        let mut t = candle_core::safetensors::load(self.dir.join(DISTRACTOR_TENSORS), dev)?;
        let latents = t
            .remove("latent")
            .ok_or_else(|| msg("the checkpoint's distractors have no latents"))?;
        let text = std::fs::read_to_string(self.dir.join(DISTRACTOR_JSON)).map_err(msg)?;
        Ok(Some((latents, text)))
    }

    /// Saves a prior snapshot: its weights file first, then the state naming it, then the
    /// previous weights file goes.
    pub fn save_prior(&self, snap: &PriorSnapshot) -> Result<()> {
        std::fs::create_dir_all(&self.dir).map_err(msg)?;
        let mut state = self.state()?;
        let weights = format!("prior-{}.safetensors", snap.step);
        save_tensors(&snap.tensors, &self.dir.join(&weights))?;
        let old = state.prior.as_ref().map(|p| p.weights.clone());
        state.command = self.command.clone();
        state.prior = Some(PriorState {
            step: snap.step,
            weights,
            losses: snap.losses.clone(),
            draws: snap.draws.clone(),
            rng: snap.rng.clone(),
            adam_step: snap.adam_step,
        });
        self.write_state(&state)?;
        if let Some(old) = old.filter(|o| state.prior.as_ref().is_some_and(|p| &p.weights != o)) {
            let _ = std::fs::remove_file(self.dir.join(old));
        }
        Ok(())
    }

    /// The prior snapshot a checkpoint holds, if any.
    pub fn prior(&self, dev: &Device) -> Result<Option<PriorSnapshot>> {
        let Some(p) = self.state()?.prior else {
            return Ok(None);
        };
        let tensors = candle_core::safetensors::load(self.dir.join(&p.weights), dev)?;
        Ok(Some(PriorSnapshot {
            step: p.step,
            losses: p.losses,
            draws: p.draws,
            rng: p.rng,
            adam_step: p.adam_step,
            tensors,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(step: usize) -> Result<PriorSnapshot> {
        let t = Tensor::new(&[1f32, 2.0, step as f32], &Device::Cpu)?;
        Ok(PriorSnapshot {
            step,
            losses: vec![0.5; step],
            draws: vec![[step as u64, 1]],
            rng: format!("Rng {{ state: {step} }}"),
            adam_step: step,
            tensors: HashMap::from([("w".to_string(), t)]),
        })
    }

    /// A saved snapshot reads back (the latest one, its older weights file gone); another
    /// command's checkpoint is refused; a removed one is absent.
    #[test]
    fn snapshots_round_trip_and_belong_to_one_command() -> Result<()> {
        let dir = tempfile::tempdir().map_err(msg)?;
        let ck = Checkpoint::new(dir.path(), "train-toy --seed 0");
        assert!(ck.prior(&Device::Cpu)?.is_none() && !ck.exists());
        ck.save_prior(&snapshot(10)?)?;
        ck.save_prior(&snapshot(20)?)?;
        let back = ck.prior(&Device::Cpu)?.ok_or_else(|| msg("no snapshot"))?;
        assert_eq!((back.step, back.draws.clone()), (20, vec![[20, 1]]));
        assert_eq!(back.tensors["w"].to_vec1::<f32>()?, [1.0, 2.0, 20.0]);
        let files = std::fs::read_dir(dir.path().join(CHECKPOINT_DIR)).map_err(msg)?;
        assert_eq!(files.count(), 2, "state.json and the latest weights only");
        let other = Checkpoint::new(dir.path(), "train-toy --seed 1");
        assert!(other.prior(&Device::Cpu).is_err());
        ck.remove()?;
        assert!(!ck.exists() && ck.prior(&Device::Cpu)?.is_none());
        Ok(())
    }
}
