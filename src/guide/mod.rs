//! CLIP guidance, one concept per file: guided sampling through the prior ([`sampling`]); the
//! latent optimization's settings ([`settings`]), the
//! held-aside evaluation ([`held_aside`]), the per-step view loss ([`objective`]), the Adam loop
//! ([`optimize`]), exploration and the start choice ([`explore`], [`start`], [`analogy`]), the
//! augmentations ([`augment`]), the learning-rate schedule ([`schedule`]) and the prompt's CLIP
//! term ([`target`]).

pub mod analogy;
pub mod augment;
pub mod error;
pub mod explore;
pub mod held_aside;
pub mod mode;
pub mod objective;
pub mod optimize;
pub mod sampling;
pub mod schedule;
pub mod settings;
pub mod start;
pub mod target;

pub use error::GuideError;
pub use explore::Explore;
pub use held_aside::{
    held_aside_cameras, held_aside_images, score, unscored, Score, Start, HELD_ASIDE_BACKGROUNDS,
};
pub use mode::GuideMode;
pub use objective::{LossParts, ViewLoss};
pub use optimize::{optimize, GuideTrace, Optimized};
pub use sampling::{guided_sample, GuidedStep, LatentLoss, SamplingGuidance, SamplingTrace};
pub use settings::{GuideSettings, AUTO_RESOLUTION_MAX, AUTO_RESOLUTION_MIN, KEEP_MARGIN};
pub use start::{choose_start, ChosenStart, StartChoice};
pub use target::{same_prompt, Target};

/// A file of negative prompts beside a scoring CLIP's weights (one per line): when present,
/// guidance contrasts the prompt against them. The toy world ships none.
pub const NEGATIVES_FILE: &str = "negatives.txt";
