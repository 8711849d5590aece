//! CLIP-guided latent optimization: augmentations of rendered views, the loss terms and the
//! learning-rate schedule. The optimization loop itself composes these with the decoder/renderer
//! and the scoring CLIP.

pub mod augment;
pub mod optimize;
pub mod schedule;

pub use optimize::{optimize, score, GuideError, GuideSettings, GuideTrace};
