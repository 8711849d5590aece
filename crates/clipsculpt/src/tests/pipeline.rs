//! The pipeline's mesh extraction on a random-weight Shap-E decoder (moved from
//! `tests/pipeline.rs`: it reads the decoder's field directly).

use anyhow::Result;
use candle_core::{DType, Device, Tensor};

use crate::autodiff::rng::Rng;
use crate::pipeline::extract_mesh;
use crate::random::{write_random_shap_e, ShapESizes};
use crate::shap_e::ShapE;

/// A Shap-E pipeline small enough to run in a test (as in `tests/pipeline.rs`).
const SIZES: ShapESizes = ShapESizes {
    d_hidden: 8,
    d_latent: 16,
    prior_layers: 1,
    prior_width: None,
    text_width: 16,
};

/// Regression: the extracted mesh carries the decoder's colours (the evaluator once judged every
/// mesh grey because the colours were never sampled).
#[test]
fn extracted_meshes_carry_the_field_colours() -> Result<()> {
    let dir = tempfile::tempdir()?;
    write_random_shap_e(dir.path(), SIZES, 5)?;
    let shap_e = ShapE::load(dir.path(), DType::F32, &Device::Cpu)?;
    let rows = shap_e.decoder.config().latent_rows();
    let z = (Rng::new(1).normal_tensor(&[1, rows, 16], &Device::Cpu)? * 3.0)?;
    let m = extract_mesh(&shap_e.decoder, &z, 24, &Device::Cpu)?;
    assert_eq!(m.colours.len(), m.positions.len());
    let (_, rgb) = shap_e
        .decoder
        .query_field(&z, &Tensor::new(&[m.positions[0]], &Device::Cpu)?)?;
    let srgb = rgb.flatten_all()?.to_vec1::<f32>()?;
    for (c, s) in m.colours[0].iter().zip(srgb) {
        assert!(
            (c - crate::mesh::colour::srgb_to_linear(s)).abs() < 1e-5,
            "{c} vs linear({s})"
        );
    }
    Ok(())
}
