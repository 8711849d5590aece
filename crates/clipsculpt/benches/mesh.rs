//! Marching-cubes speed on a sphere SDF (r = 0.8 in [−1, 1]³, level 0), single thread and all threads.
//!
//! `cargo bench --bench mesh` prints a markdown table: best of several runs, vertex and face counts, and the
//! ratio to the single-thread run of the same size. `benches/reference/mesh_mc.py` times scikit-image and VTK on
//! the same workload, for a side-by-side run. Benches never assert timings.

use std::time::Instant;

use clipsculpt::mesh::{marching_cubes, shapes, Bounds, Grid, McOptions};

fn best_ms(reps: usize, mut f: impl FnMut() -> (usize, usize)) -> (f64, (usize, usize)) {
    let mut best = f64::INFINITY;
    let mut counts = (0, 0);
    for _ in 0..reps {
        let t = Instant::now();
        counts = f();
        best = best.min(t.elapsed().as_secs_f64() * 1e3);
    }
    (best, counts)
}

fn main() {
    let threads = rayon::current_num_threads();
    println!("| grid | threads | best ms | V | F | speed-up |");
    println!("|---|---|---|---|---|---|");
    for n in [128usize, 256] {
        let grid = match Grid::from_fn(n, Bounds::SHAP_E, |p| shapes::sphere(p, [0.0; 3], 0.8)) {
            Ok(g) => g,
            Err(e) => {
                eprintln!("building the {n}³ grid: {e}");
                return;
            }
        };
        let reps = if n == 128 { 15 } else { 7 };
        let mut single = None;
        for parallel in [false, true] {
            let opts = McOptions {
                parallel,
                ..McOptions::default()
            };
            let (ms, (v, f)) = best_ms(reps, || match marching_cubes(&grid, &opts) {
                Ok(m) => (m.positions.len(), m.faces.len()),
                Err(e) => panic!("marching cubes on the {n}³ sphere failed: {e}"),
            });
            let base = *single.get_or_insert(ms);
            let label = if parallel {
                threads.to_string()
            } else {
                "1".into()
            };
            println!(
                "| {n}³ | {label} | {ms:.1} | {v} | {f} | {:.2}× |",
                base / ms
            );
        }
    }
}
