//! The command line as a user meets it: exit codes and one-line errors for bad input.

use std::process::{Command, Output};

fn clipsculpt(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_clipsculpt"));
    cmd.args(args).env_remove("RUST_LOG");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    cmd.output().expect("the binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn help_lists_every_subcommand_and_exit_codes() {
    let o = clipsculpt(&["--help"], &[]);
    assert!(o.status.success());
    let out = String::from_utf8_lossy(&o.stdout);
    for sub in ["generate", "batch", "sample", "export", "info", "download"] {
        assert!(out.contains(sub), "--help lacks {sub}");
    }
    assert!(out.contains("Exit codes"));
}

#[test]
fn bad_arguments_are_usage_errors() {
    for args in [
        &["--device", "tpu", "info"][..],
        &["generate", "a cube", "--checkpoint", "every:0"],
        &["generate", "a cube", "--memory-budget", "lots"],
        &["batch", "p.txt", "--shard", "3/3"],
        &["generate", "a cube", "--model", "./no/such/folder"],
    ] {
        let o = clipsculpt(args, &[]);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(!stderr(&o).contains("panicked"), "{args:?}");
    }
}

#[test]
fn download_offline_without_cache_names_the_fix() {
    let home = tempfile::tempdir().unwrap();
    let o = clipsculpt(
        &["download", "openai/clip-vit-base-patch32"],
        &[
            ("HF_HUB_OFFLINE", "1"),
            ("HF_HOME", home.path().to_str().unwrap()),
        ],
    );
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(
        e.contains("HF_HUB_OFFLINE") && e.contains("config.json"),
        "{e}"
    );
    assert_eq!(e.trim().lines().count(), 1, "one-line error: {e}");
}
