//! NeRF volume rendering of Shap-E latents (diffusers `ShapERenderer.render_rays` /
//! `decode_to_image`, `docs/shap-e.md`, "Rendering"): cameras ([`camera`]) → rays clipped to the `[−1, 1]³` volume
//! ([`rays`]) → stratified coarse samples and importance-sampled fine samples ([`samplers`]) →
//! the NeRSTF MLP → compositing over a background ([`composite`]); contact sheets in [`sheet`].
//!
//! Differentiable with respect to the latent. Rays are processed in chunks through
//! [`checkpoint::chunked`]: the forward keeps no per-chunk graph, and backward recomputes one
//! chunk at a time with its slice of the image gradient, so peak memory depends on the chunk size
//! and not on the image size. The coarse pass only places the fine samples and is evaluated
//! without a graph (sample positions are constants, as in the reference); the image is the fine
//! pass. All random draws are made outside the chunks ([`RayDraws`]) and passed in.

pub(crate) mod camera;
pub(crate) mod composite;
pub(crate) mod fused;
pub mod rays;
pub(crate) mod samplers;
pub(crate) mod sheet;

use std::sync::Arc;

use candle_core::{DType, Device, Result, Tensor};

use crate::autodiff::checkpoint;
use crate::autodiff::rng::Rng;
use crate::kernels::Real;
use crate::shap_e::fused_mlp::level_heads;
use crate::shap_e::nerstf::{self, Level, NerstfMlp};
use crate::shap_e::Decoder;
pub use camera::Camera;
use fused::{Fused, Samples};
pub use sheet::{contact_sheet, preview_settings};

/// Rendering options.
#[derive(Debug, Clone, PartialEq)]
pub struct RenderSettings {
    /// Stratified samples per ray (coarse pass).
    pub n_coarse: usize,
    /// Importance samples per ray added for the fine pass.
    pub n_fine: usize,
    /// Rays per checkpointed chunk; `None` renders all rays in one graph (no checkpointing).
    pub chunk_rays: Option<usize>,
    /// Background colour in `[0, 1]`; `None` uses the renderer config's (`background/255`).
    pub background: Option<[f32; 3]>,
}

impl Default for RenderSettings {
    /// Shap-E's 64 + 128 samples, chunks of 4096 rays, the config's background.
    fn default() -> Self {
        Self {
            n_coarse: 64,
            n_fine: 128,
            chunk_rays: Some(4096),
            background: None,
        }
    }
}

/// The uniform draws of a render, one row per ray, all in `[0, 1)`.
#[derive(Debug, Clone)]
pub struct RayDraws {
    /// Stratified jitter `(rays, n_coarse)`.
    pub coarse: Tensor,
    /// Inverse-CDF draws choosing the fine bins `(rays, n_fine)`.
    pub fine_index: Tensor,
    /// Positions within the chosen bins `(rays, n_fine)`.
    pub fine_offset: Tensor,
}

impl RayDraws {
    /// Draws for `rays` rays from `rng` (coarse, then bin choices, then offsets).
    pub fn draw(
        rng: &mut Rng,
        rays: usize,
        settings: &RenderSettings,
        device: &Device,
    ) -> Result<Self> {
        Ok(Self {
            coarse: rng.uniform_tensor(&[rays, settings.n_coarse], device)?,
            fine_index: rng.uniform_tensor(&[rays, settings.n_fine], device)?,
            fine_offset: rng.uniform_tensor(&[rays, settings.n_fine], device)?,
        })
    }
}

/// A rendered batch of rays or images.
#[derive(Debug, Clone)]
pub struct Rendered {
    /// Colour in `[0, 1]`, `(…, 3)`.
    pub rgb: Tensor,
    /// Per-ray opacity `1 − T` in `[0, 1]`, `(…)`.
    pub opacity: Tensor,
}

fn rows(t: &Tensor) -> Result<Vec<Vec<f32>>> {
    t.to_dtype(DType::F32)?.to_vec2::<f32>()
}

/// Sample points `o + t·d` for every ray and sample, `(1, r·s, 3)` in `dtype`.
fn points(
    o: &[Vec<f32>],
    d: &[Vec<f32>],
    ts: &[Vec<f32>],
    dtype: DType,
    dev: &Device,
) -> Result<Tensor> {
    let s = ts.first().map_or(0, |t| t.len());
    let mut v = Vec::with_capacity(o.len() * s * 3);
    for ((o, d), ts) in o.iter().zip(d).zip(ts) {
        for &t in ts {
            v.extend((0..3).map(|i| o[i] + t * d[i]));
        }
    }
    Tensor::from_vec(v, (1, o.len() * s, 3), dev)?.to_dtype(dtype)
}

/// The fused CPU passes of a render, where they apply ([`fused`]).
struct FusedPasses {
    coarse: Option<Fused>,
    fine: Option<Fused>,
}

/// A chunk's sample geometry for the fused pass: points `o + t·d` (computed in f32, as
/// [`points`]) and bin widths of the rays that meet the volume, converted to `T`.
fn fused_samples<T: Real>(
    o: &[Vec<f32>],
    d: &[Vec<f32>],
    ts: &[Vec<f32>],
    delta: &[f32],
    hit: &[f32],
) -> Samples<T> {
    let s = ts.first().map_or(0, |t| t.len());
    let hit: Vec<bool> = hit.iter().map(|&h| h != 0.0).collect();
    let mut points = Vec::with_capacity(o.len() * s * 3);
    let mut widths = Vec::with_capacity(o.len() * s);
    for ((((o, d), ts), delta), _) in o
        .iter()
        .zip(d)
        .zip(ts)
        .zip(delta.chunks_exact(s.max(1)))
        .zip(&hit)
        .filter(|(_, &h)| h)
    {
        for &t in ts {
            points.extend((0..3).map(|i| T::from_f64((o[i] + t * d[i]) as f64)));
        }
        widths.extend(delta.iter().map(|&x| T::from_f64(x as f64)));
    }
    Samples {
        points,
        delta: widths,
        hit,
        per_ray: s,
    }
}

/// One chunk: batched `[origins, dirs, coarse, fine_index, fine_offset]`, shared = the
/// latent-derived MLP weights. Returns `(r, 4)`: RGB and opacity.
fn render_chunk(
    mlp: &NerstfMlp,
    fast: &FusedPasses,
    b: &[Tensor],
    weights: &[Tensor],
    background: [f32; 3],
) -> Result<Tensor> {
    let (o, d) = (rows(&b[0])?, rows(&b[1])?);
    let (cu, fi, fo) = (rows(&b[2])?, rows(&b[3])?, rows(&b[4])?);
    let (r, dtype, dev) = (o.len(), mlp.dtype(), b[0].device().clone());
    let ranges: Vec<rays::RayRange> = o
        .iter()
        .zip(&d)
        .map(|(o, d)| {
            rays::intersect_box(
                [o[0], o[1], o[2]],
                [d[0], d[1], d[2]],
                rays::BBOX_MIN,
                rays::BBOX_MAX,
            )
        })
        .collect();
    let t0: Vec<f32> = ranges.iter().map(|x| x.t0).collect();
    let t1: Vec<f32> = ranges.iter().map(|x| x.t1).collect();
    let hit: Vec<f32> = ranges
        .iter()
        .map(|g| if g.hit { 1.0 } else { 0.0 })
        .collect();
    let deltas = |ts: &[Vec<f32>]| -> Vec<f32> { composite::deltas(&ts.concat(), &t0, &t1) };
    let delta = |ts: &[Vec<f32>]| -> Result<Tensor> {
        let flat = deltas(ts);
        let s = flat.len() / r.max(1);
        Tensor::from_vec(flat, (r, s), &dev)?.to_dtype(dtype)
    };
    // Coarse pass without a graph: it only decides where the fine samples go.
    let coarse: Vec<Vec<f32>> = ranges
        .iter()
        .zip(&cu)
        .map(|(g, u)| samplers::stratified(g.t0, g.t1, u))
        .collect();
    let no_fine = fi.first().is_none_or(|f| f.is_empty());
    let fine: Vec<Vec<f32>> = if no_fine {
        // No importance samples: the stratified samples are the image's samples, and the coarse
        // MLP pass that would only place fine samples is skipped.
        coarse
    } else {
        let frozen: Vec<Tensor> = weights.iter().map(|w| w.detach()).collect();
        let s = coarse[0].len();
        let cw: Vec<f32> = match &fast.coarse {
            Some(Fused::F32(m)) => {
                let samples = fused_samples(&o, &d, &coarse, &deltas(&coarse), &hit);
                fused::coarse_weights(m, &frozen, &samples)?
            }
            Some(Fused::F64(m)) => {
                let samples = fused_samples(&o, &d, &coarse, &deltas(&coarse), &hit);
                let w = fused::coarse_weights(m, &frozen, &samples)?;
                w.into_iter().map(|x| x as f32).collect()
            }
            None => {
                let raw = mlp.forward(&frozen, &points(&o, &d, &coarse, dtype, &dev)?)?;
                let density = nerstf::density(&raw.reshape((r, s, ()))?, Level::Coarse)?;
                let (cw, _) = composite::weights(&delta(&coarse)?, &density)?;
                cw.to_dtype(DType::F32)?.flatten_all()?.to_vec1::<f32>()?
            }
        };
        (0..r)
            .map(|i| {
                let g = &ranges[i];
                let w = &cw[i * s..(i + 1) * s];
                let extra = samplers::importance(g.t0, g.t1, &coarse[i], w, &fi[i], &fo[i]);
                samplers::merge(&extra, &coarse[i])
            })
            .collect()
    };
    // Fine pass with the live weights: this is the image.
    match &fast.fine {
        Some(Fused::F32(m)) => {
            let samples = fused_samples(&o, &d, &fine, &deltas(&fine), &hit);
            return fused::render(m, weights, samples, background, &dev);
        }
        Some(Fused::F64(m)) => {
            let samples = fused_samples(&o, &d, &fine, &deltas(&fine), &hit);
            return fused::render(m, weights, samples, background, &dev);
        }
        None => {}
    }
    let raw = mlp.forward(weights, &points(&o, &d, &fine, dtype, &dev)?)?;
    let raw = raw.reshape((r, fine[0].len(), ()))?;
    let (rgb, _, tr) = composite::integrate(
        &delta(&fine)?,
        &nerstf::density(&raw, Level::Fine)?,
        &nerstf::nerf_rgb(&raw, Level::Fine)?,
    )?;
    let hit = Tensor::from_vec(hit, r, &dev)?.to_dtype(dtype)?;
    let (rgb, tr) = composite::over_background(&rgb, &tr, &hit, background)?;
    Tensor::cat(&[rgb, (1.0 - tr)?.unsqueeze(1)?], 1)
}

/// Renders rays `origins`/`dirs` `(r, 3)` through the MLP with latent-derived `weights` (one
/// `(1, out, in)` tensor per projected layer, see [`Decoder::mlp_weights`]) and injected `draws`.
/// Returns RGB `(r, 3)` and opacity `(r)`.
pub(crate) fn render_rays(
    decoder: &Decoder,
    weights: &[Tensor],
    origins: &Tensor,
    dirs: &Tensor,
    draws: &RayDraws,
    settings: &RenderSettings,
) -> Result<Rendered> {
    if origins.dim(0)? == 0 {
        candle_core::bail!("nothing to render: zero rays");
    }
    if settings.n_coarse < 2 {
        candle_core::bail!(
            "at least 2 coarse samples per ray are needed, got {}",
            settings.n_coarse
        );
    }
    let background = settings
        .background
        .unwrap_or_else(|| decoder.config().background_unit());
    let mlp = decoder.mlp().clone();
    let dev = origins.device();
    let fast = Arc::new(FusedPasses {
        coarse: if settings.n_fine > 0 {
            Fused::of(&mlp, &level_heads(Level::Coarse), dev)?
        } else {
            None
        },
        fine: Fused::of(&mlp, &level_heads(Level::Fine), dev)?,
    });
    let batched = [
        origins.clone(),
        dirs.clone(),
        draws.coarse.clone(),
        draws.fine_index.clone(),
        draws.fine_offset.clone(),
    ];
    let out = match settings.chunk_rays {
        Some(chunk) => checkpoint::chunked(
            &batched,
            weights,
            chunk,
            Arc::new(move |b: &[Tensor], s: &[Tensor]| render_chunk(&mlp, &fast, b, s, background)),
        )?,
        None => render_chunk(&mlp, &fast, &batched, weights, background)?,
    };
    Ok(Rendered {
        rgb: out.narrow(1, 0, 3)?,
        opacity: out.narrow(1, 3, 1)?.squeeze(1)?,
    })
}

/// Renders `cameras` (all of one size) for one `latent` (`(1, rows, d)` or flat; a `Var` gets
/// gradients) with `draws` for all their rays in camera order. RGB `(V, H, W, 3)`, opacity
/// `(V, H, W)`.
pub fn render_views_with(
    decoder: &Decoder,
    latent: &Tensor,
    cameras: &[Camera],
    settings: &RenderSettings,
    draws: &RayDraws,
) -> Result<Rendered> {
    let Some(first) = cameras.first() else {
        candle_core::bail!("render_views needs at least one camera");
    };
    let (h, w) = (first.height, first.width);
    if h == 0 || w == 0 {
        candle_core::bail!("camera size {w}×{h} has no pixels");
    }
    if cameras.iter().any(|c| (c.height, c.width) != (h, w)) {
        candle_core::bail!("all cameras of one render must have the same size");
    }
    let dev = latent.device();
    let (mut os, mut ds) = (Vec::new(), Vec::new());
    for c in cameras {
        let (o, d) = c.rays();
        os.extend(o);
        ds.extend(d);
    }
    let n = cameras.len() * h * w;
    let origins = Tensor::from_vec(os, (n, 3), dev)?;
    let dirs = Tensor::from_vec(ds, (n, 3), dev)?;
    let weights = decoder.mlp_weights(latent)?;
    let out = render_rays(decoder, &weights, &origins, &dirs, draws, settings)?;
    Ok(Rendered {
        rgb: out.rgb.reshape((cameras.len(), h, w, 3))?,
        opacity: out.opacity.reshape((cameras.len(), h, w))?,
    })
}

/// [`render_views_with`] with draws from `rng`.
pub(crate) fn render_views(
    decoder: &Decoder,
    latent: &Tensor,
    cameras: &[Camera],
    settings: &RenderSettings,
    rng: &mut Rng,
) -> Result<Rendered> {
    let n: usize = cameras.iter().map(|c| c.width * c.height).sum();
    let draws = RayDraws::draw(rng, n, settings, latent.device())?;
    render_views_with(decoder, latent, cameras, settings, &draws)
}

impl Decoder {
    /// Renders one view of `latent`: RGB `(H, W, 3)` and opacity `(H, W)`.
    #[cfg(test)]
    pub(crate) fn render(
        &self,
        latent: &Tensor,
        camera: &Camera,
        settings: &RenderSettings,
        rng: &mut Rng,
    ) -> Result<Rendered> {
        let out = render_views(self, latent, std::slice::from_ref(camera), settings, rng)?;
        Ok(Rendered {
            rgb: out.rgb.squeeze(0)?,
            opacity: out.opacity.squeeze(0)?,
        })
    }
}
