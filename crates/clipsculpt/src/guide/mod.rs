//! CLIP guidance, one concept per file: guided sampling through the prior ([`sampling`]),
//! end-to-end guidance through the sampler's last steps ([`end_to_end`]) and the loss both use
//! ([`latent_loss`]), and the keep guard both export through ([`keep`]); the
//! latent optimization's settings ([`settings`]), the
//! held-aside evaluation ([`held_aside`]), the per-step view loss ([`objective`]), the Adam loop
//! ([`optimize()`]), exploration and the start choice ([`explore`], [`start`], [`analogy`]), the
//! augmentations ([`augment`]), the learning-rate schedule ([`schedule`]) and the prompt's CLIP
//! term ([`target`]).

pub(crate) mod analogy;
pub mod augment;
pub(crate) mod end_to_end;
pub mod error;
pub(crate) mod explore;
pub(crate) mod held_aside;
pub(crate) mod keep;
pub mod latent_loss;
pub mod mesh_views;
pub(crate) mod mode;
pub(crate) mod objective;
pub(crate) mod optimize;
pub mod sampling;
pub mod schedule;
pub(crate) mod settings;
pub(crate) mod start;
pub(crate) mod target;

pub use analogy::{completions as analogy_completions, Completion, MAX_WORK as ANALOGY_MAX_WORK};
pub use end_to_end::{end_to_end_sample, SamplingRun};
pub use end_to_end::{ChainIteration, ChainTarget, ChainTrace, EndToEndGuidance};
pub use explore::Explore;
pub use held_aside::{held_aside_images, unscored, Start};
pub use held_aside::{score, Score};
pub use keep::{Kept, SamplerExport};
pub use mesh_views::score_mesh;
pub use mode::GuideMode;
pub(crate) use objective::ViewLoss;
pub(crate) use optimize::optimize;
pub use optimize::GuideTrace;
pub(crate) use sampling::guided_sample;
pub use sampling::{GuidedStep, Recurrence, SamplingGradient, SamplingGuidance, SamplingTrace};
pub use settings::GuideSettings;
pub use settings::AUTO_RESOLUTION_MAX;
pub(crate) use start::choose_start;
pub use start::StartChoice;
pub use target::{same_prompt, Target};

pub(crate) const NEGATIVES_FILE: &str = "negatives.txt";
