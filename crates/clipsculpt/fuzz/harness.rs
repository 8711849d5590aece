//! What each fuzz target does with one input, and the invariants it checks (a panic is a
//! finding). Shared by the fuzz targets (`fuzz/fuzz_targets/`) and the regression tests that
//! replay every crasher under plain `cargo test` (`tests/fuzz_regressions.rs`).
#![allow(dead_code)]

use std::path::{Path, PathBuf};

use candle_core::{DType, Device};
use clipsculpt::atomic::{relocate_report, RunSummary};
use clipsculpt::batch::{check_prompt, parse_prompt_bytes, ManifestLines};
use clipsculpt::clip::ClipTokenizer;
use clipsculpt::weights::WeightFile;

/// Separates the files packed into one tokenizer input (never in UTF-8 text).
pub const SEPARATOR: u8 = 0xff;

/// A scratch folder of this process and thread (in `/dev/shm` when it exists).
pub fn scratch() -> PathBuf {
    let base = Path::new("/dev/shm");
    let base = if base.is_dir() {
        base.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let dir = base
        .join(format!(
            "clipsculpt-fuzz-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ))
        .to_string_lossy()
        .replace(['(', ')'], "");
    let dir = PathBuf::from(dir);
    std::fs::create_dir_all(&dir).expect("scratch folder");
    dir
}

/// A safetensors file through the weight loader: open (size checks, NaN/inf scan), then build
/// a model that asks for two fixed tensors and reads every tensor the header names.
pub fn weights(data: &[u8]) {
    let p = scratch().join("w.safetensors");
    std::fs::write(&p, data).expect("scratch write");
    let Ok(w) = WeightFile::open(&p) else {
        return;
    };
    let names = header_names(data);
    let _ = w.build(DType::F32, &Device::Cpu, |vb| {
        for n in &names {
            let _ = vb.get_unchecked_dtype(n, DType::F32);
        }
        vb.get((2, 2), "a")?;
        vb.get(3, "b")
    });
}

/// The tensor names of a safetensors header, when it parses.
fn header_names(data: &[u8]) -> Vec<String> {
    let Some(len) = data.get(..8) else {
        return Vec::new();
    };
    let n = u64::from_le_bytes(len.try_into().expect("8 bytes")) as usize;
    let Some(raw) = data.get(8..8usize.saturating_add(n)) else {
        return Vec::new();
    };
    match serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(raw) {
        Ok(m) => m.keys().filter(|k| *k != "__metadata__").cloned().collect(),
        Err(_) => Vec::new(),
    }
}

/// Tokenizer files through `ClipTokenizer::from_dir`. Byte 0 picks the layout, the rest is
/// split at [`SEPARATOR`]: even → `tokenizer.json`, `tokenizer_config.json`, `config.json`
/// (the toy models' layout); odd → `vocab.json`, `merges.txt`, `tokenizer_config.json` (CLIP's
/// BPE files). A last part, when present, is a prompt to encode.
pub fn tokenizer(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let dir = scratch().join("tok");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch folder");
    let names: [&str; 3] = if mode % 2 == 0 {
        ["tokenizer.json", "tokenizer_config.json", "config.json"]
    } else {
        ["vocab.json", "merges.txt", "tokenizer_config.json"]
    };
    let mut parts = rest.split(|&b| b == SEPARATOR);
    for name in names {
        if let Some(part) = parts.next() {
            std::fs::write(dir.join(name), part).expect("scratch write");
        }
    }
    let Ok(tok) = ClipTokenizer::from_dir(&dir, 77) else {
        return;
    };
    let extra = parts
        .next()
        .map(String::from_utf8_lossy)
        .unwrap_or_default();
    for prompt in ["a red cube", "", "ÀÉ  \u{1F600} <|endoftext|>", &extra] {
        if let Ok(t) = tok.encode(prompt) {
            assert_eq!(t.ids.len(), 77, "every prompt becomes the context length");
        }
    }
}

/// A prompt file: byte 0 picks `.jsonl` (odd) or `.txt` (even). Every item must pass the
/// prompt check, and its id must be a safe, visible folder name.
pub fn prompts(data: &[u8]) {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let name = if mode % 2 == 1 { "p.jsonl" } else { "p.txt" };
    let Ok(file) = parse_prompt_bytes(Path::new(name), rest.to_vec()) else {
        return;
    };
    for item in &file.items {
        assert!(check_prompt(&item.prompt).is_ok(), "{item:?}");
        let id = item.id(0);
        assert!(
            !id.is_empty()
                && !id.starts_with(['.', '-'])
                && id
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
            "unsafe id {id:?} for {item:?}"
        );
    }
    for e in &file.errors {
        assert!(!e.to_string().is_empty());
    }
}

/// A manifest file: parsing never panics, bad line numbers are within the file, and a record
/// appended after arbitrary bytes on its own line is read back.
pub fn manifest(data: &[u8]) {
    let lines = ManifestLines::parse(data);
    let count = data.split(|&b| b == b'\n').count();
    assert!(lines.bad_lines.iter().all(|&l| l >= 1 && l <= count));
    let mut appended = data.to_vec();
    appended.extend_from_slice(
        b"\n{\"id\":\"zz-fuzz\",\"line\":1,\"prompt\":\"p\",\"status\":\"done\",\"seconds\":0.0}\n",
    );
    assert!(ManifestLines::parse(&appended).done.contains("zz-fuzz"));
}

/// A `report.json` as the next run reads it: the run summary of a refusal message, and the
/// file-list rewrite done when a run's folder moves into place (which must keep the prompt).
pub fn report(data: &[u8]) {
    let base = scratch();
    let work = base.join(".run.partial-1");
    let _ = std::fs::remove_dir_all(&work);
    std::fs::create_dir_all(&work).expect("scratch folder");
    std::fs::write(work.join("report.json"), data).expect("scratch write");
    let before = RunSummary::parse(data);
    relocate_report(&work, &base.join("run"));
    let after = std::fs::read(work.join("report.json")).expect("report still there");
    // A readable summary survives the rewrite (an unreadable one, e.g. with a duplicate key,
    // may become readable: the rewrite keeps the last value, as JSON readers do).
    if let Some(s) = before {
        assert_eq!(
            RunSummary::parse(&after).as_ref(),
            Some(&s),
            "the rewrite keeps the summary"
        );
        assert!(!s.to_string().is_empty());
    }
}
