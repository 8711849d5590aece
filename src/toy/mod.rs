//! The embedded toy world (`docs/toy-world.md`): a procedural world of
//! analytic shapes × colours with captions, the toy CLIP's tokenizer, and an evaluator that judges exported meshes
//! against the analytic ground truth, without CLIP.
//!
//! * [`world`]: [`Shape`], [`Colour`], [`WorldObject`] (a [`crate::mesh::Field`]), [`HELD_OUT`];
//! * [`mod@caption`]: "a red cube" and paraphrases, [`parse_caption`];
//! * [`tokenizer`]: [`toy_tokenizer_json`], a CLIP-style BPE `tokenizer.json` covering every caption word;
//! * [`eval`]: [`classify`] a mesh by volumetric IoU against each shape and by mean colour;
//! * [`report`]: [`EvalTable`](report::EvalTable), per-run verdicts with their attribution, per mode and split;
//! * [`fit_decoder`]: the toy decoder and one latent per object, fitted by auto-decoding;
//! * [`fitted`]: a world's fitted latents, by combination;
//! * [`factors`]: the size, yaw and shade factors that structured instance codes weight;
//! * [`render`]: decoder-like volume renders of analytic objects;
//! * [`blend`]: objects between two shapes, the scoring CLIP's hard negatives;
//! * [`train_clip`], [`train_prior`]: contrastive CLIP and diffusion prior training;
//! * [`random`]: random-weight model folders in the loaders' layout (tests, benches, training);
//! * [`accuracy`]: `clipsculpt eval`, accuracy per guidance mode over prompts and seeds;
//! * [`train`]: `train-toy`, all three stages from one seed into `assets/toy`;
//! * [`probe`]: the research probes behind `cargo bench --bench diagnose` / `guide_probe`.
//!
//! Public, for the integration tests and the benches: the world's objects ([`Shape`],
//! [`Colour`], [`WorldObject`]), random-weight models ([`random`]) and the probes ([`probe`]);
//! the evaluator, captions, renders, training and the `eval` report are crate-internal.

pub(crate) mod accuracy;
pub(crate) mod blend;
pub(crate) mod caption;
pub(crate) mod eval;
pub(crate) mod factors;
pub(crate) mod fit_decoder;
pub(crate) mod fitted;
pub mod probe;
pub mod random;
pub(crate) mod records;
pub(crate) mod render;
pub(crate) mod report;
pub(crate) mod split;
pub(crate) mod tokenizer;
pub(crate) mod train;
pub(crate) mod train_clip;
pub(crate) mod train_prior;
mod voxel;
pub(crate) mod world;

pub(crate) use accuracy::{evaluate, EvalMode, EvalPlan};
pub(crate) use caption::{caption, parse_caption};
pub(crate) use eval::classify;
pub(crate) use report::EvalTable;
pub(crate) use tokenizer::toy_tokenizer_json;
pub(crate) use world::{is_held_out, HELD_OUT};
pub use world::{Colour, Shape, WorldObject};
