//! The unit tests of the lab's Python scripts, each `lab/scripts/test_*.py`:
//! `replication_report.py` (issue 53's §8 tables and §6's secondary analyses: synthetic records with hand-computed
//! counts, sign-test and McNemar p, the unguarded prior-row check, refusal of incomplete files) and
//! `records_merge.py` (one run's records computed by two processes). Skipped, saying so, where there is no `python3`.

use std::path::Path;
use std::process::Command;

#[test]
fn python_script_unit_tests_pass() {
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts");
    let mut tests: Vec<_> = std::fs::read_dir(&scripts)
        .expect("lab/scripts is readable")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            name.starts_with("test_") && name.ends_with(".py")
        })
        .collect();
    tests.sort();
    assert!(
        tests.len() >= 2,
        "the scripts' tests are missing: {tests:?}"
    );
    for script in tests {
        let out = match Command::new("python3").arg(&script).output() {
            Ok(o) => o,
            Err(e) => {
                eprintln!("SKIP: python3 cannot run ({e})");
                return;
            }
        };
        assert!(
            out.status.success(),
            "{}:\n{}\n{}",
            script.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
