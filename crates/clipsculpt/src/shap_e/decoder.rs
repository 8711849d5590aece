//! The latent decoder (`shap_e_renderer/` or legacy `renderer/`): params projection + NeRSTF MLP,
//! and the component loaders. Rendering is in [`crate::render`]; this file knows only fields.

use std::path::Path;
use std::sync::Arc;

use candle_core::{DType, Device, Result, Tensor};
use candle_nn::VarBuilder;

use super::config::{read_config, PriorConfig, RendererConfig};
use super::error::LoadError;
use super::fused_mlp::{Fused, FusedMlp, FIELD_HEADS};
use super::nerstf::{self, NerstfMlp};
use super::params_proj::ParamsProj;
use super::prior::PriorTransformer;
use crate::weights::files::{DECODER_DIRS, DIFFUSERS_WEIGHTS};
use crate::weights::{find_weights, Loaded, WeightFile};

/// Points per MLP call in graph-free field queries composed from candle ops.
const QUERY_CHUNK: usize = 4096;

/// Params projection and NeRSTF MLP with their config.
#[derive(Debug, Clone)]
pub struct Decoder {
    params_proj: ParamsProj,
    mlp: NerstfMlp,
    cfg: RendererConfig,
}

impl Decoder {
    /// Builds the decoder from weights under `vb` (`params_proj.*`, `mlp.*`). `void.background`,
    /// `mesh_decoder.*` and the placeholder `mlp.mlp.{0..3}.weight` are deliberately not read.
    pub fn new(vb: VarBuilder, cfg: &RendererConfig) -> Result<Self> {
        cfg.validate().map_err(candle_core::Error::Msg)?;
        Ok(Self {
            params_proj: ParamsProj::new(vb.pp("params_proj"), cfg)?,
            mlp: NerstfMlp::new(vb.pp("mlp"), cfg)?,
            cfg: cfg.clone(),
        })
    }

    /// Loads `config.json` and the weights of a renderer folder (`shap_e_renderer/` or
    /// `renderer/`), checking every key and shape.
    pub(crate) fn load(
        dir: &Path,
        dtype: DType,
        device: &Device,
    ) -> std::result::Result<Loaded<Self>, LoadError> {
        let cfg: RendererConfig = read_config(&dir.join("config.json"))?;
        let weights = find_weights(dir, &DIFFUSERS_WEIGHTS)?;
        Self::load_file(&cfg, &weights, dtype, device)
    }

    /// Loads the decoder of a Shap-E folder `root`: the first of its renderer folders
    /// ([`DECODER_DIRS`]) that holds weights; nothing else of the folder is read.
    pub fn load_in(
        root: &Path,
        dtype: DType,
        device: &Device,
    ) -> std::result::Result<Self, LoadError> {
        let mut last_err = None;
        for d in DECODER_DIRS {
            let dir = root.join(d);
            match find_weights(&dir, &DIFFUSERS_WEIGHTS) {
                Ok(_) => return Ok(Self::load(&dir, dtype, device)?.model),
                Err(e) => last_err = Some(e),
            }
        }
        Err(last_err.unwrap_or(LoadError::MissingWeights {
            dir: root.to_path_buf(),
            tried: DECODER_DIRS.iter().map(|s| s.to_string()).collect(),
        }))
    }

    /// Loads the decoder for `cfg` from one weight file.
    pub(crate) fn load_file(
        cfg: &RendererConfig,
        weights: &Path,
        dtype: DType,
        device: &Device,
    ) -> std::result::Result<Loaded<Self>, LoadError> {
        WeightFile::open(weights)?.build(dtype, device, |vb| Self::new(vb, cfg))
    }

    /// The config.
    pub(crate) fn config(&self) -> &RendererConfig {
        &self.cfg
    }

    /// The MLP (static part).
    pub(crate) fn mlp(&self) -> &NerstfMlp {
        &self.mlp
    }

    /// The latent-derived MLP weights, one `(B, out, in)` per projected layer, for
    /// `latent (B, rows, d_latent)`; a `(B, rows·d_latent)` latent is reshaped first.
    pub fn mlp_weights(&self, latent: &Tensor) -> Result<Vec<Tensor>> {
        let latent = self.as_rows(latent)?;
        self.params_proj
            .forward(&latent.to_dtype(self.mlp.dtype())?)
    }

    /// Reshapes a flat `(B, rows·d)` latent to `(B, rows, d)`; passes `(B, rows, d)` through.
    pub(crate) fn as_rows(&self, latent: &Tensor) -> Result<Tensor> {
        match latent.rank() {
            3 => Ok(latent.clone()),
            2 => latent.reshape((latent.dim(0)?, self.cfg.latent_rows(), self.cfg.d_latent)),
            _ => candle_core::bail!(
                "latent {:?} must be (B, rows, d) or (B, rows·d)",
                latent.shape()
            ),
        }
    }

    /// Raw MLP outputs `(B, n, 12)` at `points (B, n, 3)` for the latent-derived `weights`.
    pub fn query(&self, weights: &[Tensor], points: &Tensor) -> Result<Tensor> {
        self.mlp
            .forward(weights, &points.to_dtype(self.mlp.dtype())?)
    }

    /// Graph-free field query for mesh extraction (`docs/shap-e.md`, "Mesh extraction"): `latent` `(1, rows, d)` or
    /// `(rows, d)`, `points (n, 3)` → `sdf (n)` (`tanh` of channel 0, **positive inside**) and
    /// STF colour `rgb (n, 3)` in `[0, 1]` (sRGB, before any linearisation). Inputs are detached,
    /// so no graph is built even for a `Var` latent. For many queries of one latent, prepare it
    /// once with [`Decoder::field`].
    pub fn query_field(&self, latent: &Tensor, points: &Tensor) -> Result<(Tensor, Tensor)> {
        self.field(latent)?.query(points)
    }

    /// Prepares graph-free field queries of one latent (`(1, rows, d)` or `(rows, d)`): the
    /// latent-derived MLP weights are computed once, and on the CPU the fused MLP
    /// ([`super::fused_mlp`]) is set up when it applies.
    pub(crate) fn field(&self, latent: &Tensor) -> Result<FieldQuery<'_>> {
        let latent = latent.detach();
        let latent = if latent.rank() == 2 && latent.dim(0)? == self.cfg.latent_rows() {
            latent.unsqueeze(0)?
        } else {
            latent
        };
        if latent.dim(0)? != 1 {
            candle_core::bail!("query_field takes one latent, got {:?}", latent.shape());
        }
        let weights = self.mlp_weights(&latent)?;
        let fused = match Fused::of(&self.mlp, &FIELD_HEADS, latent.device())? {
            Some(Fused::F32(m)) => {
                let proj = m.projected(&weights)?;
                Some(FusedField::F32(m, proj))
            }
            Some(Fused::F64(m)) => {
                let proj = m.projected(&weights)?;
                Some(FusedField::F64(m, proj))
            }
            None => None,
        };
        Ok(FieldQuery {
            decoder: self,
            weights,
            fused,
        })
    }
}

/// The fused MLP of a field query with its projected weights as plain arrays.
enum FusedField {
    F32(Arc<FusedMlp<f32>>, Vec<Vec<f32>>),
    F64(Arc<FusedMlp<f64>>, Vec<Vec<f64>>),
}

/// Rows of the colour output: `n`, or none when colours were not asked for.
fn rgb_rows(colours: bool, n: usize) -> usize {
    if colours {
        n
    } else {
        0
    }
}

/// One latent's field, prepared for graph-free queries ([`Decoder::field`]).
pub(crate) struct FieldQuery<'a> {
    decoder: &'a Decoder,
    weights: Vec<Tensor>,
    fused: Option<FusedField>,
}

impl FieldQuery<'_> {
    /// Whether queries run on the fused CPU MLP (else on candle ops).
    #[cfg(test)]
    pub(crate) fn is_fused(&self) -> bool {
        self.fused.is_some()
    }

    /// `points (n, 3)` → `sdf (n)` and sRGB `rgb (n, 3)`, as [`Decoder::query_field`].
    pub(crate) fn query(&self, points: &Tensor) -> Result<(Tensor, Tensor)> {
        let (sdf, rgb) = self.run(points, true)?;
        match rgb {
            Some(rgb) => Ok((sdf, rgb)),
            None => candle_core::bail!("field query returned no colours (bug)"),
        }
    }

    /// The signed distance alone, `points (n, 3)` → `sdf (n)` (what grid sampling needs).
    pub(crate) fn query_sdf(&self, points: &Tensor) -> Result<Tensor> {
        Ok(self.run(points, false)?.0)
    }

    fn run(&self, points: &Tensor, colours: bool) -> Result<(Tensor, Option<Tensor>)> {
        let points = points.detach();
        let (n, c) = points.dims2()?;
        if c != 3 {
            candle_core::bail!("query_field takes points (n, 3), got {:?}", points.shape());
        }
        let dev = points.device();
        let (sdf, rgb) = match &self.fused {
            Some(FusedField::F32(m, proj)) => {
                let p = points
                    .to_dtype(DType::F32)?
                    .flatten_all()?
                    .to_vec1::<f32>()?;
                let (sdf, rgb) = m.field(proj, &p, colours)?;
                (
                    Tensor::from_vec(sdf, n, dev)?,
                    Tensor::from_vec(rgb, (rgb_rows(colours, n), 3), dev)?,
                )
            }
            Some(FusedField::F64(m, proj)) => {
                let p = points
                    .to_dtype(DType::F64)?
                    .flatten_all()?
                    .to_vec1::<f64>()?;
                let (sdf, rgb) = m.field(proj, &p, colours)?;
                (
                    Tensor::from_vec(sdf, n, dev)?,
                    Tensor::from_vec(rgb, (rgb_rows(colours, n), 3), dev)?,
                )
            }
            None => self.query_composed(&points)?,
        };
        Ok((sdf, colours.then_some(rgb)))
    }

    /// [`FieldQuery::query`] composed from candle ops, in chunks of 4096 points: the path for
    /// other devices and dtypes, and the reference the fused MLP is tested against.
    pub(crate) fn query_composed(&self, points: &Tensor) -> Result<(Tensor, Tensor)> {
        let points = points.detach();
        let n = points.dim(0)?;
        let (mut sdfs, mut rgbs) = (Vec::new(), Vec::new());
        for start in (0..n).step_by(QUERY_CHUNK) {
            let len = QUERY_CHUNK.min(n - start);
            let chunk = points.narrow(0, start, len)?.unsqueeze(0)?;
            let raw = self.decoder.query(&self.weights, &chunk)?;
            sdfs.push(nerstf::sdf(&raw)?.squeeze(0)?);
            rgbs.push(nerstf::stf_rgb(&raw)?.squeeze(0)?);
        }
        if sdfs.is_empty() {
            let dt = self.decoder.mlp.dtype();
            return Ok((
                Tensor::zeros(0, dt, points.device())?,
                Tensor::zeros((0, 3), dt, points.device())?,
            ));
        }
        Ok((Tensor::cat(&sdfs, 0)?, Tensor::cat(&rgbs, 0)?))
    }
}

/// Loads `config.json` and the weights of a prior folder (`prior/`), checking every key and shape.
/// `clip_mean`/`clip_std` are reported in [`Loaded::unused`] (unused by the pipeline).
pub(crate) fn load_prior(
    dir: &Path,
    dtype: DType,
    device: &Device,
) -> std::result::Result<Loaded<PriorTransformer>, LoadError> {
    let cfg: PriorConfig = read_config(&dir.join("config.json"))?;
    let weights = find_weights(dir, &DIFFUSERS_WEIGHTS)?;
    WeightFile::open(&weights)?.build(dtype, device, |vb| PriorTransformer::new(vb, &cfg))
}
