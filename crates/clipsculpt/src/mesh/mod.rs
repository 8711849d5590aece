//! Mesh extraction and export: field → grid → marching cubes → coloured mesh → GLB / PLY / OBJ + previews.
//!
//! Stages, one file each:
//! 1. [`field`]: a [`Field`] (scalar positive inside + linear RGB, Shap-E convention) sampled on a G³ [`Grid`] in
//!    chunks of plain tensors on any candle device ([`sample_grid`]); [`release_device_caches`](memory::release_device_caches) before that.
//! 2. [`marching_cubes`](mod@marching_cubes): our own MC with one vertex per crossed edge, padding, outward winding,
//!    gradient normals, slab-parallel; [`McMode::ShapEParity`] reproduces diffusers' `MeshDecoder`
//!    (`docs/shap-e.md`, "Mesh extraction"). [`Mesh::stats`] gives the quality gates.
//! 3. [`asset`]: optional [`smooth`]ing, [`simplify`] to a face count, a UV [`atlas`] with the field's colour
//!    [`bake`]d into a [`Texture`], real size and base-centre origin ([`placement`]).
//! 4. [`colour`] (linear in GLB, sRGB in PLY/OBJ) and [`axes`] (field +Z up → GLB/OBJ +Y up, PLY +Z up: upright in
//!    Blender from every format).
//! 5. Writers [`glb`] and [`obj`] (with the [`material`]), [`ply`], all atomic ([`crate::atomic`]); [`preview`] renders a PNG contact sheet
//!    and a turntable GIF with the [`raster`] CPU rasteriser.
//! 6. [`export_field`] runs all of it for `clipsculpt export`:
//!
//! ```no_run
//! use clipsculpt::mesh::{export_field, shapes, AssetOptions, FnField, Format};
//! let ball = FnField(|p: [f32; 3]| (shapes::sphere(p, [0.0; 3], 0.7), [0.8, 0.2, 0.1]));
//! let (device, asset) = (candle_core::Device::Cpu, AssetOptions::default());
//! let report = export_field(&ball, &device, 128, 0.0, &asset, &Format::DEFAULT, "out".as_ref(), "ball")?;
//! println!("{} faces, watertight: {}", report.stats.faces, report.stats.is_watertight());
//! # Ok::<(), clipsculpt::mesh::ExportError>(())
//! ```

pub mod asset;
pub(crate) mod atlas;
pub(crate) mod axes;
pub(crate) mod bake;
pub mod colour;
pub(crate) mod error;
pub(crate) mod export;
pub mod field;
pub(crate) mod glb;
pub mod glb_extras;
pub(crate) mod grid;
pub mod iso;
pub(crate) mod marching_cubes;
pub(crate) mod material;
pub(crate) mod memory;
#[allow(clippy::module_inception)]
pub(crate) mod mesh;
pub(crate) mod obj;
pub(crate) mod placement;
pub(crate) mod ply;
pub(crate) mod preview;
pub(crate) mod raster;
pub mod shapes;
pub(crate) mod simplify;
pub(crate) mod smooth;
pub(crate) mod tables;
pub(crate) mod texture;

pub use asset::{Asset, AssetOptions, AssetReport};
pub use error::ExportError;
pub use export::{export_field, ExportReport, Format};
pub use field::{sample_colours, sample_grid};
pub use field::{Field, FnField};
pub use grid::{Bounds, Grid};
pub use iso::{Iso, IsoRule, Level};
pub use marching_cubes::{marching_cubes, McMode, McOptions};
pub(crate) use memory::MemoryReport;
pub use mesh::{Mesh, MeshStats};
pub use simplify::SimplifyReport;
pub use texture::Texture;
