//! Mesh extraction and export: field → grid → marching cubes → coloured mesh → GLB / PLY / OBJ + previews.

pub mod axes;
pub mod colour;
pub mod error;
pub mod export;
pub mod field;
pub mod glb;
pub mod grid;
pub mod marching_cubes;
pub mod memory;
#[allow(clippy::module_inception)]
pub mod mesh;
pub mod obj;
pub mod ply;
pub mod preview;
pub mod raster;
pub mod shapes;
pub mod tables;

pub use error::ExportError;
pub use export::{
    export_field, export_field_with, write_all, ExportReport, ExportSettings, Format,
};
pub use field::{sample_colours, sample_grid, Field, FnField, DEFAULT_CHUNK};
pub use grid::{Bounds, Grid};
pub use marching_cubes::{marching_cubes, marching_cubes_with, McMode, McOptions};
pub use memory::{release_device_caches, MemoryReport};
pub use mesh::{Mesh, MeshStats};
