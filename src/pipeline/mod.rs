//! The whole job, composed from the stages: text conditioning → prior sampling → CLIP-guided
//! optimization → mesh extraction and export. Each stage lives in its own module; this one wires
//! them together ([`generate()`]), loads the models once ([`models`]), records what each stage
//! took ([`stages`]) and what the run did (`report.json`, [`report`]); [`candidates`] picks the
//! best of several noises.

pub(crate) mod candidates;
pub(crate) mod generate;
pub(crate) mod mesh;
pub(crate) mod models;
pub(crate) mod report;
pub(crate) mod settings;
pub(crate) mod stages;
pub(crate) mod stream;

pub use candidates::NoiseChoice;
pub(crate) use generate::same_values;
pub use generate::{generate, Progress};
pub(crate) use mesh::extract_mesh;
pub(crate) use mesh::LatentField;
pub(crate) use models::read_negatives;
pub(crate) use models::Guided;
pub use models::Models;
pub use report::{
    ExportMemory, MemorySection, Report, ReportSettings, StagePeakBytes, StageSeconds,
};
pub use settings::RunSettings;
