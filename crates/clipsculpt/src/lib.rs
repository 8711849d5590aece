//! clipsculpt: turn a text prompt into a coloured 3D mesh.
//!
//! The pipeline has four stages (see `docs/architecture.md`, "Stages"): text conditioning, prior
//! sampling, CLIP-guided latent optimization under gradient checkpointing, and mesh
//! extraction/export.
//! This crate is the library; `src/main.rs` and [`cli`] are the application around it.
//!
//! The public API is the pipeline ([`pipeline::generate()`], [`pipeline::Models::load`]), its settings
//! ([`pipeline::RunSettings`], [`guide::GuideSettings`], [`autodiff::checkpoint::Policy`],
//! [`device::Precision`]), mesh export ([`mesh::export_field`], [`mesh::marching_cubes()`]), Blender
//! previews ([`blender::preview`]) and the report types ([`pipeline::Report`] and its parts).
//! Besides that facade, what the fuzz targets drive (prompt files, run summaries, the tokenizer,
//! weight files) and the building blocks the benches time (checkpoint engine, renderer, Shap-E
//! prior and decoder, CLIP vision tower, memory meters, `toy::random`, `toy::probe`) are public.
//! Everything else is `pub(crate)` (`docs/architecture.md`, "Public API").

pub mod atomic;
pub mod autodiff;
pub mod batch;
pub mod blender;
pub mod clip;
pub mod device;
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
