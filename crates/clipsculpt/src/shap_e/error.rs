//! Errors at the Shap-E loading boundary: configs, weight files and latents share one
//! [`LoadError`] with every other loader ([`crate::weights`]).

pub(crate) use crate::weights::LoadError;
