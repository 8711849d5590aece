//! CLIP-guided latent optimization: augmentations of rendered views, the loss terms and the
//! learning-rate schedule. The optimization loop itself composes these with the decoder/renderer
//! and the scoring CLIP.

pub mod analogy;
pub mod augment;
pub mod explore;
pub mod optimize;
pub mod sampling;
pub mod schedule;
pub mod start;
pub mod target;

pub use explore::Explore;
pub use optimize::{
    held_aside_cameras, held_aside_images, optimize, score, unscored, GuideError, GuideSettings,
    GuideTrace, Score, Start, AUTO_RESOLUTION_MAX, HELD_ASIDE_BACKGROUNDS,
};
pub use sampling::{guided_sample, GuidedStep, LatentLoss, SamplingGuidance, SamplingTrace};
pub use start::{choose_start, StartChoice};
pub use target::{same_prompt, Target};

/// A file of negative prompts beside a scoring CLIP's weights (one per line): when present,
/// guidance contrasts the prompt against them (the toy world ships its caption set).
pub const NEGATIVES_FILE: &str = "negatives.txt";
