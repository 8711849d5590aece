//! Tests of the crate's internals that reach across modules: they load fixtures and random-weight
//! models (`crate::random`) and check the internals of Shap-E, CLIP, rendering, mixed
//! precision, mesh extraction and the toy world against references. They were integration tests
//! (`tests/`) until those internals became `pub(crate)`; the integration tests now drive only the
//! binary and the public API. This module sits on the top layer (`tests/layers.rs`).

mod asset_table;
mod clip;
mod common;
mod mesh;
mod pipeline;
mod precision;
mod prior_grad;
mod sampler_chain;
mod scan_cost;
mod shap_e;
