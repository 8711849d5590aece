//! CLIP: differentiable text and vision towers that load the published transformers checkpoints
//! (openai/clip-vit-base-patch32, -base-patch16, -large-patch14, and openai/shap-e's
//! `text_encoder/`), their tokenizer, differentiable preprocessing and the guidance scorer.
//!
//! Reference: transformers `src/transformers/models/clip/` (`modeling_clip.py`,
//! `configuration_clip.py`, `tokenization_clip.py`); OpenAI's <https://github.com/openai/CLIP>.
//!
//! - [`config`]: `config.json` (full and text-only forms), [`tokenizer`]: prompts → ids,
//! - [`transformer`]: the encoder both towers share, [`text`] and [`vision`]: the towers,
//! - [`model`]: both towers, [`mod@preprocess`]: images → pixels, [`scorer`]: embeddings and cosines,
//! - [`load`]: directory → validated model, [`mod@describe`]: its summary, [`error`]: the boundary errors.

pub(crate) mod config;
pub(crate) mod describe;
pub(crate) mod error;
pub(crate) mod fused;
pub(crate) mod load;
pub(crate) mod model;
pub(crate) mod preprocess;
pub mod scorer;
pub(crate) mod text;
pub mod tokenizer;
pub(crate) mod transformer;
pub(crate) mod vision;

pub use config::ClipVisionConfig;
pub use config::{ClipConfig, ClipTextConfig};
pub use describe::describe;
pub use error::TokenizeError;
pub(crate) use load::load_text_with_projection;
pub use model::ClipModel;
pub use preprocess::preprocess;
pub use scorer::ClipScorer;
pub use text::ClipTextModelWithProjection;
pub use tokenizer::{ClipTokenizer, Tokens};
pub use vision::ClipVisionModelWithProjection;
