//! Shap-E (Jun & Nichol 2023, <https://github.com/openai/shap-e>) in the layout of diffusers
//! (`pipelines/shap_e/`, `models/transformers/prior_transformer.py`): the latent prior
//! ([`prior`]), its Heun/Karras scheduler ([`scheduler`]), sampling loop ([`sampler`]) and its last steps as a
//! differentiable chain ([`sampler_chain`]), and the
//! latent decoder — params projection ([`params_proj`]) and NeRSTF MLP ([`nerstf`]) — bundled as
//! [`Decoder`]. Rendering lives in [`crate::render`]. Notes: `docs/shap-e.md`.

pub mod config;
pub(crate) mod decoder;
pub(crate) mod describe;
pub(crate) mod error;
pub(crate) mod fused_mlp;
pub(crate) mod latent;
pub(crate) mod model;
pub mod nerstf;
pub(crate) mod params_proj;
pub(crate) mod prior;
pub mod sampler;
pub(crate) mod sampler_chain;
pub mod scheduler;

pub use config::{PriorConfig, RendererConfig, SchedulerConfig};
pub use decoder::Decoder;
pub(crate) use decoder::FieldQuery;
pub use describe::describe;
pub use latent::{load_latent, save_latent};
pub use model::ShapE;
pub use model::{SamplingDefaults, SAMPLING_FILE};
pub use prior::PriorTransformer;
pub use sampler::initial_noise;
pub use sampler::Denoiser;
pub use sampler_chain::SamplerChain;
pub use scheduler::HeunDiscreteScheduler;
