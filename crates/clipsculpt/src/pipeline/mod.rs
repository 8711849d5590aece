//! The whole job, composed from the stages: text conditioning → prior sampling → CLIP-guided
//! optimization → mesh extraction and export. Each stage lives in its own module; this one wires
//! them together ([`generate()`]), loads the models once ([`models`]), records what each stage
//! took ([`stages`]) and what the run did (`report.json`, [`report`]); [`candidates`] picks the
//! best of several noises.

pub mod blend;
pub mod candidates;
pub mod edit;
pub(crate) mod generate;
pub mod lineage;
pub(crate) mod mesh;
pub(crate) mod models;
pub(crate) mod observer;
pub mod provenance;
pub mod renoise;
pub(crate) mod report;
pub(crate) mod settings;
pub(crate) mod stages;
pub use stages::{stage, StageRecord};
pub mod stream;

pub use candidates::{Chosen, NoiseChoice};
pub use edit::EditMethod;
pub use generate::same_values;
pub use generate::{generate, run, After, Outcome, RunContext};
pub use lineage::{load_parent, Lineage, LoadedParent, Parent};
pub use mesh::extract_mesh;
pub use mesh::LatentField;
pub use models::read_negatives;
pub use models::Guided;
pub use models::Models;
pub use observer::{Observer, Progress};
pub use provenance::Provenance;
pub use renoise::{Renoise, DEFAULT_STRENGTH};
pub use report::{
    ExportMemory, MemorySection, Report, ReportSettings, StagePeakBytes, StageSeconds,
};
pub use settings::{ModelChoice, RunSettings, SettingsFile};
