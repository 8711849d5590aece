//! The exported mesh scored like the renders: the held-aside views of the mesh, drawn by the mesh
//! preview rasteriser, scored by the same CLIP term. Where the NeRF views and these disagree, the
//! mesh lost (or gained) what the renders had.
//!
//! The rasteriser is orthographic, so the views match the held-aside cameras as closely as it
//! allows: the same azimuths and elevation, the same backgrounds, unlit colours (the NeRF renders
//! emitted colour, no light), and the square the perspective cameras see at the origin's distance
//! (half-width `4·tan(0.35)`) framed around the origin. No anti-aliasing; perspective is lost.

use candle_core::{Device, Result, Tensor};
use image::Rgb;

use super::held_aside::{
    held_aside_azimuth, score_images, Score, HELD_ASIDE_BACKGROUNDS, HELD_ASIDE_ELEVATION,
    HELD_ASIDE_FOV, HELD_ASIDE_RADIUS,
};
use super::target::Target;
use crate::clip::ClipScorer;
use crate::mesh::raster::{render_framed, Frame, View};
use crate::mesh::Mesh;

/// The four held-aside views of `mesh` (field coordinates), `(4, 3, side, side)` in [0, 1] on `device`.
pub fn mesh_images(mesh: &Mesh, side: usize, device: &Device) -> Result<Tensor> {
    let half_width = HELD_ASIDE_RADIUS * (HELD_ASIDE_FOV / 2.0).tan();
    let mut values = Vec::with_capacity(4 * 3 * side * side);
    for (i, bg) in HELD_ASIDE_BACKGROUNDS.iter().enumerate() {
        let frame = Frame {
            centre: [0.0; 3],
            half_width,
            background: Rgb(bg.map(|c| (c * 255.0).round() as u8)),
            lit: false,
        };
        // The rasteriser turns the other way about +Z: its azimuth −a is the camera's a.
        let view = View {
            azimuth: -held_aside_azimuth(i),
            elevation: HELD_ASIDE_ELEVATION,
        };
        let img = render_framed(mesh, view, side as u32, &frame);
        for c in 0..3 {
            values.extend(img.pixels().map(|p| f32::from(p.0[c]) / 255.0));
        }
    }
    Tensor::from_vec(values, (4, 3, side, side), device)
}

/// The held-aside score of `mesh`'s views ([`mesh_images`]) under `target`.
pub fn score_mesh(
    mesh: &Mesh,
    scorer: &ClipScorer,
    target: &Target,
    side: usize,
    device: &Device,
) -> Result<Score> {
    let images = mesh_images(mesh, side, device)?;
    score_images(scorer, target, &images)
}
