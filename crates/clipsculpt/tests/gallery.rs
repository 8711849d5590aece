//! The gallery (`clipsculpt::gallery`): a batch interrupted half-way has a valid page of the items it finished,
//! and the page works in a real headless browser from disk: no console errors, no network request, one card per
//! item, a drawn 3D view. The browser checks need Chromium (`chromium`, or the path in `CLIPSCULPT_CHROMIUM`);
//! without one they print SKIPPED, unless `CLIPSCULPT_REQUIRE_BROWSER=1` (CI) makes that a failure.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use candle_core::Device;
use clipsculpt::batch::{parse_prompt_bytes, run_batch, Shard};
use clipsculpt::gallery::write_gallery;
use clipsculpt::mesh::{export_field, shapes, FnField, Format};

/// Writes a small run into `dir`: a sphere of `radius` and `colour` (GLB and preview) and its `report.json`.
fn toy_run(dir: &Path, prompt: &str, radius: f32, colour: [f32; 3], score: f64) {
    fs::create_dir_all(dir).unwrap();
    let ball = FnField(move |p: [f32; 3]| (shapes::sphere(p, [0.0; 3], radius), colour));
    let formats = [Format::Glb, Format::PreviewPng];
    export_field(
        &ball,
        &Device::Cpu,
        24,
        0.0,
        &clipsculpt::mesh::AssetOptions::default(),
        &formats,
        dir,
        "mesh",
    )
    .unwrap();
    let report = serde_json::json!({
        "prompt": prompt,
        "settings": {"seed": 7, "mode": "sampling"},
        "score_before": score - 0.01,
        "score_after": score,
        "seconds": {"total": 1.5},
        "mesh": {"faces": 100},
    });
    fs::write(dir.join("report.json"), report.to_string()).unwrap();
}

/// `<article class="card` elements in a page.
fn cards(html: &str) -> usize {
    html.matches("<article class=\"card").count()
}

/// Each item sees the page of the items before it (the runner rewrites it after each), complete; the failed
/// item gets a card with its reason.
#[test]
fn an_interrupted_batch_has_a_page_of_its_finished_items() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("batch");
    let file = parse_prompt_bytes(
        Path::new("p.txt"),
        b"a red ball\na green ball\na blue ball\n".to_vec(),
    )
    .unwrap();
    let mut seen = Vec::new();
    let summary = run_batch(&file.items, Shard::default(), &out, 0, |item, dir| {
        let page = fs::read_to_string(out.join("index.html")).unwrap_or_default();
        assert!(
            page.is_empty() || page.ends_with("</html>\n"),
            "a whole page"
        );
        seen.push(cards(&page));
        if item.prompt.contains("blue") {
            return Err("the mesh had no surface".into());
        }
        toy_run(dir, &item.prompt, 0.6, [0.8, 0.1, 0.1], 0.9);
        Ok(())
    })
    .unwrap();
    assert_eq!((summary.done, summary.failed), (2, 1));
    assert_eq!(seen, vec![0, 1, 2], "cards seen as each item started");
    let page = fs::read_to_string(out.join("index.html")).unwrap();
    assert_eq!(cards(&page), 3);
    assert_eq!(page.matches("<article class=\"card failed").count(), 1);
    assert!(page.contains("the mesh had no surface"), "the reason");
}

/// A folder holding no runs is refused, and nothing is written into it.
#[test]
fn an_empty_folder_is_refused_and_left_empty() {
    let d = tempfile::tempdir().unwrap();
    let err = write_gallery(d.path()).unwrap_err().to_string();
    assert!(err.contains("holds no runs"), "{err}");
    assert_eq!(fs::read_dir(d.path()).unwrap().count(), 0);
}

/// The browser to drive: `CLIPSCULPT_CHROMIUM`, else `chromium`/`chromium-browser`/`google-chrome` on `PATH`.
fn chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("CLIPSCULPT_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .flat_map(|d| ["chromium", "chromium-browser", "google-chrome"].map(|n| d.join(n)))
        .find(|p| p.is_file())
}

/// The browser, or `None` after printing SKIPPED (a failure when `CLIPSCULPT_REQUIRE_BROWSER=1`).
fn browser_or_skip(test: &str) -> Option<PathBuf> {
    let found = chromium();
    if found.is_none() {
        let required = std::env::var("CLIPSCULPT_REQUIRE_BROWSER").is_ok_and(|v| v == "1");
        assert!(
            !required,
            "{test}: no Chromium found and CLIPSCULPT_REQUIRE_BROWSER=1"
        );
        eprintln!("SKIPPED {test}: no Chromium (install `chromium` or set CLIPSCULPT_CHROMIUM)");
    }
    found
}

/// Runs headless Chromium on `url` with software WebGL, every host name unresolvable, and a net log; returns
/// (the DOM after the page ran, stderr).
fn headless(browser: &Path, url: &str, net_log: &Path, extra: &[&str]) -> (String, String) {
    let out = Command::new(browser)
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--use-angle=swiftshader",
            "--enable-unsafe-swiftshader",
            "--disable-background-networking",
            "--no-first-run",
            "--enable-logging=stderr",
            "--v=0",
            "--host-resolver-rules=MAP * ~NOTFOUND",
            "--virtual-time-budget=30000",
            "--window-size=1200,900",
        ])
        .arg(format!("--log-net-log={}", net_log.display()))
        .args(extra)
        .arg(url)
        .output()
        .unwrap();
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// URLs of the requests the page made (its network isolation key is `file://`) other than `file:`, `data:` and
/// `blob:` ones. The browser's own background requests have other keys.
fn page_network_requests(net_log: &Path) -> Vec<String> {
    let text = fs::read_to_string(net_log).unwrap();
    // Chromium may stop before closing the log's JSON; its events are still one per line.
    let mut urls = Vec::new();
    for line in text.lines() {
        let Ok(e) = serde_json::from_str::<serde_json::Value>(line.trim_end_matches(',')) else {
            continue;
        };
        let p = &e["params"];
        let (Some(url), Some(key)) = (p["url"].as_str(), p["network_isolation_key"].as_str())
        else {
            continue;
        };
        let local = ["file:", "data:", "blob:"]
            .iter()
            .any(|s| url.starts_with(s));
        if key.starts_with("file://") && !local {
            urls.push(url.to_string());
        }
    }
    urls
}

/// The page loads from disk with no console error and no network request, shows one card per item, and draws
/// each toy GLB in its 3D view.
#[test]
fn the_page_works_offline_in_a_headless_browser() {
    let Some(browser) = browser_or_skip("the_page_works_offline_in_a_headless_browser") else {
        return;
    };
    let d = tempfile::tempdir().unwrap();
    let dir = d.path().join("runs");
    toy_run(
        &dir.join("0001-a-red-ball-0"),
        "a red ball",
        0.7,
        [0.8, 0.1, 0.1],
        0.8,
    );
    toy_run(
        &dir.join("0002-a-blue-ball-0"),
        "a <b>blue</b> ball",
        0.5,
        [0.1, 0.2, 0.9],
        0.9,
    );
    fs::create_dir_all(dir.join("0003-a-cube-0.failed")).unwrap();
    fs::write(
        dir.join("manifest.jsonl"),
        r#"{"id":"0003-a-cube-0","line":3,"prompt":"a cube","status":"failed","seconds":2.0,"error":"no surface"}"#,
    )
    .unwrap();
    let summary = write_gallery(&dir).unwrap();
    assert_eq!((summary.runs, summary.failed), (2, 1));
    let page = fs::read_to_string(dir.join("index.html")).unwrap();
    assert!(
        !page.contains("://") && !page.contains("\"//"),
        "the page names no URL with a host"
    );
    assert!(
        page.contains("a &lt;b&gt;blue&lt;/b&gt; ball"),
        "prompts are text"
    );

    let url = format!("file://{}#3d=all", dir.join("index.html").display());
    let net_log = d.path().join("net.json");
    let (dom, stderr) = headless(&browser, &url, &net_log, &["--dump-dom"]);
    assert!(
        dom.contains("data-errors=\"0\""),
        "errors in the page:\n{stderr}"
    );
    assert!(!stderr.contains("Uncaught"), "{stderr}");
    assert_eq!(cards(&dom), 3, "one card per item");
    for key in ["0001-a-red-ball-0", "0002-a-blue-ball-0"] {
        let card = dom.split(&format!("id=\"card-{key}\"")).nth(1).unwrap();
        let tag = &card[..card.find('>').unwrap()];
        let drawn: f64 = tag
            .split("data-drawn=\"")
            .nth(1)
            .and_then(|t| t.split('"').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{key}: no 3D view was drawn: {tag}\n{stderr}"));
        assert!(drawn > 0.02, "{key}: {drawn} of the view drawn");
    }
    let requests = page_network_requests(&net_log);
    assert!(requests.is_empty(), "the page requested {requests:?}");
}
