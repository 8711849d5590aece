//! Errors at the CLIP boundaries: loading a model directory ([`LoadError`], shared by every
//! loader, from [`crate::weights`]) and tokenizing prompts ([`TokenizeError`]). Model code itself
//! returns `candle_core::Result`.

pub(crate) use crate::weights::LoadError;

/// Why prompts could not be tokenized or embedded.
#[derive(Debug, thiserror::Error)]
pub enum TokenizeError {
    /// The tokenizers crate failed on a prompt.
    #[error("cannot tokenize prompt {prompt:?}: {reason}")]
    Encode {
        /// The prompt.
        prompt: String,
        /// The tokenizer's message.
        reason: String,
    },
    /// Building the id tensor or running the text tower failed.
    #[error(transparent)]
    Candle(#[from] candle_core::Error),
}
