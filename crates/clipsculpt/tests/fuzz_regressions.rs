//! Replays every input the fuzzers found a problem with (`tests/fixtures/fuzz/<target>/`) and
//! their seed corpora (`fuzz/seeds/<target>/`) through the same harness as the fuzz targets,
//! so CI checks the fixes without nightly Rust or cargo-fuzz.

#[path = "../fuzz/harness.rs"]
mod harness;

use std::path::Path;

/// Runs `f` on every file under `fuzz/seeds/<target>` and `tests/fixtures/fuzz/<target>`;
/// returns how many there were.
fn replay(target: &str, f: fn(&[u8])) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut n = 0;
    for dir in [
        root.join("fuzz/seeds").join(target),
        root.join("tests/fixtures/fuzz").join(target),
    ] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries {
            let p = e.unwrap().path();
            eprintln!("{}", p.display());
            f(&std::fs::read(&p).unwrap());
            n += 1;
        }
    }
    n
}

#[test]
fn weights_inputs() {
    assert!(replay("weights", harness::weights) > 0);
}

#[test]
fn tokenizer_inputs() {
    assert!(replay("tokenizer", harness::tokenizer) > 0);
}

#[test]
fn prompt_file_inputs() {
    assert!(replay("prompts", harness::prompts) > 0);
}

#[test]
fn manifest_inputs() {
    assert!(replay("manifest", harness::manifest) > 0);
}

#[test]
fn report_inputs() {
    assert!(replay("report", harness::report) > 0);
}
