//! CLIP guidance, one concept per file: guided sampling through the prior ([`sampling`]); the
//! latent optimization's settings ([`settings`]), the
//! held-aside evaluation ([`held_aside`]), the per-step view loss ([`objective`]), the Adam loop
//! ([`optimize`]), exploration and the start choice ([`explore`], [`start`], [`analogy`]), the
//! augmentations ([`augment`]), the learning-rate schedule ([`schedule`]) and the prompt's CLIP
//! term ([`target`]).

pub(crate) mod analogy;
pub(crate) mod augment;
pub(crate) mod error;
pub(crate) mod explore;
pub(crate) mod held_aside;
pub(crate) mod mode;
pub mod objective;
pub(crate) mod optimize;
pub(crate) mod sampling;
pub(crate) mod schedule;
pub(crate) mod settings;
pub mod start;
pub(crate) mod target;

pub use analogy::{completions as analogy_completions, MAX_WORK as ANALOGY_MAX_WORK};
pub use explore::Explore;
pub use held_aside::{
    held_aside_cameras, held_aside_images, score, unscored, Score, Start, HELD_ASIDE_BACKGROUNDS,
};
pub use mode::GuideMode;
pub use objective::{LossParts, ViewLoss};
pub(crate) use optimize::optimize;
pub use optimize::GuideTrace;
pub use sampling::{guided_sample, GuidedStep, LatentLoss, SamplingGuidance, SamplingTrace};
pub use settings::{GuideSettings, AUTO_RESOLUTION_MAX, AUTO_RESOLUTION_MIN, KEEP_MARGIN};
pub use start::{choose_start, ChosenStart, StartChoice};
pub use target::{same_prompt, Target};

/// A file of negative prompts beside a scoring CLIP's weights (one per line): when present,
/// guidance contrasts the prompt against them. The toy world ships none.
pub(crate) const NEGATIVES_FILE: &str = "negatives.txt";
