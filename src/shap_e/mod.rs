//! Shap-E (Jun & Nichol 2023, <https://github.com/openai/shap-e>) in the layout of diffusers
//! (`pipelines/shap_e/`, `models/transformers/prior_transformer.py`): the latent prior
//! ([`prior`]), its Heun/Karras scheduler ([`scheduler`]) and sampling loop ([`sampler`]), and the
//! latent decoder — params projection ([`params_proj`]) and NeRSTF MLP ([`nerstf`]) — bundled as
//! [`Decoder`]. Rendering lives in [`crate::render`]. Notes: `docs/shap-e.md`.

pub mod config;
pub mod decoder;
pub mod describe;
pub mod error;
pub mod fused_mlp;
pub mod latent;
pub mod model;
pub mod nerstf;
pub mod params_proj;
pub mod prior;
pub mod sampler;
pub mod scheduler;

pub use config::{PriorConfig, RendererConfig, SchedulerConfig};
pub use decoder::{load_prior, Decoder, FieldQuery};
pub use describe::describe;
pub use error::LoadError;
pub use latent::{load_latent, save_latent};
pub use model::{SamplingDefaults, ShapE, SAMPLING_FILE};
pub use prior::PriorTransformer;
pub use sampler::{condition, initial_noise, sample_latents_from, unconditional, Denoiser};
pub use scheduler::HeunDiscreteScheduler;
