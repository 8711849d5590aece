//! clipsculpt: turn a text prompt into a coloured 3D mesh.
//!
//! The pipeline has four stages (see `README.md`, "Architecture"): text conditioning, prior sampling,
//! CLIP-guided latent optimization under gradient checkpointing, and mesh extraction/export.
//! This crate is the library; `src/main.rs` and [`cli`] are the application around it.

pub mod atomic;
pub mod autodiff;
pub mod batch;
pub mod blender;
pub mod cli;
pub mod clip;
pub mod device;
pub mod guide;
pub(crate) mod kernels;
pub mod mesh;
pub(crate) mod models;
pub mod pipeline;
pub mod render;
pub mod shap_e;
pub mod toy;
pub mod weights;

#[cfg(test)]
mod tests;

/// Unit tests count heap bytes, as the binary and the benches do.
#[cfg(test)]
#[global_allocator]
static ALLOC: autodiff::memory::CountingAlloc = autodiff::memory::CountingAlloc;
