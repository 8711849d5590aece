//! clipsculpt: turn a text prompt into a coloured 3D mesh.
//!
//! The pipeline has four stages (see `docs/architecture.md`, "Stages"): text conditioning, prior
//! sampling, CLIP-guided latent optimization under gradient checkpointing, and mesh
//! extraction/export.
//! This crate is the library. The application (the `clipsculpt` binary, `crates/clipsculpt-cli`) and the lab
//! (`clipsculpt-lab`: toy-world training, evaluation, probes) use it through its public API only.
//!
//! The facade is the pipeline: [`pipeline::RunSettings`] (whose `Default` is what `clipsculpt generate PROMPT`
//! runs), [`pipeline::Models::load_choice`], [`pipeline::RunContext`], [`pipeline::generate()`] (or
//! [`pipeline::run()`] for the latents without files) with a [`pipeline::Observer`] as its stage hook, and the
//! report types ([`pipeline::Report`] and its parts); `examples/api.rs` uses exactly that. Around it: model specs
//! and the embedded toy world ([`models`]), mesh export ([`mesh::export_field`], [`mesh::marching_cubes()`]),
//! Blender previews ([`blender::preview`]), prompt files and batches ([`batch`]), atomic outputs ([`atomic`]).
//! The building blocks the lab and the benches drive (checkpoint engine, renderer, Shap-E prior and decoder, CLIP,
//! guidance, memory meters, [`random`] weights) are public too; the CPU kernels are crate-internal.

pub mod atomic;
pub mod autodiff;
pub mod batch;
pub mod blender;
pub mod clip;
pub mod device;
pub mod gallery;
pub mod guide;
pub(crate) mod kernels;
pub mod mesh;
pub mod models;
pub mod pipeline;
pub mod random;
pub mod render;
pub mod shap_e;
pub mod weights;

#[cfg(test)]
mod tests;

/// Unit tests count heap bytes, as the binary and the benches do.
#[cfg(test)]
#[global_allocator]
static ALLOC: autodiff::memory::CountingAlloc = autodiff::memory::CountingAlloc;
