//! A regression guard for the README's Quality table (world A, the embedded default): a fast part of the
//! eval it was made with (`clipsculpt-lab eval prompts/toy-eval.txt`, every caption at seeds 0–2), asserted at the
//! values the table states. Held out: the six held-out captions at seeds 0–2 under the prior and guided sampling
//! (the default): 3 of 18 runs right in each, 1 of 6 objects, guidance adding none. Seen: one caption per shape
//! at seed 0, right under the prior and under guided sampling (never below the prior on seen objects).

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// Runs `eval` of `prompts` at `seeds` seeds in the prior and sampling modes; its records.
fn eval(prompts: &Path, seeds: &str, records: &Path) -> Vec<Value> {
    let o = Command::new(env!("CARGO_BIN_EXE_clipsculpt-lab"))
        .args(["-q", "eval"])
        .arg(prompts)
        .args(["--seeds", seeds, "--modes", "prior,sampling", "--records"])
        .arg(records)
        .env_remove("RUST_LOG")
        .output()
        .expect("the lab binary runs");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let json: Value = serde_json::from_str(&std::fs::read_to_string(records).unwrap()).unwrap();
    json["records"].as_array().expect("records").clone()
}

fn right(r: &Value) -> bool {
    r["export"]["shape"] == r["expected_shape"] && r["export"]["colour"] == r["expected_colour"]
}

/// The runs of `mode` that are right, by prompt.
fn right_runs<'a>(records: &'a [Value], mode: &str) -> Vec<(&'a str, u64)> {
    records
        .iter()
        .filter(|r| r["mode"] == mode && right(r))
        .map(|r| (r["prompt"].as_str().unwrap(), r["seed"].as_u64().unwrap()))
        .collect()
}

/// Objects right in at least 2 of their 3 seeds.
fn objects_right(runs: &[(&str, u64)]) -> usize {
    let mut prompts: Vec<&str> = runs.iter().map(|r| r.0).collect();
    prompts.dedup();
    prompts
        .iter()
        .filter(|p| runs.iter().filter(|r| r.0 == **p).count() >= 2)
        .count()
}

#[test]
fn world_a_keeps_the_readmes_quality_figures() {
    let d = tempfile::tempdir().unwrap();
    let held_out = concat!(env!("CARGO_MANIFEST_DIR"), "/../prompts/toy-heldout.txt");
    let records = eval(Path::new(held_out), "3", &d.path().join("held-out.json"));
    assert_eq!(records.len(), 36, "6 prompts, 3 seeds, 2 modes");
    let prior = right_runs(&records, "prior");
    let sampling = right_runs(&records, "sampling");
    assert_eq!((prior.len(), objects_right(&prior)), (3, 1), "{prior:?}");
    assert_eq!(
        (sampling.len(), objects_right(&sampling)),
        (3, 1),
        "{sampling:?}"
    );

    let seen = d.path().join("seen.txt");
    let captions =
        "a red sphere\na red cube\na blue cylinder\na red cone\na white torus\na blue capsule\n";
    std::fs::write(&seen, captions).unwrap();
    let records = eval(&seen, "1", &d.path().join("seen.json"));
    assert_eq!(records.len(), 12, "6 prompts, 1 seed, 2 modes");
    assert!(records.iter().all(|r| r["held_out"] == false));
    let wrong: Vec<&Value> = records.iter().filter(|r| !right(r)).collect();
    assert!(wrong.is_empty(), "seen runs wrong: {wrong:?}");
}
