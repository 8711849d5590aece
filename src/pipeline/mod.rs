//! The whole job, composed from the stages: text conditioning → prior sampling → CLIP-guided
//! optimization → mesh extraction and export. Each stage lives in its own module; this one wires
//! them together ([`generate`]), loads the models once ([`models`]), records what each stage
//! took ([`stages`]) and what the run did (`report.json`, [`report`]).

pub mod generate;
pub mod mesh;
pub(crate) mod models;
pub(crate) mod report;
pub(crate) mod settings;
pub(crate) mod stages;
pub(crate) mod stream;

pub use generate::{generate, same_values, Progress};
pub use mesh::{extract_mesh, LatentField};
pub use models::{read_negatives, Guided, ModelSources, Models};
pub use report::{
    ExportMemory, MemorySection, Report, ReportSettings, StagePeakBytes, StageSeconds,
};
pub use settings::RunSettings;
