//! The lab (`clipsculpt-lab`): the toy worlds (`lab/docs/toy-world.md`), a procedural world of
//! analytic shapes × colours with captions, the toy CLIP's tokenizer, and an evaluator that judges exported meshes
//! against the analytic ground truth, without CLIP.
//!
//! * [`world`]: [`Shape`], [`Colour`], [`WorldObject`] (a [`clipsculpt::mesh::Field`]), [`HELD_OUT`];
//! * [`mod@caption`]: "a red cube" and paraphrases, [`parse_caption`];
//! * [`tokenizer`]: [`toy_tokenizer_json`], a CLIP-style BPE `tokenizer.json` covering every caption word;
//! * [`eval`]: [`classify`] a mesh by volumetric IoU against each shape and by mean colour;
//! * [`report`]: [`report::EvalTable`], per-run verdicts with their attribution, per mode and split;
//! * [`fit_decoder`]: the toy decoder and one latent per object, fitted by auto-decoding;
//! * [`fitted`]: a world's fitted latents, by combination;
//! * [`guidance`]: a world's frozen guidance settings (`shap_e/guidance.json`);
//! * [`factors`]: the size, yaw and shade factors that structured instance codes weight;
//! * [`render`]: decoder-like volume renders of analytic objects;
//! * [`blend`]: objects between two shapes, the scoring CLIP's hard negatives;
//! * [`distractors`]: uncaptioned shape blends in the prior's unconditional branch;
//! * [`checkpoint`], [`adamw`]: `train-toy --resume`'s checkpoint and resumable AdamW;
//! * [`train_clip`], [`train_prior`]: contrastive CLIP and diffusion prior training;
//! * [`accuracy`]: `clipsculpt-lab eval`, accuracy per guidance mode over prompts and seeds, each run through
//!   the library's `pipeline::run`;
//! * [`train`]: `train-toy`, all three stages from one seed into a world folder;
//! * [`probe`]: the research probes behind `cargo bench --bench diagnose` / `guide_probe`.
//!
//! Public, for the integration tests and the benches: the world's objects ([`Shape`],
//! [`Colour`], [`WorldObject`]), random-weight models (the library's `clipsculpt::random`) and the probes ([`probe`]);
//! the evaluator, captions, renders, training and the `eval` report are crate-internal.

pub mod accuracy;
pub mod adamw;
pub mod blend;
pub mod caption;
pub mod checkpoint;
pub mod distractors;
pub mod eval;
pub mod factors;
pub mod fit_decoder;
pub mod fitted;
pub mod guidance;
pub mod probe;
pub mod records;
pub mod render;
pub mod report;
pub mod split;
pub mod tokenizer;
pub mod train;
pub mod train_clip;
pub mod train_prior;
pub mod voxel;
pub mod world;

pub use accuracy::{evaluate, EvalMode, EvalPlan};
pub use caption::{caption, parse_caption};
pub use eval::classify;
pub use report::EvalTable;
pub use tokenizer::toy_tokenizer_json;
pub use world::{is_held_out, HELD_OUT};
pub use world::{Colour, Shape, WorldObject};

/// Tests of the toy world against the shipped default and guidance on it.
#[cfg(test)]
mod tests_toy;
