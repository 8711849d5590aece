//! The cost of the weights' NaN/inf check within a model load: every tensor of every file read
//! with the check (as the loader does), with the same reads unchecked, and with candle's plain
//! read (a copy out of a memory map).

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use candle_core::safetensors::MmapedSafetensors;
use candle_core::Device;

use crate::weights::finite::{self, Source};

/// How a tensor is read.
#[derive(Clone, Copy)]
enum Read {
    Checked,
    Unchecked,
    Candle,
}

/// Seconds to read every tensor of `files` to the CPU.
fn read_all(files: &[PathBuf], how: Read) -> f64 {
    let t = Instant::now();
    for f in files {
        let mut file = std::fs::File::open(f).unwrap();
        let mut len = [0u8; 8];
        file.read_exact(&mut len).unwrap();
        let n = u64::from_le_bytes(len);
        let mut raw = vec![0u8; n as usize];
        file.read_exact(&mut raw).unwrap();
        let header: serde_json::Map<String, serde_json::Value> =
            serde_json::from_slice(&raw).unwrap();
        // SAFETY: test-owned files, not modified while mapped.
        let st = unsafe { MmapedSafetensors::new(f) }.unwrap();
        for (name, e) in header.iter().filter(|(k, _)| *k != "__metadata__") {
            let dtype = e["dtype"].as_str().unwrap();
            let shape: Vec<usize> = serde_json::from_value(e["shape"].clone()).unwrap();
            let [from, to]: [u64; 2] = serde_json::from_value(e["data_offsets"].clone()).unwrap();
            let src = Source::File {
                file: &file,
                offset: 8 + n + from,
                len: to - from,
            };
            match how {
                Read::Checked => {
                    let t = finite::read_checked(dtype, src, &shape);
                    assert!(t.unwrap().is_ok(), "{name}");
                }
                Read::Unchecked => {
                    finite::read_unchecked(dtype, src, &shape).unwrap();
                }
                Read::Candle => {
                    st.load(name, &Device::Cpu).unwrap();
                }
            }
        }
    }
    t.elapsed().as_secs_f64()
}

/// The NaN/inf check's share of a model load. Needs random published-size models
/// (`clipsculpt random-models /tmp/rm --preset published`); run with
/// `CLIPSCULPT_SCAN_MODELS=/tmp/rm cargo test --release --lib scan_cost -- --ignored --nocapture`.
#[test]
#[ignore = "needs published-size random models (CLIPSCULPT_SCAN_MODELS)"]
fn scan_cost() {
    let root =
        PathBuf::from(std::env::var("CLIPSCULPT_SCAN_MODELS").expect("CLIPSCULPT_SCAN_MODELS"));
    let (shap_e, clip) = (root.join("shap_e"), root.join("clip"));
    let files: Vec<PathBuf> = walk(&root)
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .collect();
    let mib = files
        .iter()
        .map(|f| std::fs::metadata(f).unwrap().len())
        .sum::<u64>() as f64
        / (1 << 20) as f64;
    for round in 0..5 {
        let t = Instant::now();
        let models = crate::pipeline::Models::load(&shap_e, &clip, &Device::Cpu).unwrap();
        let load = t.elapsed().as_secs_f64();
        drop(models);
        // Alternate which copy goes first, so that neither always meets the colder cache.
        let (checked, unchecked) = if round % 2 == 0 {
            let c = read_all(&files, Read::Checked);
            (c, read_all(&files, Read::Unchecked))
        } else {
            let u = read_all(&files, Read::Unchecked);
            (read_all(&files, Read::Checked), u)
        };
        let candle = read_all(&files, Read::Candle);
        println!(
            "round {round}: Models::load {load:.3} s; reading {mib:.0} MiB: checked {checked:.3} s, \
             same copy unchecked {unchecked:.3} s, candle's read {candle:.3} s; the check's cost \
             {:.3} s = {:.1} % of the load",
            checked - unchecked,
            100.0 * (checked - unchecked) / load
        );
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}
