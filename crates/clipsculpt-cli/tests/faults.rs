//! Fault injection: runs killed at several points, a full disk, a folder that turns read-only
//! mid-batch, corrupt weights and latents, a huge learning rate, two processes on one output.
//! Each case checks the exit code, that the error is one line naming the fix, and that the output
//! folder is either absent or complete (never partial).

mod common;
use common::copy_dir;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::thread::JoinHandle;

use candle_core::Device;

const BIN: &str = env!("CARGO_BIN_EXE_clipsculpt");

/// Settings that make one run take about a second on the embedded default.
/// (`tests/fixtures/fast.json`: the latent stage, 2 steps, 8-pixel views, a 16³ grid, GLB and PLY.)
const FAST: &[&str] = &[
    "--settings",
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/fast.json"),
];

/// The files of a complete `generate` run with [`FAST`].
const RUN_FILES: [&str; 7] = [
    "mesh.glb",
    "mesh.ply",
    "latent.safetensors",
    "latent_prior.safetensors",
    "preview.png",
    "preview_prior.png",
    "report.json",
];

fn cmd(args: &[&str], envs: &[(&str, &str)]) -> Command {
    let mut c = Command::new(BIN);
    c.args(args)
        .env_remove("RUST_LOG")
        .env_remove("CLIPSCULPT_FAULT_ENOSPC");
    for (k, v) in envs {
        c.env(k, v);
    }
    c
}

fn run(args: &[&str], envs: &[(&str, &str)]) -> Output {
    cmd(args, envs).output().expect("the binary runs")
}

fn generate_args<'a>(prompt: &'a str, out: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["-q", "generate", prompt, "--out", out.to_str().unwrap()];
    v.extend(fast_except(extra));
    v.extend_from_slice(extra);
    v
}

/// [`FAST`] without the options that `extra` sets itself.
fn fast_except<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    FAST.chunks(2)
        .filter(|kv| !extra.contains(&kv[0]))
        .flatten()
        .copied()
        .collect()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Exit code `code`, no panic, and exactly one line on stderr that contains every `parts`.
fn one_line_error(o: &Output, code: i32, parts: &[&str]) -> String {
    let e = stderr(o);
    assert_eq!(o.status.code(), Some(code), "exit code: {e}");
    assert!(!e.contains("panicked"), "{e}");
    assert_eq!(e.trim().lines().count(), 1, "one-line error expected: {e}");
    for p in parts {
        assert!(e.contains(p), "the error lacks {p:?}: {e}");
    }
    e.trim().to_string()
}

/// Names in `dir`, sorted (hidden ones included).
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = match std::fs::read_dir(dir) {
        Ok(r) => r
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    };
    v.sort();
    v
}

/// The run folder `out` is absent, or holds every file of a run and a report naming `prompt`.
fn absent_or_complete(out: &Path, prompt: &str) -> bool {
    if !out.exists() {
        return false;
    }
    for f in RUN_FILES {
        assert!(out.join(f).is_file(), "partial run: {f} missing in {out:?}");
    }
    let report: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
    assert_eq!(report["prompt"], prompt);
    true
}

/// Private folders (`.name.partial-*`, `.name.old-*`) and lock files beside `out`.
fn leftovers(out: &Path) -> Vec<String> {
    names(out.parent().unwrap())
        .into_iter()
        .filter(|n| n.starts_with('.'))
        .collect()
}

/// Starts `args` with debug logging and kills it (SIGKILL) as soon as a stderr line contains
/// `marker`; returns whether it was killed before it finished.
fn kill_at(args: &[&str], marker: &str) -> bool {
    let mut v = vec!["-v"];
    v.extend(args.iter().filter(|a| **a != "-q"));
    let mut child = cmd(&v, &[])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let lines = BufReader::new(child.stderr.take().unwrap()).lines();
    for line in lines.map_while(Result::ok) {
        if line.contains(marker) {
            child.kill().unwrap();
            break;
        }
    }
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    status.signal() == Some(9)
}

/// SIGKILL during prior sampling, optimization and the writing of outputs: the folder is never
/// partial, and the next run into it removes the leftovers and completes.
#[test]
fn killed_generate_leaves_no_partial_folder() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("run");
    let mut killed = 0;
    for (marker, extra) in [
        ("stage: sampling the prior", &["--prior-steps", "64"][..]),
        (
            "stage: optimizing",
            &[
                "--settings",
                concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/tests/fixtures/fast-steps-40.json"
                ),
            ][..],
        ),
        ("stage: writing latents", &["--grid", "96"][..]),
    ] {
        let args = generate_args("a red cube", &out, extra);
        if kill_at(&args, marker) {
            killed += 1;
        }
        if absent_or_complete(&out, "a red cube") {
            std::fs::remove_dir_all(&out).unwrap();
        }
    }
    assert!(killed >= 2, "only {killed} of 3 runs were killed mid-way");
    assert!(
        leftovers(&out).iter().any(|n| n.contains(".partial-")),
        "a killed run leaves its private folder: {:?}",
        leftovers(&out)
    );
    let args = generate_args("a red cube", &out, &[]);
    let o = run(&args[1..], &[]); // not -q: the removal is a warning
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("left by an interrupted run"),
        "{}",
        stderr(&o)
    );
    assert!(absent_or_complete(&out, "a red cube"));
    assert_eq!(leftovers(&out), Vec::<String>::new());
}

/// A finished run is refused without `--overwrite`, replaced with it; `sample` likewise.
#[test]
fn existing_run_is_refused_unless_overwrite() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("run");
    let o = run(&generate_args("a red cube", &out, &[]), &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let before = std::fs::read(out.join("report.json")).unwrap();
    let o = run(&generate_args("a blue sphere", &out, &[]), &[]);
    one_line_error(
        &o,
        2,
        &[
            "already holds a finished run (prompt \"a red cube\"",
            "--overwrite",
        ],
    );
    assert_eq!(std::fs::read(out.join("report.json")).unwrap(), before);
    let o = run(&generate_args("a blue sphere", &out, &["--overwrite"]), &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(absent_or_complete(&out, "a blue sphere"));
    assert_eq!(leftovers(&out), Vec::<String>::new());
    let sample = |extra: &[&str]| {
        let mut a = vec!["-q", "sample", "a red cube", "--prior-steps", "2", "--out"];
        a.push(out.to_str().unwrap());
        a.extend_from_slice(extra);
        run(&a, &[])
    };
    one_line_error(&sample(&[]), 2, &["--overwrite"]);
    assert!(sample(&["--overwrite"]).status.success());
    assert_eq!(names(&out), vec!["latent.safetensors", "views.png"]);
}

/// Disk full, injected at the mesh: one line naming the file once, nothing left behind.
#[test]
fn injected_disk_full_leaves_nothing() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("run");
    let o = run(
        &generate_args("a red cube", &out, &[]),
        &[("CLIPSCULPT_FAULT_ENOSPC", "mesh.ply")],
    );
    let e = one_line_error(&o, 2, &["No space left on device", "mesh.ply"]);
    assert_eq!(e.matches("mesh.ply").count(), 1, "path named once: {e}");
    assert!(!out.exists());
    assert_eq!(leftovers(&out), Vec::<String>::new());
}

/// Whether this machine lets the tests mount a tmpfs in a user namespace.
fn can_mount_tmpfs() -> bool {
    Command::new("unshare")
        .args(["-rm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /tmp"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether `test` can mount a tmpfs ([`can_mount_tmpfs`]). Where it cannot, a SKIPPED line naming
/// why goes straight to the terminal (the harness captures only print!/eprint!), or, with
/// `CLIPSCULPT_REQUIRE_TMPFS=1` (set by `.ci/run` where user namespaces work), the test fails.
fn tmpfs_or_skip(test: &str) -> bool {
    if can_mount_tmpfs() {
        return true;
    }
    let why = "cannot mount a tmpfs in a user namespace (`unshare -rm` fails here)";
    if std::env::var("CLIPSCULPT_REQUIRE_TMPFS").is_ok_and(|v| v == "1") {
        panic!("CLIPSCULPT_REQUIRE_TMPFS=1 but {why}");
    }
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
    false
}

/// Runs `script` (sh) with a fresh tmpfs of `size` mounted at `$MNT`, in a private mount
/// namespace; `$BIN` is the binary. Returns its output.
fn in_tmpfs(size: &str, script: &str, dir: &Path) -> Output {
    let mnt = dir.join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let full = format!("mount -t tmpfs -o size={size} tmpfs \"$MNT\" && {script}");
    Command::new("unshare")
        .args(["-rm", "sh", "-c", &full])
        .env("MNT", &mnt)
        .env("BIN", BIN)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

/// A real full disk: a 600 KiB tmpfs. The run fails with one line and leaves nothing.
#[test]
fn full_tmpfs_leaves_nothing() {
    // Without a tmpfs, the injected ENOSPC cases above still run.
    if !tmpfs_or_skip("full_tmpfs_leaves_nothing") {
        return;
    }
    let d = tempfile::tempdir().unwrap();
    let fast = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/fast-steps-0-grid-64.json"
    );
    let script = format!(
        "\"$BIN\" -q generate 'a red cube' --out \"$MNT/run\" --settings {fast} 2>&1; \
         echo \"rc=$?\"; ls -a \"$MNT\""
    );
    let o = in_tmpfs("600k", &script, d.path());
    let text = String::from_utf8_lossy(&o.stdout);
    let mut lines = text.lines();
    let err = lines.next().unwrap_or_default();
    assert!(
        err.starts_with("error: ") && err.contains("No space left on device"),
        "{text}"
    );
    assert_eq!(lines.next(), Some("rc=2"), "{text}");
    let rest: Vec<&str> = lines.collect();
    assert_eq!(
        rest,
        vec![".", ".."],
        "nothing left on the full disk: {text}"
    );
    for word in err.split_whitespace().filter(|w| w.contains("/run")) {
        assert_eq!(err.matches(word).count(), 1, "path named once: {err}");
    }
}

/// A copy of the embedded Shap-E pipeline (`shap_e`) or CLIP (`clip`) in `dir`.
fn model_copy(which: &str, dir: &Path) -> PathBuf {
    let to = dir.join(which);
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../assets/toy")
            .join(which),
        &to,
    );
    to
}

/// Overwrites the first f32 of tensor `name` of a safetensors file with `value`.
fn poison(file: &Path, name: &str, value: f32) {
    let mut bytes = std::fs::read(file).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    assert_eq!(header[name]["dtype"], "F32", "{name} in {file:?}");
    let at = 8 + n + header[name]["data_offsets"][0].as_u64().unwrap() as usize;
    bytes[at..at + 4].copy_from_slice(&value.to_le_bytes());
    std::fs::write(file, bytes).unwrap();
}

/// The first tensor name of a safetensors file that ends with `suffix`.
fn tensor_ending(file: &Path, suffix: &str) -> String {
    let bytes = std::fs::read(file).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    let mut keys: Vec<&String> = header.keys().filter(|k| k.ends_with(suffix)).collect();
    keys.sort();
    keys[0].clone()
}

/// NaN in a prior bias, inf in a CLIP weight, a truncated file: refused at load, naming the
/// tensor (or the sizes) and the file, before anything is written.
#[test]
fn corrupt_weights_are_refused_at_load() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("run");
    let shap_e = model_copy("shap_e", d.path());
    let prior = shap_e.join("prior/diffusion_pytorch_model.safetensors");
    let bias = tensor_ending(&prior, ".bias");
    poison(&prior, &bias, f32::NAN);
    let model = ["--model", shap_e.to_str().unwrap()];
    let o = run(&generate_args("a red cube", &out, &model), &[]);
    one_line_error(
        &o,
        2,
        &[
            &bias,
            "diffusion_pytorch_model.safetensors",
            "NaN or infinite",
            "download or export it again",
        ],
    );
    assert!(
        !out.exists() && leftovers(&out).is_empty(),
        "{:?}",
        leftovers(&out)
    );

    let clip = model_copy("clip", d.path());
    let weights = clip.join("model.safetensors");
    let w = tensor_ending(&weights, ".weight");
    poison(&weights, &w, f32::INFINITY);
    let o = run(
        &generate_args("a red cube", &out, &["--clip", clip.to_str().unwrap()]),
        &[],
    );
    one_line_error(&o, 2, &[&w, "model.safetensors", "NaN or infinite"]);

    let bytes = std::fs::read(&prior).unwrap();
    std::fs::write(&prior, &bytes[..bytes.len() - 100]).unwrap();
    let o = run(&generate_args("a red cube", &out, &model), &[]);
    one_line_error(&o, 2, &["truncated weights file", "fetch it again"]);
    assert!(!out.exists() && leftovers(&out).is_empty());
}

/// `export` of a latent holding NaN: one line, and no mesh file appears.
#[test]
fn nan_latent_export_is_one_line() {
    let d = tempfile::tempdir().unwrap();
    let latent = d.path().join("latent.safetensors");
    let header = br#"{"latent":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]}}"#;
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header);
    bytes.extend_from_slice(&1f32.to_le_bytes());
    bytes.extend_from_slice(&f32::NAN.to_le_bytes());
    std::fs::write(&latent, bytes).unwrap();
    let o = run(
        &["-q", "export", latent.to_str().unwrap(), "--grid", "16"],
        &[],
    );
    one_line_error(
        &o,
        2,
        &[
            "latent.safetensors",
            "NaN or infinite",
            "generate the latent again",
        ],
    );
    assert_eq!(names(d.path()), vec!["latent.safetensors"]);
}

/// `export --level` outside the tanh field's −1..1 (or not a number) is one line, before any work.
#[test]
fn export_refuses_a_level_outside_the_field_range() {
    let d = tempfile::tempdir().unwrap();
    let latent = d.path().join("latent.safetensors");
    for level in ["1.5", "-1", "nan"] {
        let o = run(
            &["-q", "export", latent.to_str().unwrap(), "--level", level],
            &[],
        );
        one_line_error(&o, 2, &["--level must lie within"]);
    }
    assert!(names(d.path()).is_empty());
}

/// `export` writes its files privately and moves them in; existing ones need `--overwrite`.
#[test]
fn export_adds_files_atomically() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("run");
    let o = run(
        &[
            "-q",
            "sample",
            "a red cube",
            "--prior-steps",
            "2",
            "--out",
            out.to_str().unwrap(),
        ],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let latent = out.join("latent.safetensors");
    let export = |extra: &[&str], envs: &[(&str, &str)]| {
        let mut a = vec![
            "-q",
            "export",
            latent.to_str().unwrap(),
            "--grid",
            "16",
            "--formats",
            "glb,ply",
        ];
        a.extend_from_slice(extra);
        run(&a, envs)
    };
    let o = export(&[], &[("CLIPSCULPT_FAULT_ENOSPC", "mesh.ply")]);
    one_line_error(&o, 2, &["No space left on device", "free"]);
    assert_eq!(
        names(&out),
        vec!["latent.safetensors", "views.png"],
        "no mesh file appears"
    );
    assert!(export(&[], &[]).status.success());
    assert_eq!(
        names(&out),
        vec!["latent.safetensors", "mesh.glb", "mesh.ply", "views.png"]
    );
    one_line_error(&export(&[], &[]), 2, &["mesh.glb exists", "--overwrite"]);
    assert!(export(&["--overwrite"], &[]).status.success());
    assert_eq!(leftovers(&out), Vec::<String>::new());
}

/// A huge learning rate: the run either keeps its best latent (complete folder, the latent finite
/// and within the optimizer's clamp [−1, 1], its scores finite) or stops with one line that names
/// `--lr`; never a partial folder.
#[test]
fn huge_learning_rate_is_contained() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("run");
    let o = run(
        &generate_args(
            "a red cube",
            &out,
            &[
                "--settings",
                concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/tests/fixtures/fast-huge-lr.json"
                ),
            ],
        ),
        &[],
    );
    if o.status.success() {
        assert!(absent_or_complete(&out, "a red cube"));
        let saved = candle_core::safetensors::load(out.join("latent.safetensors"), &Device::Cpu)
            .expect("the latent loads");
        for (name, t) in saved {
            let v = t.flatten_all().unwrap().to_vec1::<f32>().unwrap();
            let bad = v
                .iter()
                .filter(|x| !(x.is_finite() && x.abs() <= 1.0))
                .count();
            assert_eq!(
                bad,
                0,
                "{name}: {bad} of {} values non-finite or beyond ±1",
                v.len()
            );
        }
        let report: serde_json::Value =
            serde_json::from_slice(&std::fs::read(out.join("report.json")).unwrap()).unwrap();
        for key in ["score_before", "score_after"] {
            assert!(
                report[key].as_f64().is_some_and(f64::is_finite),
                "{key}: {report}"
            );
        }
    } else {
        one_line_error(&o, 2, &["lr"]);
        assert!(!out.exists());
    }
    assert_eq!(leftovers(&out), Vec::<String>::new());
}

/// Spawns `args` with debug logging and waits for a stderr line containing `marker`.
fn spawn_until(args: &[&str], marker: &str) -> Child {
    spawn_until_keeping(args, marker).0
}

/// [`spawn_until`], also returning the stderr lines after the marker (once the child exits).
fn spawn_until_keeping(args: &[&str], marker: &str) -> (Child, JoinHandle<Vec<String>>) {
    let mut v = vec!["-v"];
    v.extend(args.iter().filter(|a| **a != "-q"));
    let mut child = cmd(&v, &[])
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let found = lines.any(|l| l.is_ok_and(|l| l.contains(marker)));
    assert!(found, "{marker:?} never appeared");
    // Keep draining stderr so the child never blocks on a full pipe.
    let rest = std::thread::spawn(move || lines.map_while(Result::ok).collect());
    (child, rest)
}

/// A stand-in for Blender that reports a version and crashes on every render.
fn crashing_blender(dir: &Path) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let exe = dir.join("blender");
    std::fs::write(
        &exe,
        "#!/bin/sh\ncase \"$*\" in *--version*) echo 'Blender 3.4.1'; exit 0;; esac\necho 'Segmentation fault' >&2\nexit 139\n",
    )?;
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755))?;
    Ok(exe)
}

/// A Blender preview that fails keeps the finished run: exit 1, one line naming its folder, the log and the command
/// that renders the preview again.
#[test]
fn a_failed_blender_preview_keeps_the_run() -> anyhow::Result<()> {
    let d = tempfile::tempdir()?;
    let blender = crashing_blender(d.path())?;
    let blender = blender.to_str().unwrap();
    let out = d.path().join("run");
    let extra = ["--blender-preview"];
    let o = run(
        &generate_args("a red cube", &out, &extra),
        &[("BLENDER", blender)],
    );
    let e = one_line_error(&o, 1, &["Segmentation fault", "the run is complete in"]);
    let log = out.join("blender_preview.log");
    assert!(e.contains(log.to_str().unwrap()), "{e}");
    assert!(
        e.contains(&format!("clipsculpt preview {} --blender", out.display())),
        "{e}"
    );
    for f in RUN_FILES {
        assert!(out.join(f).is_file(), "{f} missing: {:?}", names(&out));
    }
    Ok(())
}

/// Two `generate` into one `--out`: the second refuses at once, the first completes.
#[test]
fn second_run_into_the_same_out_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("run");
    let first = generate_args(
        "a red cube",
        &out,
        &[
            "--settings",
            concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/fixtures/fast-steps-30.json"
            ),
        ],
    );
    let mut a = spawn_until(&first, "stage: sampling the prior");
    let o = run(&generate_args("a blue sphere", &out, &[]), &[]);
    one_line_error(
        &o,
        2,
        &["in use by another clipsculpt process", "wait for it"],
    );
    assert!(a.wait().unwrap().success());
    assert!(absent_or_complete(&out, "a red cube"));
    assert_eq!(leftovers(&out), Vec::<String>::new());
}

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

fn batch_args<'a>(prompts: &'a Path, out: &'a Path, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec![
        "-q",
        "batch",
        prompts.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    v.extend_from_slice(FAST);
    v.extend_from_slice(extra);
    v
}

/// Done ids of every manifest in a batch folder.
fn done_ids(out: &Path) -> Vec<String> {
    let mut ids: Vec<String> = names(out)
        .iter()
        .filter(|n| n.starts_with("manifest") && n.ends_with(".jsonl"))
        .flat_map(|n| {
            let text = std::fs::read_to_string(out.join(n)).unwrap();
            text.lines()
                .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
                .filter(|r| r["status"] == "done")
                .map(|r| r["id"].as_str().unwrap().to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    ids.sort();
    ids
}

/// The same shard of one batch twice at once: the second refuses. Two different shards run
/// side by side and together do every item exactly once.
#[test]
fn batch_same_shard_refused_other_shards_concurrent() {
    let d = tempfile::tempdir().unwrap();
    let prompts = prompt_file(d.path(), 4);
    let out = d.path().join("batch");
    let mut a = spawn_until(&batch_args(&prompts, &out, &[]), "item 0001");
    let o = run(&batch_args(&prompts, &out, &[]), &[]);
    one_line_error(
        &o,
        2,
        &[
            "shard 0/1 of the batch",
            "in use by another clipsculpt process",
        ],
    );
    assert!(a.wait().unwrap().success());
    assert_eq!(done_ids(&out).len(), 4);

    let out = d.path().join("sharded");
    let shard = |i: &'static str| {
        let mut c = cmd(&batch_args(&prompts, &out, &["--shard", i]), &[]);
        c.stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (s0, s1) = (shard("0/2"), shard("1/2"));
    for s in [s0, s1] {
        let o = s.wait_with_output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
    }
    let ids = done_ids(&out);
    let mut unique = ids.clone();
    unique.dedup();
    assert_eq!((ids.len(), unique.len()), (4, 4), "{ids:?}");
    assert!(names(&out)
        .iter()
        .all(|n| !n.contains("partial") && !n.ends_with(".lock")));
}

/// An item that cannot write (injected full disk) fails alone: exit code 1, the others done,
/// the failure recorded with its one-line reason.
#[test]
fn batch_item_failure_is_recorded() {
    let d = tempfile::tempdir().unwrap();
    let prompts = d.path().join("p.jsonl");
    std::fs::write(
        &prompts,
        "{\"prompt\": \"a red cube\"}\n{\"prompt\": \"a blue sphere\", \"steps\": 0}\n",
    )
    .unwrap();
    let out = d.path().join("batch");
    let o = run(
        &batch_args(&prompts, &out, &[]),
        &[("CLIPSCULPT_FAULT_ENOSPC", "mesh.glb")],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let manifest = std::fs::read_to_string(out.join("manifest.jsonl")).unwrap();
    let failed: Vec<serde_json::Value> = manifest
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(failed.len(), 2);
    for r in &failed {
        assert_eq!(r["status"], "failed");
        let e = r["error"].as_str().unwrap();
        assert!(
            e.contains("No space left") && e.matches("mesh.glb").count() == 1,
            "{e}"
        );
    }
    assert!(
        names(&out).iter().all(|n| !n.contains("partial")),
        "{:?}",
        names(&out)
    );
    // What the failed items wrote is kept, named in their manifest lines.
    let kept: Vec<String> = names(&out)
        .into_iter()
        .filter(|n| n.ends_with(".failed"))
        .collect();
    assert_eq!(kept.len(), 2, "{:?}", names(&out));
    for (k, r) in kept.iter().zip(&failed) {
        assert!(out.join(k).join("latent.safetensors").is_file(), "{k}");
        assert!(r["error"].as_str().unwrap().contains(&format!("{k}/")));
    }
    let o = run(&batch_args(&prompts, &out, &[]), &[]);
    assert!(
        o.status.success(),
        "the rerun retries the failed items: {}",
        stderr(&o)
    );
    assert_eq!(done_ids(&out).len(), 2);
    assert!(names(&out).iter().all(|n| !n.ends_with(".failed")));
}

/// The batch folder turns read-only after the first item: the batch stops with one line that
/// names the fix (exit 2), finished items stay intact, and a rerun after making it writable
/// finishes the rest. Uses a tmpfs remounted read-only (user namespaces), else chmod (not root:
/// root ignores permission bits, so as root without a namespace it skips, [`tmpfs_or_skip`]).
#[test]
fn read_only_batch_folder_mid_batch() {
    let d = tempfile::tempdir().unwrap();
    let prompts = prompt_file(d.path(), 3);
    let fast = FAST.join(" ");
    let batch = format!(
        "\"$BIN\" -q batch {} --out \"$MNT/b\" {fast}",
        prompts.display()
    );
    let wait_first =
        "until grep -q done \"$MNT/b/manifest.jsonl\" 2>/dev/null; do sleep 0.02; done";
    if !is_root() && !can_mount_tmpfs() {
        chmod_case(&prompts, d.path());
    } else if tmpfs_or_skip("read_only_batch_folder_mid_batch") {
        let script = format!(
            "{batch} 2>\"$MNT/../err\" & pid=$!; {wait_first}; until mount -o remount,ro \"$MNT\" 2>/dev/null; do sleep 0.01; done; wait $pid; echo rc=$?; \
             cat \"$MNT/../err\"; ls -a \"$MNT/b\"; mount -o remount,rw \"$MNT\"; {batch} 2>&1; echo rc=$?; ls -a \"$MNT/b\""
        );
        let o = in_tmpfs("64m", &script, d.path());
        let text = String::from_utf8_lossy(&o.stdout).into_owned();
        let mut parts = text.split("rc=");
        let _ = parts.next();
        let first = parts.next().unwrap_or_default();
        let second = parts.next().unwrap_or_default();
        check_read_only(first, second, &text);
    }
}

/// `first`: "2\n<the error line>\n<ls -a>"; `second`: "0\n<ls -a>" of the rerun.
fn check_read_only(first: &str, second: &str, all: &str) {
    let mut lines = first.lines();
    assert_eq!(
        lines.next(),
        Some("2"),
        "exit 2 when the folder turns read-only: {all}"
    );
    let rest: Vec<&str> = lines.collect();
    // The failed item's log line comes first; the error that stops the batch is one line.
    let errors: Vec<&&str> = rest.iter().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(errors.len(), 1, "{all}");
    assert!(
        errors[0].contains("Read-only file system")
            && errors[0].contains("make the batch folder writable"),
        "{all}"
    );
    let items = rest.iter().filter(|n| n.starts_with("000")).count();
    assert!((1..3).contains(&items), "finished items kept: {all}");
    let mut lines = second.lines();
    assert_eq!(lines.next(), Some("0"), "the rerun completes: {all}");
    let listing: Vec<&str> = lines.collect();
    assert_eq!(
        listing.iter().filter(|n| n.starts_with("000")).count(),
        3,
        "{all}"
    );
    assert!(
        listing
            .iter()
            .all(|n| !n.contains("partial") && !n.ends_with(".lock")),
        "{all}"
    );
}

/// Whether the tests run as root (who ignores permission bits).
fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// The read-only case with permission bits (not root): exit 2 and one error line naming the fix.
fn chmod_case(prompts: &Path, dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let out = dir.join("b");
    let (mut child, rest) = spawn_until_keeping(&batch_args(prompts, &out, &[]), "item 0002");
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o555)).unwrap();
    let o = child.wait().unwrap();
    std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o755)).unwrap();
    let log = rest.join().unwrap();
    assert_eq!(o.code(), Some(2), "{log:?}");
    let errors: Vec<&String> = log.iter().filter(|l| l.starts_with("error: ")).collect();
    assert_eq!(errors.len(), 1, "one error line: {log:?}");
    assert!(
        errors[0].contains("Permission denied")
            && errors[0].contains("make the batch folder writable"),
        "{errors:?}"
    );
    let o = run(&batch_args(prompts, &out, &[]), &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(done_ids(&out).len(), 3);
}
