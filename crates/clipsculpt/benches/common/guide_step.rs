//! One guidance step (render, CLIP, loss, backward to the latent), shared by the `guide` bench
//! and the `guide` stages of the `stages` bench.

use candle_core::{Device, Result, Tensor, Var};
use clipsculpt::autodiff::checkpoint::Policy;
use clipsculpt::autodiff::rng::Rng;
use clipsculpt::clip::{preprocess, ClipVisionModelWithProjection};
use clipsculpt::render::{render_views_with, Camera, RayDraws, RenderSettings};
use clipsculpt::shap_e::Decoder;

/// `x / ‖x‖` along the last dimension (differentiable), as the scorer normalises embeddings.
pub fn normalize(x: &Tensor) -> Result<Tensor> {
    x.broadcast_div(&x.sqr()?.sum_keepdim(candle_core::D::Minus1)?.sqrt()?)
}

/// One guidance step: render `views` orbit views of `res`² rays, composite each over four grey
/// backgrounds, resize to the tower's input, embed, loss −mean cosine, backward to `z`.
#[allow(clippy::too_many_arguments)]
pub fn step(
    decoder: &Decoder,
    (vit, side): (&ClipVisionModelWithProjection, usize),
    text: &Tensor,
    z: &Var,
    (res, views): (usize, usize),
    (n_coarse, n_fine): (usize, usize),
    chunk: Option<usize>,
    dev: &Device,
) -> Result<()> {
    let settings = RenderSettings {
        n_coarse,
        n_fine,
        chunk_rays: chunk,
        background: Some([0.0, 0.0, 0.0]),
    };
    let rays = views * res * res;
    let draws = if n_fine == 0 {
        RayDraws {
            coarse: Tensor::full(0.5f32, (rays, n_coarse), dev)?,
            fine_index: Tensor::zeros((rays, 0), candle_core::DType::F32, dev)?,
            fine_offset: Tensor::zeros((rays, 0), candle_core::DType::F32, dev)?,
        }
    } else {
        RayDraws::draw(&mut Rng::new(5), rays, &settings, dev)?
    };
    let cameras: Vec<Camera> = (0..views)
        .map(|v| Camera::orbit(0.6 + v as f32 * 1.5, 0.5, 4.0, 0.7, res, res))
        .collect();
    let view = render_views_with(decoder, z.as_tensor(), &cameras, &settings, &draws)?;
    let rgb = view.rgb.permute((0, 3, 1, 2))?; // premultiplied over black
    let alpha = view.opacity.unsqueeze(1)?;
    let copies: Vec<Tensor> = [0.0, 0.33, 0.66, 1.0]
        .iter()
        .map(|&g| rgb.broadcast_add(&(alpha.affine(-1.0, 1.0)? * g)?))
        .collect::<Result<_>>()?;
    let pixels = preprocess(&Tensor::cat(&copies, 0)?, side)?;
    let policy = if chunk.is_some() {
        Policy::BLOCKS
    } else {
        Policy::None
    };
    let (_, emb) = vit.forward(&pixels, &policy)?;
    let loss = normalize(&emb)?.matmul(&text.t()?)?.mean_all()?.neg()?;
    let grads = loss.backward()?;
    if grads.get(z).is_none() {
        candle_core::bail!("the gradient did not reach the latent");
    }
    Ok(())
}
