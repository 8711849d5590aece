//! Model specs and where their files come from: the embedded toy model, a Hugging Face hub id
//! (downloaded through hf-hub into the standard cache, `HF_HUB_OFFLINE` honoured), or a local
//! directory. Loading the tensors themselves belongs to [`crate::weights`] and each architecture's
//! module; random-weight model folders are written by the toy world.

mod hub;
mod layout;
mod spec;

pub(crate) use hub::HubOptions;
pub(crate) use layout::{resolve, ModelKind};
pub(crate) use spec::ModelSpec;
