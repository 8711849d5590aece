//! `lab/scripts/replication_verdict.py` (issue 53's §6 verdict) on the hand-made records of
//! `lab/tests/fixtures/replication/`: b, c and p computed by hand. Skipped, saying so, where
//! there is no `python3`.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn lab() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

/// The script's `--json` output on the fixtures (S1, S2 and S1′), `None` without python3.
fn verdict() -> Option<Value> {
    let fixtures = lab().join("tests/fixtures/replication");
    let out = Command::new("python3")
        .arg(lab().join("scripts/replication_verdict.py"))
        .arg("--s1")
        .arg(fixtures.join("s1.json"))
        .arg("--s2")
        .arg(fixtures.join("s2.json"))
        .arg("--s1-seed1")
        .arg(fixtures.join("s1-seed1.json"))
        .arg("--json")
        .output();
    let out = match out {
        Ok(o) => o,
        Err(e) => {
            eprintln!("SKIP: python3 cannot run ({e})");
            return None;
        }
    };
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(serde_json::from_slice(&out.stdout).expect("the script prints JSON"))
}

/// (b, c, p) of `mode` on `split` under `judge`.
fn bcp(v: &Value, judge: &str, mode: &str, split: &str) -> (u64, u64, f64) {
    let s = &v[judge][mode]["splits"][split];
    (
        s["b"].as_u64().unwrap_or(u64::MAX),
        s["c"].as_u64().unwrap_or(u64::MAX),
        s["p"].as_f64().unwrap_or(f64::NAN),
    )
}

/// By hand: S1 and S2 `sampling` turn 6 prior-wrong held-out runs right (b 6, c 0, p = 1/64);
/// S1′ 5 (p = 1/32); `end-to-end` gets b 4 on S1 (two of its right verdicts have IoU 0.4: strict
/// wrong, frozen right, so frozen b is 6) and b 3, c 2 on S2 (p = P(X ≥ 3 | 5) = 16/32), where it
/// also loses the seen yellow cone. So sampling replicates and is robust to the prior seed (Holm:
/// 1/64 < 0.025, S1′'s 1/32 < 0.05), end-to-end shows no gain and harm; the switch candidate is
/// S2 (3 held-out objects against S1's 2), whose mean seen IoU 0.90 < 0.95 keeps world A.
#[test]
fn verdict_on_the_hand_made_records() {
    let Some(v) = verdict() else {
        return;
    };
    assert_eq!(bcp(&v, "strict", "sampling", "s1"), (6, 0, 1.0 / 64.0));
    assert_eq!(bcp(&v, "strict", "sampling", "s2"), (6, 0, 1.0 / 64.0));
    assert_eq!(
        bcp(&v, "strict", "sampling", "s1_seed1"),
        (5, 0, 1.0 / 32.0)
    );
    assert_eq!(bcp(&v, "strict", "end-to-end", "s1"), (4, 0, 1.0 / 16.0));
    assert_eq!(bcp(&v, "frozen", "end-to-end", "s1"), (6, 0, 1.0 / 64.0));
    assert_eq!(bcp(&v, "strict", "end-to-end", "s2"), (3, 2, 0.5));
    assert_eq!(bcp(&v, "strict", "end-to-end", "s1_seed1"), (0, 0, 1.0));
    let (s, e) = (&v["strict"]["sampling"], &v["strict"]["end-to-end"]);
    assert_eq!(s["outcome"], "replicates, robust to the prior seed");
    assert_eq!(
        (s["p_m"].as_f64(), s["harm"].as_bool()),
        (Some(1.0 / 64.0), Some(false))
    );
    assert_eq!(e["outcome"], "no gain");
    assert_eq!(
        (e["p_m"].as_f64(), e["harm"].as_bool()),
        (Some(0.5), Some(true))
    );
    assert_eq!(
        e["splits"]["s2"]["seen_lost"],
        serde_json::json!(["yellow cone"])
    );
    let s2 = &v["strict"]["sampling"]["splits"]["s2"];
    assert_eq!(s2["prior"]["held_out_objects"], 1);
    assert_eq!(s2["sampling"]["held_out_objects"], 3);
    // S2 has more strict held-out objects under sampling (3 against 2) but a seen IoU of 0.90.
    let switch = &v["switch"];
    assert_eq!(switch["candidate"], "s2");
    assert_eq!(switch["conditions"]["mean seen IoU >= 0.95"], false);
    assert_eq!(switch["switch"], false);
}
