//! The GPU scripts' command lines (not the builds they run): `--help` prints the usage and exits
//! 0, a bad argument is one line on stderr and exit code 2, and neither touches the toolchain.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn script(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../scripts")
        .join(name)
}

/// Runs `bash scripts/<name> args…` with a venv path that must never be created.
fn run(name: &str, args: &[&str], venv: &Path) -> Output {
    Command::new("bash")
        .arg(script(name))
        .args(args)
        .env("CUDA_VENV", venv)
        .output()
        .expect("bash runs") // ok: the test machine has bash
}

#[test]
fn build_cuda_help_and_bad_arguments() {
    let tmp = tempfile::tempdir().unwrap();
    let venv = tmp.path().join("venv-never-made");
    for help in ["--help", "-h"] {
        let out = run("build-cuda.sh", &[help], &venv);
        assert_eq!(out.status.code(), Some(0), "{help}");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.starts_with("usage: scripts/build-cuda.sh"), "{text}");
        for word in ["COMPUTE_CAP", "--dist", "13.0", "libcurand"] {
            assert!(text.contains(word), "usage lacks {word}: {text}");
        }
    }
    for (args, says) in [
        (&["7.5"][..], "invalid compute capability '7.5'"),
        (&["sm_90"][..], "invalid compute capability"),
        (&["60"][..], "unsupported compute capability '60'"),
        (&["1000"][..], "unsupported compute capability"),
        (&["--bogus"][..], "unknown option '--bogus'"),
        (&["90", "80"][..], "one compute capability expected"),
        (&["--venv"][..], "--venv needs a directory"),
    ] {
        let out = run("build-cuda.sh", args, &venv);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: one line: {err}");
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    assert!(
        !venv.exists(),
        "argument errors must stop before any install"
    );
}

#[test]
fn gpu_check_help_and_bad_arguments() {
    let tmp = tempfile::tempdir().unwrap();
    let venv = tmp.path().join("unused");
    let out = run("gpu-check.sh", &["--help"], &venv);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("usage: gpu-check.sh"), "{text}");
    for (args, says) in [
        (&["--bogus"][..], "unknown option '--bogus'"),
        (&["--quick", "extra"][..], "unexpected argument 'extra'"),
        (&["--out"][..], "--out needs a directory"),
    ] {
        let out = run("gpu-check.sh", args, &venv);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(says), "{args:?}: {err}");
    }
    // Outside an unpacked archive (no bin/clipsculpt beside it) it says what is missing.
    let out = run(
        "gpu-check.sh",
        &["--out", tmp.path().to_str().unwrap()],
        &venv,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("bin/clipsculpt"), "{err}");
}
