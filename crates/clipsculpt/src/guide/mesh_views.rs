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
        let img = render_framed(mesh, None, view, side as u32, &frame);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::grid::{Bounds, Grid};
    use crate::mesh::marching_cubes::{marching_cubes, McOptions};
    use crate::mesh::shapes;

    /// A white sphere of radius 0.25 at `centre`, in field coordinates.
    fn ball(centre: [f32; 3]) -> Mesh {
        let g = Grid::from_fn(48, Bounds::SHAP_E, |p| shapes::sphere(p, centre, 0.25)).unwrap();
        let mut m = marching_cubes(&g, &McOptions::default()).unwrap();
        m.colours = vec![[1.0; 3]; m.positions.len()];
        m
    }

    /// Columns and rows of view `i` where the object (white, on a grey background) shows.
    fn extent(images: &Tensor, i: usize) -> ([usize; 2], [usize; 2]) {
        let v = images
            .get(i)
            .unwrap()
            .get(0)
            .unwrap()
            .to_vec2::<f32>()
            .unwrap();
        let (mut cols, mut rows) = ([usize::MAX, 0], [usize::MAX, 0]);
        for (y, row) in v.iter().enumerate() {
            for (x, &p) in row.iter().enumerate() {
                if p > 0.9 {
                    cols = [cols[0].min(x), cols[1].max(x)];
                    rows = [rows[0].min(y), rows[1].max(y)];
                }
            }
        }
        (cols, rows)
    }

    /// The views frame what the held-aside cameras see at the origin (a ball of radius 0.25 spans
    /// 0.25/1.46 of the half-width) and keep their orientation: +Z is up, and the camera's x axis
    /// (`(cos a, −sin a, 0)` at azimuth a) points right.
    #[test]
    fn mesh_views_match_the_held_aside_cameras() {
        let side = 64;
        let images = mesh_images(&ball([0.0; 3]), side, &Device::Cpu).unwrap();
        assert_eq!(images.dims(), [4, 3, side, side]);
        let (cols, _) = extent(&images, 0);
        let width = (cols[1] - cols[0] + 1) as f32;
        let want = 0.5 / (2.0 * 4.0 * 0.35f32.tan()) * side as f32;
        assert!((width - want).abs() <= 2.0, "{width} vs {want}");
        let (_, rows) = extent(
            &mesh_images(&ball([0.0, 0.0, 0.6]), side, &Device::Cpu).unwrap(),
            2,
        );
        assert!(
            rows[1] < side / 2,
            "a ball above the origin is not in the upper half: {rows:?}"
        );
        let a = held_aside_azimuth(0);
        let right = [0.6 * a.cos(), -0.6 * a.sin(), 0.0];
        let (cols, _) = extent(&mesh_images(&ball(right), side, &Device::Cpu).unwrap(), 0);
        assert!(
            cols[0] > side / 2,
            "the camera's +x is not on the right: {cols:?}"
        );
    }
}
