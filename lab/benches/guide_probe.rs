//! Guidance settings probe on the toy world: see `clipsculpt_lab::probe::guide_probe`
//! (`src/toy/probe/guide.rs`) for what it prints and the settings it reads from the environment.
//!
//! `cargo bench --bench guide_probe`

fn main() -> anyhow::Result<()> {
    clipsculpt_lab::probe::guide_probe()
}
