//! Weight files, for every architecture: which file names a model folder may hold ([`files`]),
//! opening and validating one (safetensors, read tensor by tensor with positioned reads, or a
//! PyTorch pickle), and building a model on a checking backend that reports every missing,
//! mis-shaped or non-float tensor at once ([`WeightFile::build`] → [`Loaded`]). Errors at this boundary are [`LoadError`].

mod backend;
pub mod digest;
mod error;
pub(crate) mod files;
pub(crate) mod finite;
mod problem;
mod weight_file;

pub(crate) use backend::{count_parameters, Loaded};
pub use error::LoadError;
pub(crate) use files::find_weights;
pub use problem::TensorProblem;
pub use weight_file::WeightFile;
