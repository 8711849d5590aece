//! CLIP: differentiable text and vision towers that load the published transformers checkpoints
//! (openai/clip-vit-base-patch32, -base-patch16, -large-patch14, and openai/shap-e's
//! `text_encoder/`), their tokenizer, differentiable preprocessing and the guidance scorer.
//!
//! Reference: transformers `src/transformers/models/clip/` (`modeling_clip.py`,
//! `configuration_clip.py`, `tokenization_clip.py`); OpenAI's <https://github.com/openai/CLIP>.
//!
//! - [`config`]: `config.json` (full and text-only forms), [`tokenizer`]: prompts → ids,
//! - [`transformer`]: the encoder both towers share, [`text`] and [`vision`]: the towers,
//! - [`model`]: both towers, [`preprocess`]: images → pixels, [`scorer`]: embeddings and cosines,
//! - [`load`]: directory → validated model, [`describe`]: its summary, [`error`]: the boundary errors.

pub mod config;
pub mod describe;
pub(crate) mod error;
pub(crate) mod fused;
pub mod load;
pub(crate) mod model;
pub mod preprocess;
pub mod scorer;
pub mod text;
pub(crate) mod tokenizer;
pub(crate) mod transformer;
pub mod vision;

pub use config::{Activation, ClipConfig, ClipTextConfig, ClipVisionConfig, ConfigFile};
pub use describe::describe;
pub use error::{LoadError, TokenizeError};
pub use load::{
    load_clip, load_clip_with_dtype, load_text_with_projection,
    load_text_with_projection_with_dtype,
};
pub(crate) use model::ClipModel;
pub use preprocess::{preprocess, OPENAI_MEAN, OPENAI_STD};
pub use scorer::ClipScorer;
pub use text::ClipTextModelWithProjection;
pub use tokenizer::{ClipTokenizer, Tokens};
pub use vision::ClipVisionModelWithProjection;
