//! A latent's mesh: the decoder's field as a [`Field`] for the mesh stage, and the coloured mesh
//! extracted from it.

use anyhow::Result;
use candle_core::{Device, Tensor};

use crate::mesh::{self, Field};
use crate::shap_e::{Decoder, FieldQuery};

/// The decoder's SDF and colour as a mesh field (sRGB colours linearised for the writers).
pub struct LatentField<'a> {
    /// The latent's field query, prepared once (no graph).
    query: FieldQuery<'a>,
}

impl<'a> LatentField<'a> {
    /// The field of `latent` (detached) under `decoder`.
    pub fn new(decoder: &'a Decoder, latent: &Tensor) -> candle_core::Result<Self> {
        Ok(Self {
            query: decoder.field(&latent.detach())?,
        })
    }
}

impl Field for LatentField<'_> {
    fn eval(&self, points: &Tensor) -> candle_core::Result<(Tensor, Tensor)> {
        let (sdf, rgb) = self.query.query(points)?;
        Ok((sdf, mesh::colour::srgb_to_linear_tensor(&rgb)?))
    }

    fn eval_scalar(&self, points: &Tensor) -> candle_core::Result<Tensor> {
        self.query.query_sdf(points)
    }
}

/// The coloured mesh of a plain latent (no graph): grid sampling, marching cubes and vertex
/// colours, as the export does.
pub fn extract_mesh(
    decoder: &Decoder,
    latent: &Tensor,
    grid: usize,
    device: &Device,
) -> Result<mesh::Mesh> {
    let field = LatentField::new(decoder, latent)?;
    let g = mesh::sample_grid(&field, device, grid, mesh::Bounds::SHAP_E, 4096)?;
    let mut m = mesh::marching_cubes(&g, &mesh::McOptions::default())?;
    m.colours = mesh::sample_colours(&field, device, &m.positions, 4096)?;
    Ok(m)
}
