//! The per-step differentiable loss of a latent: random views rendered through the checkpointed
//! decoder, composited over random backgrounds and cropped ([`super::augment`]), embedded by the
//! scoring CLIP, plus a transmittance term:
//! `CLIP term − λ_T·min(τ, mean transmittance)` (the CLIP term is [`Target::term`]).
//!
//! [`ViewLoss`] holds no reference latent: the optimizer adds its own pull toward the start, and
//! any other caller (a guided sampler on the prior's `x₀` prediction, for example) can use the
//! view loss of whatever latent it has, graph included.

use candle_core::{Result, Tensor};

use super::augment;
use super::settings::GuideSettings;
use super::target::Target;
use crate::autodiff::rng::Rng;
use crate::clip::ClipScorer;
use crate::render::{render_views, Camera, RenderSettings, Rendered};
use crate::shap_e::Decoder;

/// What the view loss of one latent needs: the decoder that renders it, the scoring CLIP, the
/// prompt (and its negatives) and the settings (views, side, samples, crops, weights).
#[derive(Clone, Copy)]
pub(crate) struct ViewLoss<'a> {
    /// The decoder the views are rendered through (checkpointed per [`GuideSettings::chunk_rays`]).
    pub(crate) decoder: &'a Decoder,
    /// The scoring CLIP.
    pub(crate) scorer: &'a ClipScorer,
    /// The prompt and its negatives.
    pub(crate) target: &'a Target,
    /// Views, render side, samples, chunking, crops and the transmittance weight.
    pub(crate) settings: &'a GuideSettings,
}

/// One evaluation of [`ViewLoss::loss`]: scalars, differentiable where the latent is.
#[derive(Debug, Clone)]
pub(crate) struct LossParts {
    /// The CLIP term ([`Target::term`]) plus the transmittance term
    /// `−λ_T·min(τ, mean transmittance)`: the loss to minimise.
    pub(crate) loss: Tensor,
    /// Mean CLIP cosine of the views to the prompt.
    pub(crate) cosine: Tensor,
}

impl ViewLoss<'_> {
    /// The view loss of `z` `(1, rows, d)` (differentiable with respect to it when it carries a
    /// graph) at `progress` ∈ [0, 1] of the run (it anneals the transmittance target), with the
    /// cameras, ray draws, backgrounds and crops drawn from `rng`.
    pub(crate) fn loss(&self, z: &Tensor, progress: f64, rng: &mut Rng) -> Result<LossParts> {
        let s = self.settings;
        let n = s.render_side(self.scorer.image_size());
        let cameras = random_cameras(s.views, n, rng);
        let settings = RenderSettings {
            n_coarse: s.samples.0,
            n_fine: s.samples.1,
            chunk_rays: s.chunk_rays,
            background: Some([0.0, 0.0, 0.0]),
        };
        let views = render_views(self.decoder, z, &cameras, &settings, rng)?;
        let images = self.augmented(&views, n, rng, z.device())?;
        let emb = self.scorer.embed_images(&images, &s.clip_policy)?;
        let clip = self.target.term(&emb)?;
        // Transmittance target τ anneals 0.5 → 0.88 (DreamFields): rewards empty space up to τ.
        let tau = 0.5 + 0.38 * progress.min(1.0);
        let transmittance = views.opacity.affine(-1.0, 1.0)?.mean_all()?;
        let transmittance = transmittance
            .minimum(tau)?
            .affine(-s.transmittance_weight, 0.0)?;
        Ok(LossParts {
            loss: (&clip.loss + &transmittance)?,
            cosine: clip.cosine,
        })
    }

    /// The rendered views `(V, 3, size, size)` at the scoring CLIP's input size, each over a
    /// random background and randomly cropped.
    fn augmented(
        &self,
        views: &Rendered,
        n: usize,
        rng: &mut Rng,
        dev: &candle_core::Device,
    ) -> Result<Tensor> {
        let s = self.settings;
        let size = self.scorer.image_size();
        let mut images = Vec::with_capacity(s.views);
        for v in 0..s.views {
            let rgb = views.rgb.get(v)?.permute((2, 0, 1))?; // (3, H, W), premultiplied
            let alpha = views.opacity.get(v)?.unsqueeze(0)?;
            let kind = augment::random_background(rng);
            let draw = augment::draw(kind, n, n, s.min_crop, rng, dev)?;
            images.push(augment::apply(&rgb, &alpha, &draw, size)?);
        }
        Tensor::stack(&images, 0)
    }
}

/// `views` orbit cameras of `side` pixels at random azimuths and elevations 15°–45°.
fn random_cameras(views: usize, side: usize, rng: &mut Rng) -> Vec<Camera> {
    (0..views)
        .map(|_| {
            let az = rng.range(0.0, std::f32::consts::TAU);
            let el = rng.range(15f32.to_radians(), 45f32.to_radians());
            Camera::orbit(az, el, 4.0, 0.7, side, side)
        })
        .collect()
}
