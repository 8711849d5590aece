//! The lab's `eval` under a kill: it keeps what it measured and resumes.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

/// Settings that make one run take about a second on the embedded default.
const FAST: &[&str] = &[
    "--steps",
    "2",
    "--prior-steps",
    "2",
    "--resolution",
    "8",
    "--views",
    "1",
    "--grid",
    "16",
    "--preview-size",
    "8",
    "--formats",
    "glb,ply",
];

fn cmd(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_clipsculpt-lab"));
    c.args(args).env_remove("RUST_LOG");
    c
}

fn run(args: &[&str]) -> Output {
    cmd(args).output().expect("the binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Exit code `code`, no panic, and exactly one line on stderr that contains every `parts`.
fn one_line_error(o: &Output, code: i32, parts: &[&str]) {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(code), "exit code: {e}");
    assert!(!e.contains("panicked"), "{e}");
    assert_eq!(e.trim().lines().count(), 1, "one-line error expected: {e}");
    for p in parts {
        assert!(e.contains(p), "the error lacks {p:?}: {e}");
    }
}

/// Starts the lab with `args` and returns once its stderr shows `marker`.
fn spawn_until(args: &[&str], marker: &str) -> Child {
    let mut child = cmd(args)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let found = lines.any(|l| l.is_ok_and(|l| l.contains(marker)));
    assert!(found, "{marker:?} never appeared");
    std::thread::spawn(move || lines.map_while(Result::ok).count());
    child
}

/// A prompt file of `n` toy captions.
fn prompt_file(dir: &Path, n: usize) -> PathBuf {
    let p = dir.join("p.txt");
    let text: String = [
        "a red cube",
        "a blue sphere",
        "a green torus",
        "a black cone",
    ]
    .iter()
    .cycle()
    .take(n)
    .map(|s| format!("{s}\n"))
    .collect();
    std::fs::write(&p, text).unwrap();
    p
}

/// A killed `eval` keeps the records it had measured, marked incomplete; `--resume` with the same command takes
/// them and runs the rest, and refuses a records file made with other settings.
#[test]
fn a_killed_eval_keeps_its_records_and_resumes() -> anyhow::Result<()> {
    let d = tempfile::tempdir()?;
    let prompts = prompt_file(d.path(), 4);
    let records = d.path().join("records.json");
    let mut args = vec![
        "eval",
        prompts.to_str().unwrap(),
        "--seeds",
        "1",
        "--modes",
        "prior",
        "--records",
        records.to_str().unwrap(),
    ];
    args.extend_from_slice(FAST);
    let mut child = spawn_until(&args, "evaluating 3/4");
    let killed = child.kill();
    child.wait()?;
    killed?;
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&records)?)?;
    assert_eq!(json["complete"], false, "{json}");
    let n = json["records"].as_array().map_or(0, |r| r.len());
    assert!((2..4).contains(&n), "{n} records: {json}");
    let kept = json["records"][0].clone();
    let mut other = args.clone();
    other.extend(["--resume", "--seed", "5"]);
    let o = run(&other);
    one_line_error(&o, 2, &["were made with other settings (", "seeds"]);
    args.push("--resume");
    let o = run(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!(
            "resuming a stopped evaluation: {n} runs taken from"
        )),
        "{}",
        stderr(&o)
    );
    let json: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&records)?)?;
    assert_eq!(json["complete"], true, "{json}");
    assert_eq!(json["records"].as_array().map_or(0, |r| r.len()), 4);
    assert_eq!(
        json["records"][0], kept,
        "a resumed record is taken as it was"
    );
    Ok(())
}
