//! The lab's subcommands, one file each; shared arguments in [`args`], the device and model
//! loading in [`context`], progress bars in [`progress`].

pub(crate) mod args;
pub(crate) mod context;
pub(crate) mod eval;
pub(crate) mod progress;
pub(crate) mod random_models;
pub(crate) mod train_toy;
