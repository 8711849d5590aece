//! Reading a folder of runs into cards: run folders (a `report.json`), failed batch items (the latest manifest
//! line of an item that has no run folder, and `<id>.failed/` folders).

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// Images a card shows when its folder has them, with their captions, in this order.
pub(crate) const IMAGES: &[(&str, &str)] = &[
    ("mesh_preview.png", "mesh"),
    ("preview_prior.png", "NeRF before guidance"),
    ("preview.png", "NeRF after guidance"),
    ("blender_preview.png", "Blender"),
    ("contact_sheet.png", "blend steps"),
    ("blend.gif", "blend"),
];

/// How a card's item ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CardStatus {
    /// A finished run.
    Done,
    /// A run with no surface to mesh (its report says why).
    NoMesh,
    /// A failed batch item.
    Failed,
}

/// One item of the gallery.
#[derive(Debug, Clone, PartialEq)]
pub struct Card {
    /// Its folder, relative to the gallery's (empty: the gallery's folder itself).
    pub folder: String,
    /// A name for it made of `[A-Za-z0-9._-]` only, unique in the gallery.
    pub key: String,
    /// How it ended.
    pub status: CardStatus,
    /// The prompt.
    pub prompt: String,
    /// The command that made it, when not `generate`/`batch` (`vary`, `edit`, `blend`).
    pub command: Option<String>,
    /// The seed.
    pub seed: Option<u64>,
    /// The guidance mode.
    pub mode: Option<String>,
    /// Held-aside scores before and after guidance.
    pub scores: Option<[f64; 2]>,
    /// The held-out CLIP's cosines before and after guidance, when a run had one.
    pub held_out: Option<[f64; 2]>,
    /// The exported mesh's own score, when the report has one.
    pub mesh_score: Option<f64>,
    /// Wall-clock seconds.
    pub seconds: Option<f64>,
    /// Faces of the mesh.
    pub faces: Option<u64>,
    /// Why it failed or has no mesh.
    pub reason: Option<String>,
    /// Its parents (`vary`, `edit`, `blend`): one line each.
    pub parents: Vec<String>,
    /// Images present, `(file, caption)`, relative to the gallery's folder.
    pub images: Vec<(String, &'static str)>,
    /// Every file of its folder, relative to the gallery's folder, with its size in bytes.
    pub files: Vec<(String, u64)>,
    /// Its `mesh.glb`, when it has one.
    pub glb: Option<PathBuf>,
}

/// The cards of `dir`: the folder itself when it holds a run, then its run folders and failed items by name.
pub(crate) fn scan(dir: &Path) -> Vec<Card> {
    let mut cards = Vec::new();
    if let Some(report) = read_report(dir) {
        cards.push(run_card(dir, "", &report));
    }
    let failures = manifest_failures(dir);
    let mut names: Vec<String> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_dir())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with('.') && n != super::ASSETS_DIR)
        .collect();
    names.sort();
    for name in &names {
        let sub = dir.join(name);
        if let Some(id) = name.strip_suffix(".failed") {
            if !dir.join(id).is_dir() {
                let reason = failures.get(id).map(|f| f.error.clone());
                cards.push(failed_card(dir, id, Some(name), failures.get(id), reason));
            }
        } else if let Some(report) = read_report(&sub) {
            cards.push(run_card(dir, name, &report));
        }
    }
    for (id, f) in &failures {
        let kept = dir.join(format!("{id}.failed"));
        if !dir.join(id).is_dir() && !kept.is_dir() {
            cards.push(failed_card(dir, id, None, Some(f), Some(f.error.clone())));
        }
    }
    unique_keys(&mut cards);
    cards
}

/// The parsed `report.json` of `dir`, when it has a readable one.
fn read_report(dir: &Path) -> Option<Value> {
    let text = fs::read_to_string(dir.join("report.json")).ok()?;
    serde_json::from_str::<Value>(&text)
        .ok()
        .filter(Value::is_object)
}

/// The card of the run in `dir/folder` with its `report`.
fn run_card(dir: &Path, folder: &str, report: &Value) -> Card {
    let no_mesh = report["no_mesh"].as_str().map(String::from);
    let mut card = folder_card(dir, folder);
    card.status = match no_mesh {
        Some(_) => CardStatus::NoMesh,
        None => CardStatus::Done,
    };
    card.reason = no_mesh;
    fill_from_report(&mut card, report);
    card
}

/// The card of failed item `id`, its kept folder `kept` (when there is one), its manifest line and reason.
fn failed_card(
    dir: &Path,
    id: &str,
    kept: Option<&str>,
    line: Option<&Failure>,
    reason: Option<String>,
) -> Card {
    let mut card = match kept {
        Some(k) => folder_card(dir, k),
        None => folder_card_empty(id),
    };
    if let Some(report) = kept.and_then(|k| read_report(&dir.join(k))) {
        fill_from_report(&mut card, &report);
    }
    card.status = CardStatus::Failed;
    card.reason = reason.or_else(|| Some("failed (no manifest line says why)".into()));
    if let Some(f) = line {
        if card.prompt.is_empty() {
            card.prompt = f.prompt.clone();
        }
        card.seconds = card.seconds.or(Some(f.seconds));
    }
    card.glb = None;
    card
}

/// A card with nothing but its folder's name.
fn folder_card_empty(folder: &str) -> Card {
    Card {
        folder: folder.to_string(),
        key: String::new(),
        status: CardStatus::Done,
        prompt: String::new(),
        command: None,
        seed: None,
        mode: None,
        scores: None,
        held_out: None,
        mesh_score: None,
        seconds: None,
        faces: None,
        reason: None,
        parents: Vec::new(),
        images: Vec::new(),
        files: Vec::new(),
        glb: None,
    }
}

/// A card for `dir/folder` with its files, images and mesh.
fn folder_card(dir: &Path, folder: &str) -> Card {
    let mut card = folder_card_empty(folder);
    let path = dir.join(folder);
    let rel = |name: &str| match folder {
        "" => name.to_string(),
        f => format!("{f}/{name}"),
    };
    let mut files: Vec<(String, u64)> = fs::read_dir(&path)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_file())
        .map(|e| {
            let size = e.metadata().map_or(0, |m| m.len());
            (e.file_name().to_string_lossy().into_owned(), size)
        })
        .filter(|(n, _)| !n.starts_with('.') && n != super::INDEX_FILE)
        .collect();
    files.sort();
    card.images = IMAGES
        .iter()
        .filter(|(name, _)| files.iter().any(|(n, _)| n == name))
        .map(|&(name, caption)| (rel(name), caption))
        .collect();
    let glb = path.join("mesh.glb");
    card.glb = glb.is_file().then_some(glb);
    card.files = files.into_iter().map(|(n, s)| (rel(&n), s)).collect();
    card
}

/// Fills `card` with what `report` says (any version of `report.json`: missing fields stay empty).
fn fill_from_report(card: &mut Card, r: &Value) {
    let pair = |v: &Value| Some([v.get(0)?.as_f64()?, v.get(1)?.as_f64()?]);
    card.prompt = r["prompt"]
        .as_str()
        .or(r["title"].as_str())
        .unwrap_or_default()
        .to_string();
    card.command = r["command"].as_str().map(String::from);
    card.seed = r["settings"]["seed"].as_u64();
    card.mode = r["settings"]["mode"].as_str().map(String::from);
    card.scores = match (r["score_before"].as_f64(), r["score_after"].as_f64()) {
        (Some(a), Some(b)) => Some([a, b]),
        _ => None,
    };
    card.held_out = pair(&r["held_out_scores"]);
    card.mesh_score = r["mesh_score"].as_f64();
    card.seconds = r["seconds"]["total"].as_f64();
    card.faces = r["mesh"]["faces"].as_u64();
    card.parents = r["parents"]
        .as_array()
        .into_iter()
        .flatten()
        .map(parent_line)
        .collect();
}

/// One parent as a line: its prompt, the first hex digits of its latent's hash, and where it came from.
fn parent_line(p: &Value) -> String {
    let prompt = p["prompt"].as_str().unwrap_or("?");
    let hash: String = p["latent_sha256"]
        .as_str()
        .unwrap_or("")
        .chars()
        .take(12)
        .collect();
    let source = p["source"].as_str().unwrap_or("");
    format!("{prompt:?} (latent {hash}…) {source}")
        .trim_end()
        .to_string()
}

/// A failed item's latest manifest line.
#[derive(Debug, Clone)]
pub(crate) struct Failure {
    prompt: String,
    error: String,
    seconds: f64,
}

/// Items whose latest line in any of `dir`'s manifests (`manifest*.jsonl`) says they failed.
fn manifest_failures(dir: &Path) -> BTreeMap<String, Failure> {
    let mut latest: BTreeMap<String, Option<Failure>> = BTreeMap::new();
    let mut manifests: Vec<PathBuf> = fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let n = p.file_name().map(|n| n.to_string_lossy().into_owned());
            n.is_some_and(|n| n.starts_with("manifest") && n.ends_with(".jsonl"))
        })
        .collect();
    manifests.sort();
    for text in manifests.iter().filter_map(|m| fs::read_to_string(m).ok()) {
        for r in text
            .lines()
            .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        {
            let Some(id) = r["id"].as_str() else { continue };
            let failure = (r["status"] == "failed").then(|| Failure {
                prompt: r["prompt"].as_str().unwrap_or_default().to_string(),
                error: r["error"].as_str().unwrap_or("failed").to_string(),
                seconds: r["seconds"].as_f64().unwrap_or(0.0),
            });
            latest.insert(id.to_string(), failure);
        }
    }
    latest
        .into_iter()
        .filter_map(|(id, f)| Some((id, f?)))
        .collect()
}

/// Gives every card a key of `[A-Za-z0-9._-]` that no other card has.
fn unique_keys(cards: &mut [Card]) {
    let mut seen = std::collections::HashSet::new();
    for (i, card) in cards.iter_mut().enumerate() {
        let mut key: String = card
            .folder
            .chars()
            .map(|c| match c {
                'A'..='Z' | 'a'..='z' | '0'..='9' | '.' | '_' | '-' => c,
                _ => '_',
            })
            .collect();
        if key.is_empty() || key.starts_with('.') {
            key = format!("run{key}");
        }
        if !seen.insert(key.clone()) {
            key = format!("{key}-{i}");
            seen.insert(key.clone());
        }
        card.key = key;
    }
}
