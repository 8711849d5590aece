//! The embedded toy world (README, "The toy world"): a procedural world of
//! analytic shapes × colours with captions, the toy CLIP's tokenizer, and an evaluator that judges exported meshes
//! against the analytic ground truth, without CLIP.
//!
//! * [`world`]: [`Shape`], [`Colour`], [`WorldObject`] (a [`crate::mesh::Field`]), [`HELD_OUT`];
//! * [`caption`]: "a red cube" and paraphrases, [`parse_caption`];
//! * [`tokenizer`]: [`toy_tokenizer_json`], a CLIP-style BPE `tokenizer.json` covering every caption word;
//! * [`eval`]: [`classify`] a mesh by volumetric IoU against each shape and by mean colour;
//! * [`report`]: [`EvalTable`], per-run verdicts with their attribution, per mode and split;
//! * [`fit_decoder`]: the toy decoder and one latent per object, fitted by auto-decoding;
//! * [`render`]: decoder-like volume renders of analytic objects;
//! * [`train_clip`], [`train_prior`]: contrastive CLIP and diffusion prior training;
//! * [`random`]: random-weight model folders in the loaders' layout (tests, benches, training);
//! * [`accuracy`]: `clipsculpt eval`, accuracy per guidance mode over prompts and seeds;
//! * [`train`]: `train-toy`, all three stages from one seed into `assets/toy`.

pub(crate) mod accuracy;
pub mod caption;
pub(crate) mod eval;
pub mod fit_decoder;
pub mod random;
pub mod render;
pub(crate) mod report;
pub mod split;
pub(crate) mod tokenizer;
pub(crate) mod train;
pub(crate) mod train_clip;
pub(crate) mod train_prior;
mod voxel;
pub mod world;

pub use accuracy::{evaluate, EvalMode, EvalPlan};
pub use caption::{caption, captions, parse_caption};
pub use eval::{classify, classify_with, Classification, EvalError, EvalOptions, ShapeScore};
pub use report::{
    wilson, Attribution, EvalRecord, EvalTable, ModeSummary, Share, SplitSummary, UnknownPrompt,
    Verdict,
};
pub(crate) use tokenizer::toy_tokenizer_json;
pub use world::{is_held_out, Colour, Shape, Variation, WorldObject, HELD_OUT, SHAPE_ALIASES};
