//! The lab's command line: `clipsculpt-lab eval` and `train-toy` as a researcher meets them.

use std::process::{Command, Output};

fn clipsculpt(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_clipsculpt-lab"));
    cmd.args(args).env_remove("RUST_LOG");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.output().expect("the binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `train-toy` refuses bad flags before it creates its output folder.
#[test]
fn train_toy_refuses_bad_flags_without_leaving_a_folder() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("world");
    let out_arg = out.to_str().unwrap();
    for args in [
        &["train-toy", "--out", out_arg, "--prior-mixup", "2"][..],
        &[
            "train-toy",
            "--out",
            out_arg,
            "--prior-mixup",
            "0.5",
            "--prior-uncaptioned-held-out",
        ],
        &[
            "train-toy",
            "--out",
            out_arg,
            "--prior-uncaptioned-weight",
            "0",
        ],
        &[
            "train-toy",
            "--out",
            out_arg,
            "--prior-uncaptioned-weight",
            "0.5",
            "--prior-uncaptioned-held-out",
        ],
        &[
            "train-toy",
            "--out",
            out_arg,
            "--only-prior",
            "--prior-distractors",
            "4",
        ],
    ] {
        let o = clipsculpt(args, &[]);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(!out.exists(), "{args:?} left {}", out.display());
    }
}

/// `eval` runs every default mode on toy captions and prints one table, a row per mode, with the
/// negatives, the held-out split and the gradient it used; with the world's fitted latents, a
/// second table sets the wrong runs beside the right object; `--records` writes every run's
/// record beside the tables; without a terminal, progress comes as one line per item.
#[test]
fn eval_prints_one_table_of_modes() {
    let prompts = concat!(env!("CARGO_MANIFEST_DIR"), "/../prompts/toy-heldout.txt");
    let d = tempfile::tempdir().unwrap();
    let records = d.path().join("records.json");
    let o = clipsculpt(
        &[
            "eval",
            prompts,
            "--seeds",
            "1",
            "--steps",
            "1",
            "--prior-steps",
            "2",
            "--resolution",
            "8",
            "--views",
            "1",
            "--grid",
            "16",
            "--reference-latents",
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../assets/toy/latents.safetensors"
            ),
            "--sampling-gradient",
            "prediction",
            "--records",
            records.to_str().unwrap(),
        ],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("Negatives: none"), "{out}");
    assert!(out.contains("the prediction's gradient"), "{out}");
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&records).unwrap()).unwrap();
    assert_eq!(json["complete"], true);
    let runs = json["records"].as_array().unwrap();
    // Six held-out prompts, one seed, four modes.
    assert_eq!(runs.len(), 24, "{json}");
    assert!(runs.iter().all(|r| r["scorer"]["right_object"].is_number()));
    assert!(
        out.contains("| mode | held-out wrong runs scored ≥ right object |"),
        "{out}"
    );
    assert!(
        out.contains("Held out of the prior: a green sphere,"),
        "{out}"
    );
    for mode in ["prior", "latent", "sampling", "both"] {
        let row = out
            .lines()
            .find(|l| l.starts_with(&format!("| {mode} |")))
            .unwrap_or_else(|| panic!("no {mode} row: {out}"));
        // Six held-out objects, no seen ones in this prompt file.
        assert!(row.contains("/6 (") && row.contains("| – |"), "{row}");
    }
    // Its stderr is not a terminal: one progress line per prompt and seed instead of a bar.
    let err = stderr(&o);
    assert!(
        err.contains("evaluating 1/6: a green sphere (seed 0)")
            && err.contains("evaluating 6/6: a red capsule (seed 0)"),
        "{err}"
    );
}

/// A copy of `from` at `to`.
fn copy_dir(from: &std::path::Path, to: &std::path::Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let dest = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_dir(&path, &dest);
        } else {
            std::fs::copy(&path, &dest).unwrap();
        }
    }
}

/// Issue 53's protocol §4: a world's `shap_e/guidance.json` gives `eval` the settings of the
/// explicit flags, so `--resume` on the guidance.json route accepts the records of the explicit
/// run (taking its run instead of running it again); with a flag that differs it refuses them.
#[test]
fn eval_resumes_explicit_records_through_guidance_json() {
    let lab = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let d = tempfile::tempdir().unwrap();
    let world = d.path().join("w");
    copy_dir(&lab.join("worlds/toy-deep/shap_e"), &world.join("shap_e"));
    copy_dir(&lab.join("worlds/toy-sharp/clip"), &world.join("clip"));
    std::fs::write(
        world.join("shap_e/guidance.json"),
        r#"{"sampling_scale": 0.5, "e2e_lr": 0.1, "keep_margin": 0.05, "sampler_export": "guarded", "clip": "../clip"}"#,
    )
    .unwrap();
    let prompts = d.path().join("p.txt");
    std::fs::write(&prompts, "a red sphere\n").unwrap();
    let records = d.path().join("records.json");
    let (model, clip) = (world.join("shap_e"), world.join("clip"));
    let base = [
        "eval",
        prompts.to_str().unwrap(),
        "--seeds",
        "1",
        "--prior-steps",
        "2",
        "--grid",
        "16",
        "--modes",
        "prior",
        "--records",
        records.to_str().unwrap(),
        "--resume",
        "--model",
        model.to_str().unwrap(),
    ];
    let explicit = [
        "--clip",
        clip.to_str().unwrap(),
        "--sampling-scale",
        "0.5",
        "--e2e-lr",
        "0.1",
        "--keep-margin",
        "0.05",
        "--sampler-export",
        "guarded",
    ];
    let o = clipsculpt(&[&base[..], &explicit[..]].concat(), &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = clipsculpt(&base, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("resuming a finished evaluation: 1 runs taken"),
        "{}",
        stderr(&o)
    );
    let o = clipsculpt(&[&base[..], &["--keep-margin", "0.1"][..]].concat(), &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("other settings"), "{}", stderr(&o));
}
