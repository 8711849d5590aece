//! Texture baking (`docs/mesh.md`, "Texture"): every texel a UV triangle covers takes the field's colour at the
//! 3D surface point it maps to, queried without a graph ([`sample_colours`]); texels just outside a chart (within
//! one texel of a triangle) take the colour of the nearest surface point, so bilinear filtering does not pull in
//! the background; the gutter is then dilated outward and the rest of the image filled with the mean colour, so
//! mipmaps do not bleed either. The detail is the texture's, whatever the polycount.

use candle_core::Device;
use image::{Rgb, RgbImage};

use super::colour::srgb_bytes;
use super::error::ExportError;
use super::field::{sample_colours, Field};
use super::mesh::Mesh;

/// Texels a triangle claims beyond its edges (conservative coverage: tiny triangles get texels too).
const EDGE_REACH: f32 = 1.0;
/// Dilation steps into the gutter after baking.
const DILATE: usize = 4;
const NONE: u32 = u32::MAX;

/// Bakes `field`'s colour over `mesh` (in the field's frame) into a `size`² sRGB image addressed by `uvs`.
pub(crate) fn bake(
    field: &dyn Field,
    device: &Device,
    mesh: &Mesh,
    uvs: &[[f32; 2]],
    size: u32,
    chunk: usize,
) -> Result<RgbImage, ExportError> {
    let texels = surface_points(mesh, uvs, size);
    let colours = sample_colours(field, device, &texels.points, chunk)?;
    let mut image = RgbImage::new(size, size);
    let mut filled = vec![false; (size * size) as usize];
    for (&t, c) in texels.index.iter().zip(&colours) {
        image.put_pixel(t % size, t / size, Rgb(srgb_bytes(*c)));
        filled[t as usize] = true;
    }
    dilate(&mut image, &mut filled, DILATE);
    fill_rest(&mut image, &filled);
    Ok(image)
}

/// The texels a mesh covers in UV space and the surface point of each.
pub(crate) struct SurfacePoints {
    /// Flat texel index `y·size + x`.
    pub(crate) index: Vec<u32>,
    /// The 3D point of each.
    pub(crate) points: Vec<[f32; 3]>,
}

/// Texels whose centre lies in a UV triangle (first pass), then texels within [`EDGE_REACH`] of one that no
/// triangle covers (second pass), each with its surface point by barycentric interpolation.
pub(crate) fn surface_points(mesh: &Mesh, uvs: &[[f32; 2]], size: u32) -> SurfacePoints {
    let mut owner = vec![NONE; (size * size) as usize];
    let mut out = SurfacePoints {
        index: Vec::new(),
        points: Vec::new(),
    };
    for reach in [0.0, EDGE_REACH] {
        for t in &mesh.faces {
            let uv = t.map(|i| uvs[i as usize].map(|c| c * size as f32));
            let p = t.map(|i| mesh.positions[i as usize]);
            let lo = [0, 1].map(|a| uv[0][a].min(uv[1][a]).min(uv[2][a]) - reach - 0.5);
            let hi = [0, 1].map(|a| uv[0][a].max(uv[1][a]).max(uv[2][a]) + reach - 0.5);
            let x0 = lo[0].ceil().max(0.0) as u32;
            let y0 = lo[1].ceil().max(0.0) as u32;
            let x1 = (hi[0].floor().max(-1.0) as i64).min(size as i64 - 1);
            let y1 = (hi[1].floor().max(-1.0) as i64).min(size as i64 - 1);
            for y in y0 as i64..=y1 {
                for x in x0 as i64..=x1 {
                    let flat = (y as u32 * size + x as u32) as usize;
                    if owner[flat] != NONE {
                        continue;
                    }
                    let c = [x as f32 + 0.5, y as f32 + 0.5];
                    let (d2, w) = closest(c, uv);
                    if d2 > reach * reach {
                        continue;
                    }
                    owner[flat] = flat as u32;
                    out.index.push(flat as u32);
                    out.points
                        .push([0, 1, 2].map(|a| w[0] * p[0][a] + w[1] * p[1][a] + w[2] * p[2][a]));
                }
            }
        }
    }
    out
}

/// Squared distance from `p` to triangle `t` and the barycentric weights of the nearest point.
fn closest(p: [f32; 2], t: [[f32; 2]; 3]) -> (f32, [f32; 3]) {
    let cross = |a: [f32; 2], b: [f32; 2], c: [f32; 2]| {
        (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])
    };
    let area = cross(t[0], t[1], t[2]);
    if area.abs() > 1e-12 {
        let w = [
            cross(t[1], t[2], p) / area,
            cross(t[2], t[0], p) / area,
            cross(t[0], t[1], p) / area,
        ];
        if w.iter().all(|&x| x >= 0.0) {
            return (0.0, w);
        }
    }
    let mut best = (f32::INFINITY, [1.0, 0.0, 0.0]);
    for (i, j) in [(0, 1), (1, 2), (2, 0)] {
        let d = [t[j][0] - t[i][0], t[j][1] - t[i][1]];
        let len2 = d[0] * d[0] + d[1] * d[1];
        let s = if len2 > 0.0 {
            (((p[0] - t[i][0]) * d[0] + (p[1] - t[i][1]) * d[1]) / len2).clamp(0.0, 1.0)
        } else {
            0.0
        };
        let q = [t[i][0] + s * d[0] - p[0], t[i][1] + s * d[1] - p[1]];
        let d2 = q[0] * q[0] + q[1] * q[1];
        if d2 < best.0 {
            let mut w = [0.0; 3];
            w[i] = 1.0 - s;
            w[j] = s;
            best = (d2, w);
        }
    }
    best
}

/// `steps` rounds of giving each empty texel the mean of its filled 8-neighbours.
fn dilate(image: &mut RgbImage, filled: &mut [bool], steps: usize) {
    let (w, h) = (image.width() as i64, image.height() as i64);
    for _ in 0..steps {
        let mut grown = Vec::new();
        for y in 0..h {
            for x in 0..w {
                if filled[(y * w + x) as usize] {
                    continue;
                }
                let (mut sum, mut n) = ([0u32; 3], 0u32);
                for (dx, dy) in [
                    (-1, -1),
                    (0, -1),
                    (1, -1),
                    (-1, 0),
                    (1, 0),
                    (-1, 1),
                    (0, 1),
                    (1, 1),
                ] {
                    let (u, v) = (x + dx, y + dy);
                    if u >= 0 && v >= 0 && u < w && v < h && filled[(v * w + u) as usize] {
                        let p = image.get_pixel(u as u32, v as u32).0;
                        (0..3).for_each(|k| sum[k] += u32::from(p[k]));
                        n += 1;
                    }
                }
                if n > 0 {
                    grown.push((x as u32, y as u32, sum.map(|s| ((s + n / 2) / n) as u8)));
                }
            }
        }
        if grown.is_empty() {
            break;
        }
        for (x, y, rgb) in grown {
            image.put_pixel(x, y, Rgb(rgb));
            filled[(y as i64 * w + x as i64) as usize] = true;
        }
    }
}

/// Gives every still-empty texel the mean of the filled ones.
fn fill_rest(image: &mut RgbImage, filled: &[bool]) {
    let (mut sum, mut n) = ([0u64; 3], 0u64);
    for (p, _) in image.pixels().zip(filled).filter(|(_, f)| **f) {
        (0..3).for_each(|k| sum[k] += u64::from(p.0[k]));
        n += 1;
    }
    let mean = Rgb(sum.map(|s| s.checked_div(n).unwrap_or(0) as u8));
    for (p, _) in image.pixels_mut().zip(filled).filter(|(_, f)| !**f) {
        *p = mean;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::atlas::unwrap;
    use crate::mesh::colour::srgb_to_linear;
    use crate::mesh::field::FnField;
    use crate::mesh::grid::{Bounds, Grid};
    use crate::mesh::marching_cubes::{marching_cubes, McOptions};
    use crate::mesh::raster::bilinear;
    use crate::mesh::shapes;
    use crate::mesh::simplify::simplify;

    /// Bakes `colour` over a simplified torus and returns the largest difference (linear RGB) between the
    /// texture, sampled bilinearly at interpolated UVs, and the field at the same surface points (7 per face).
    fn worst_error(colour: fn([f32; 3]) -> [f32; 3], size: u32) -> f32 {
        let g = Grid::from_fn(40, Bounds::SHAP_E, |p| shapes::torus(p, 0.55, 0.22)).unwrap();
        let full = marching_cubes(&g, &McOptions::default()).unwrap();
        let (m, _) = simplify(&full, 800).unwrap();
        let (m, uvs) = unwrap(&m, size).unwrap();
        let field = FnField(move |p: [f32; 3]| (0.0, colour(p)));
        let img = bake(&field, &Device::Cpu, &m, &uvs, size, 4096).unwrap();
        let texels: Vec<f32> = img
            .as_raw()
            .iter()
            .map(|&b| srgb_to_linear(f32::from(b) / 255.0))
            .collect();
        let mut worst = 0.0f32;
        for t in &m.faces {
            for w in [
                [1.0, 0.0, 0.0],
                [0.0, 1.0, 0.0],
                [0.0, 0.0, 1.0],
                [0.5, 0.5, 0.0],
                [0.0, 0.5, 0.5],
                [0.5, 0.0, 0.5],
                [1.0 / 3.0; 3],
            ] {
                let lerp = |f: &dyn Fn(u32) -> [f32; 3]| {
                    let [a, b, c] = t.map(f);
                    [0, 1, 2].map(|k| w[0] * a[k] + w[1] * b[k] + w[2] * c[k])
                };
                let p = lerp(&|i| m.positions[i as usize]);
                let uv = lerp(&|i| [uvs[i as usize][0], uvs[i as usize][1], 0.0]);
                let got = bilinear(&texels, size, size, [uv[0], uv[1]]);
                let want = colour(p);
                (0..3).for_each(|k| worst = worst.max((got[k] - want[k]).abs()));
            }
        }
        worst
    }

    #[test]
    fn a_constant_colour_bakes_exactly() {
        let err = worst_error(|_| [0.8, 0.2, 0.05], 64);
        // One 8-bit sRGB step at 0.8 linear is about 0.004.
        assert!(err < 0.006, "{err}");
    }

    /// A colour that varies with position comes back within a texel's worth of the gradient.
    #[test]
    fn a_positional_colour_bakes_within_a_texel() {
        let gradient = |p: [f32; 3]| [(p[0] + 1.0) / 2.0, (p[1] + 1.0) / 2.0, (p[2] + 1.0) / 2.0];
        let err = worst_error(gradient, 256);
        assert!(err < 0.03, "{err}");
    }
}
