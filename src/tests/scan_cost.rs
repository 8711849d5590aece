//! The cost of the weights' NaN/inf scan within a model load (moved from `tests/faults.rs`: it
//! times the crate-internal scan on its own).

use std::path::{Path, PathBuf};
use std::time::Instant;

/// The NaN/inf scan's share of a model load. Needs random published-size models
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
    let dev = candle_core::Device::Cpu;
    for round in 0..3 {
        let t = Instant::now();
        let models = crate::pipeline::Models::load(&shap_e, &clip, &dev).unwrap();
        let load = t.elapsed().as_secs_f64();
        drop(models);
        let mut bytes = 0;
        let mut scan = 0.0;
        for f in &files {
            let data = std::fs::read(f).unwrap();
            let n = u64::from_le_bytes(data[..8].try_into().unwrap()) as usize;
            let t = Instant::now();
            assert!(crate::weights::finite::scan("F32", &data[8 + n..]).is_none());
            scan += t.elapsed().as_secs_f64();
            bytes += data.len() - 8 - n;
        }
        println!(
            "round {round}: load {load:.3} s (scan included), scan alone {scan:.3} s over {:.0} MiB = {:.1} % of the load",
            bytes as f64 / (1 << 20) as f64,
            100.0 * scan / load
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
