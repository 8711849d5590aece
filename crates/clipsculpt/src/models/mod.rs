//! Model specs and where their files come from: the embedded toy model (carried inside the binary,
//! [`embedded`]), a Hugging Face hub id (downloaded through hf-hub into the standard cache,
//! `HF_HUB_OFFLINE` honoured), or a local directory. Loading the tensors themselves belongs to
//! [`crate::weights`] and each architecture's module.

mod embedded;
mod hub;
mod layout;
mod spec;

pub use embedded::toy_tokenizer_json;
pub use hub::{fetch_files, HubError, HubOptions};
pub use layout::{resolve, ModelKind, ResolveError};
pub use spec::ModelSpec;
