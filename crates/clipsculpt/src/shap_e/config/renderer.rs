//! `ShapERenderer` config (`shap_e_renderer/config.json`).

use serde::{Deserialize, Serialize};

use super::Activation;

fn silu() -> Activation {
    Activation::Silu
}

/// `ShapERenderer` config (diffusers `pipelines/shap_e/renderer.py`).
///
/// <https://huggingface.co/openai/shap-e/blob/main/shap_e_renderer/config.json>.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct RendererConfig {
    /// The class that wrote the file; must be `ShapERenderer` when present.
    #[serde(rename = "_class_name", default)]
    pub(crate) class_name: Option<String>,
    /// MLP weights computed from the latent, `nerstf.mlp.{k}.weight`, in latent-row order.
    #[serde(default = "param_names")]
    pub param_names: Vec<String>,
    /// `(out, in)` of each projected weight; `out` latent rows feed each.
    #[serde(default = "param_shapes")]
    pub param_shapes: Vec<(usize, usize)>,
    /// Channels per latent row.
    #[serde(default = "d1024")]
    pub d_latent: usize,
    /// MLP hidden width.
    #[serde(default = "d256")]
    pub d_hidden: usize,
    /// MLP output channels (12: sdf, 2 densities, 3 RGB triples).
    #[serde(default = "d12")]
    pub(crate) n_output: usize,
    /// Hidden layers (the MLP has `n_hidden_layers + 1` linears).
    #[serde(default = "d6")]
    pub n_hidden_layers: usize,
    /// Hidden activation (`"swish"` only).
    #[serde(default = "silu")]
    pub(crate) act_fn: Activation,
    /// Layer whose input gets the (all-zero) direction features.
    #[serde(default = "d4opt")]
    pub(crate) insert_direction_at: Option<usize>,
    /// Background colour in 0..255 (divided by 255 for rendering).
    #[serde(default = "white")]
    pub(crate) background: [f32; 3],
}

fn d6() -> usize {
    6
}
fn d12() -> usize {
    12
}
fn d256() -> usize {
    256
}
fn d1024() -> usize {
    1024
}
fn d4opt() -> Option<usize> {
    Some(4)
}
fn white() -> [f32; 3] {
    [255.0; 3]
}
fn param_names() -> Vec<String> {
    (0..4).map(|k| format!("nerstf.mlp.{k}.weight")).collect()
}
fn param_shapes() -> Vec<(usize, usize)> {
    vec![(256, 93), (256, 256), (256, 256), (256, 256)]
}

/// Width of the NeRF position encoding of a 3-vector with 15 octaves: `3 + 2·3·15`.
pub(crate) const POSENC_DIM: usize = 93;
/// Width of the (always zero) direction encoding with 8 octaves: `3 + 2·3·8`.
pub(crate) const DIRENC_DIM: usize = 51;

impl RendererConfig {
    /// Latent rows consumed by the params projection (`Σ out`).
    pub fn latent_rows(&self) -> usize {
        self.param_shapes.iter().map(|s| s.0).sum()
    }

    /// `(out, in)` of MLP layer `k` as stored in the checkpoint (direction columns included).
    pub fn layer_shape(&self, k: usize) -> (usize, usize) {
        let inp = if k == 0 { POSENC_DIM } else { self.d_hidden };
        let out = if k == self.n_hidden_layers {
            self.n_output
        } else {
            self.d_hidden
        };
        let extra = if self.insert_direction_at == Some(k) {
            DIRENC_DIM
        } else {
            0
        };
        (out, inp + extra)
    }

    /// Background colour in `[0, 1]`.
    pub(crate) fn background_unit(&self) -> [f32; 3] {
        self.background.map(|c| c / 255.0)
    }

    /// Rejects values this port does not implement.
    pub(crate) fn validate(&self) -> Result<(), String> {
        if self.param_names.len() != self.param_shapes.len() {
            return Err(format!(
                "{} param_names but {} param_shapes",
                self.param_names.len(),
                self.param_shapes.len()
            ));
        }
        for (k, (name, shape)) in self.param_names.iter().zip(&self.param_shapes).enumerate() {
            if *name != format!("nerstf.mlp.{k}.weight") {
                return Err(format!(
                    "param_names[{k}] is \"{name}\"; expected \"nerstf.mlp.{k}.weight\" (projected \
                     weights must be the first MLP layers, in order)"
                ));
            }
            if *shape != self.layer_shape(k) {
                return Err(format!(
                    "param_shapes[{k}] is {shape:?}; the MLP layer {k} weight is {:?}",
                    self.layer_shape(k)
                ));
            }
        }
        if self.n_output != 12 {
            return Err(format!(
                "n_output {} is not supported (expected 12: sdf, densities, rgb)",
                self.n_output
            ));
        }
        if self.param_names.len() > self.n_hidden_layers {
            return Err("more projected weights than hidden layers".into());
        }
        if matches!(self.insert_direction_at, Some(k) if k > self.n_hidden_layers) {
            return Err("insert_direction_at is past the last layer".into());
        }
        if self.act_fn != Activation::Silu {
            return Err("act_fn must be \"swish\"".into());
        }
        Ok(())
    }
}
