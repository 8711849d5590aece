//! `lab/scripts/replication_report.py` (issue 53's §8 tables and §6's secondary analyses): its
//! unit tests (`lab/scripts/test_replication_report.py`, synthetic records with hand-computed
//! counts, sign-test and McNemar p, the unguarded prior-row check, refusal of incomplete files).
//! Skipped, saying so, where there is no `python3`.

use std::path::Path;
use std::process::Command;

#[test]
fn report_script_unit_tests_pass() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/test_replication_report.py");
    let out = match Command::new("python3").arg(&script).output() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("SKIP: python3 cannot run ({e})");
            return;
        }
    };
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
