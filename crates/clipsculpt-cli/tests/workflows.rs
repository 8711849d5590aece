//! `vary`, `edit` and `blend` from saved runs of the toy model, as a user runs them: strength 0 returns the latent
//! bit for bit, a blend's ends are its parents, every run records its parents and gets a gallery, and bad input is
//! a one-line error (exit 2) that writes nothing.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

const FAST: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/fast.json");

fn clipsculpt(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_clipsculpt"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("the binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A fast toy run of `prompt` in `out`.
fn run(prompt: &str, out: &Path) {
    let o = clipsculpt(&[
        "-q",
        "generate",
        prompt,
        "--settings",
        FAST,
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
}

fn bytes(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn report(dir: &Path) -> Value {
    serde_json::from_slice(&bytes(&dir.join("report.json"))).unwrap()
}

fn cards(dir: &Path) -> usize {
    String::from_utf8(bytes(&dir.join("index.html")))
        .unwrap()
        .matches("<article class=\"card")
        .count()
}

#[test]
fn vary_at_strength_zero_returns_the_latent_and_records_its_parent() {
    let d = tempfile::tempdir().unwrap();
    let (src, out) = (d.path().join("cube"), d.path().join("vary"));
    run("a red cube", &src);
    let o = clipsculpt(&[
        "-q",
        "vary",
        src.to_str().unwrap(),
        "--strength",
        "0",
        "--count",
        "2",
        "--guide",
        "sampling",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let parent_hash = report(&out.join("vary-00"))["parents"][0]["latent_sha256"].clone();
    for i in 0..2 {
        let dir = out.join(format!("vary-{i:02}"));
        assert_eq!(
            bytes(&dir.join("latent.safetensors")),
            bytes(&src.join("latent.safetensors")),
            "vary-{i:02}"
        );
        let r = report(&dir);
        assert_eq!(
            (r["command"].as_str(), r["strength"].as_f64()),
            (Some("vary"), Some(0.0))
        );
        assert_eq!(r["parents"][0]["prompt"], "a red cube");
        assert_eq!(r["parents"][0]["latent_sha256"], parent_hash);
        assert_eq!(
            r["settings"]["seed"].as_u64(),
            Some(1 + i),
            "seeds: the run's + 1 + i"
        );
    }
    assert_eq!(parent_hash.as_str().map(str::len), Some(64), "a SHA-256");
    assert_eq!(cards(&out), 2);
    // The GLB's provenance record names the parent too.
    let glb = out.join("vary-00/mesh.glb");
    let o = clipsculpt(&["info", glb.to_str().unwrap()]);
    let info = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(info.contains("made by: vary, from:"), "{info}");
    let hash = parent_hash.as_str().unwrap_or_default();
    assert!(
        info.contains(&format!("\"a red cube\": latent sha256 {hash}")),
        "{info}"
    );
}

#[test]
fn blend_ends_are_its_parents_and_edit_records_its_parent() {
    let d = tempfile::tempdir().unwrap();
    let (a, b, out) = (
        d.path().join("a"),
        d.path().join("b"),
        d.path().join("blend"),
    );
    run("a red cube", &a);
    run("a blue sphere", &b);
    let o = clipsculpt(&[
        "-q",
        "blend",
        a.to_str().unwrap(),
        b.to_str().unwrap(),
        "--steps",
        "3",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        bytes(&out.join("step-00/latent.safetensors")),
        bytes(&a.join("latent.safetensors"))
    );
    assert_eq!(
        bytes(&out.join("step-02/latent.safetensors")),
        bytes(&b.join("latent.safetensors"))
    );
    assert_ne!(
        bytes(&out.join("step-01/latent.safetensors")),
        bytes(&a.join("latent.safetensors"))
    );
    for f in [
        "contact_sheet.png",
        "blend.gif",
        "step-01/mesh.glb",
        "step-01/report.json",
    ] {
        assert!(out.join(f).is_file(), "{f}");
    }
    let r = report(&out.join("step-01"));
    assert_eq!(
        (r["command"].as_str(), r["t"].as_f64()),
        (Some("blend"), Some(0.5))
    );
    assert_eq!(r["parents"][1]["prompt"], "a blue sphere");
    assert_eq!(cards(&out), 4, "the blend and its three steps");

    let edited = d.path().join("edit");
    let o = clipsculpt(&[
        "-q",
        "edit",
        a.to_str().unwrap(),
        "a green cube",
        "--out",
        edited.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r = report(&edited);
    assert_eq!(
        (r["command"].as_str(), r["prompt"].as_str()),
        (Some("edit"), Some("a green cube"))
    );
    assert_eq!(r["parents"][0]["prompt"], "a red cube");
    assert_eq!(cards(&edited), 1);
}

/// Each bad input exits 2 with one line on stderr, and the output folder is never created.
#[test]
fn bad_inputs_are_one_line_errors_that_write_nothing() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("cube");
    run("a red cube", &src);
    let corrupt = d.path().join("corrupt");
    std::fs::create_dir_all(&corrupt).unwrap();
    std::fs::copy(
        src.join("latent.safetensors"),
        corrupt.join("latent.safetensors"),
    )
    .unwrap();
    std::fs::write(
        corrupt.join("report.json"),
        "{\"prompt\": \"a red cube\", \"settings\": ",
    )
    .unwrap();
    let other = d.path().join("other.safetensors");
    let header = br#"{"latent":{"dtype":"F32","shape":[1,3,4],"data_offsets":[0,48]}}"#;
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(header);
    file.extend_from_slice(&[0u8; 48]);
    std::fs::write(&other, file).unwrap();
    let out = d.path().join("out");
    let (s, c, x, o) = (
        src.to_str().unwrap(),
        corrupt.to_str().unwrap(),
        other.to_str().unwrap(),
        out.to_str().unwrap(),
    );
    let missing = d.path().join("no-such-run");
    let m = missing.to_str().unwrap();
    for (args, what) in [
        (vec!["vary", m], "no such run folder"),
        (vec!["edit", m, "a green cube"], "no such run folder"),
        (vec!["vary", c], "not a readable report"),
        (
            vec!["vary", x, "--prompt", "a red cube"],
            "comes from another model",
        ),
        (vec!["blend", s, x], "comes from another model"),
        (
            vec!["vary", s, "--strength", "2"],
            "--strength must lie within 0..1",
        ),
        (
            vec!["edit", s, "a green cube", "--strength", "-0.5"],
            "--strength must lie within 0..1",
        ),
    ] {
        let mut args = args.clone();
        args.extend(["--out", o]);
        let r = clipsculpt(&args);
        let e = stderr(&r);
        assert_eq!(r.status.code(), Some(2), "{args:?}: {e}");
        assert_eq!(e.trim().lines().count(), 1, "{args:?}: {e}");
        assert!(e.contains(what), "{args:?}: {e}");
        assert!(!out.exists(), "{args:?} wrote {}", out.display());
    }
}
