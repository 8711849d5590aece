//! The held-aside evaluation: four fixed cameras, ray draws and backgrounds that the optimization
//! never renders, scored by the CLIP term without a graph. It decides which latent is kept
//! ([`super::optimize()`]) and which candidate starts ([`super::start`]).

use candle_core::{Result, Tensor};

use super::target::Target;
use crate::autodiff::checkpoint::Policy;
use crate::autodiff::rng::Rng;
use crate::clip::ClipScorer;
use crate::render::{render_views, Camera, RenderSettings};
use crate::shap_e::Decoder;

/// The held-aside evaluation of a latent.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct Score {
    /// Minus the CLIP term ([`Target::term`]): higher is better; the bare cosine without negatives.
    pub score: f32,
    /// Mean cosine to the prompt.
    pub(crate) cosine: f32,
}

/// A latent to start from, with its held-aside score ([`score`] at
/// [`super::GuideSettings::eval_side`]) when the caller already has it: the score is a
/// deterministic function of the latent, so it is not rendered again.
#[derive(Debug, Clone, Copy)]
pub struct Start<'a> {
    /// The latent `(1, rows, d)`.
    pub latent: &'a Tensor,
    /// Its held-aside score, if known.
    pub score: Option<f32>,
}

/// `latent` as a [`Start`] whose score is not known yet.
pub fn unscored(latent: &Tensor) -> Start<'_> {
    Start {
        latent,
        score: None,
    }
}

/// Backgrounds of the four held-aside views: mid-grey, white, mid-grey, black, so that an object
/// of any colour stands out on at least three of them. One background for all views fails for
/// objects of its colour: on white, the toy world's scoring CLIP recognised ground-truth renders
/// less often (80.9 % against 94.1 % top-1 on grey) and the start choice mistook white spheres and
/// cubes; on grey, an untrained decoder's mid-grey colours vanish.
pub(crate) const HELD_ASIDE_BACKGROUNDS: [[f32; 3]; 4] = [[0.5; 3], [1.0; 3], [0.5; 3], [0.0; 3]];

/// Seed of the held-aside views' ray draws (fixed, so every evaluation sees the same views).
const HELD_ASIDE_SEED: u64 = 0x0005_c04e;

/// The held-aside images `(4, 3, resolution, resolution)` of `latent` (differentiable when it is a
/// `Var`): the four [`held_aside_cameras`] with fixed ray draws, each over its
/// [`HELD_ASIDE_BACKGROUNDS`] entry.
pub fn held_aside_images(decoder: &Decoder, latent: &Tensor, resolution: usize) -> Result<Tensor> {
    let cams = held_aside_cameras(resolution);
    let settings = RenderSettings {
        n_coarse: 32,
        n_fine: 32,
        chunk_rays: Some(4096),
        background: Some([0.0; 3]),
    };
    let views = render_views(
        decoder,
        latent,
        &cams,
        &settings,
        &mut Rng::new(HELD_ASIDE_SEED),
    )?;
    // Over black the colour is premultiplied; add each view's background where light passes.
    let backgrounds = Tensor::new(&HELD_ASIDE_BACKGROUNDS, latent.device())?
        .to_dtype(views.rgb.dtype())?
        .reshape((cams.len(), 1, 1, 3))?;
    let through = (1.0 - views.opacity)?.unsqueeze(3)?;
    let rgb = (views.rgb + through.broadcast_mul(&backgrounds)?)?;
    rgb.permute((0, 3, 1, 2))?.contiguous()
}

/// The held-aside evaluation of `latent` (no graph): [`held_aside_images`] scored by `target`.
pub fn score(
    decoder: &Decoder,
    scorer: &ClipScorer,
    target: &Target,
    latent: &Tensor,
    resolution: usize,
) -> Result<Score> {
    let images = held_aside_images(decoder, &latent.detach(), resolution)?;
    score_images(scorer, target, &images)
}

/// The score of `images` `(n, 3, side, side)` under `target` (no graph).
pub(crate) fn score_images(scorer: &ClipScorer, target: &Target, images: &Tensor) -> Result<Score> {
    let emb = scorer.embed_images(images, &Policy::None)?;
    let term = target.term(&emb)?;
    Ok(Score {
        score: -term.loss.to_scalar::<f32>()?,
        cosine: term.cosine.to_scalar::<f32>()?,
    })
}

/// Azimuth of held-aside view `i` (radians, [`Camera::orbit`]'s convention).
pub(crate) fn held_aside_azimuth(i: usize) -> f32 {
    i as f32 * std::f32::consts::FRAC_PI_2 + 0.3
}

/// Elevation of the held-aside views (30°).
pub(crate) const HELD_ASIDE_ELEVATION: f32 = 30.0 * std::f32::consts::PI / 180.0;
/// Distance of the held-aside cameras from the origin.
pub(crate) const HELD_ASIDE_RADIUS: f32 = 4.0;
/// Field of view of the held-aside cameras (radians).
pub(crate) const HELD_ASIDE_FOV: f32 = 0.7;

/// The four held-aside cameras: azimuths 90° apart (offset 0.3 rad), 30° elevation, `side` pixels.
pub(crate) fn held_aside_cameras(side: usize) -> Vec<Camera> {
    (0..4)
        .map(|i| {
            Camera::orbit(
                held_aside_azimuth(i),
                HELD_ASIDE_ELEVATION,
                HELD_ASIDE_RADIUS,
                HELD_ASIDE_FOV,
                side,
                side,
            )
        })
        .collect()
}
