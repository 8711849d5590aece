//! A small CPU z-buffer rasteriser: orthographic turntable views of a [`Mesh`] with Lambert shading and vertex
//! colours (Gouraud: shaded per vertex, interpolated per pixel), or the colours of its [`Texture`] (sampled
//! bilinearly per pixel, times the interpolated shading). For previews only, not for optimisation.

use image::{Rgb, RgbImage};

use super::colour::{linear_to_srgb, srgb_to_linear};
use super::mesh::Mesh;
use super::texture::Texture;

/// Background of preview images (sRGB).
pub(crate) const BACKGROUND: Rgb<u8> = Rgb([235, 235, 240]);

/// A camera orbiting the mesh centre around the field's +Z (up) axis.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct View {
    /// Turntable angle in radians (0: from −Y looking along +Y, Blender's front view).
    pub(crate) azimuth: f32,
    /// Elevation above the horizon in radians.
    pub(crate) elevation: f32,
}

/// What a view shows and how: the point it looks at, the half-width of the scene it frames, the
/// background and whether surfaces are lit.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Frame {
    /// The point at the image centre.
    pub(crate) centre: [f32; 3],
    /// Half the side of the square the image shows, in mesh units.
    pub(crate) half_width: f32,
    /// Background colour (sRGB).
    pub(crate) background: Rgb<u8>,
    /// Lambert shading from the upper left; unlit shows the colours as they are.
    pub(crate) lit: bool,
}

/// Renders `mesh` (coloured by `texture` when given) from `view` into a `size`×`size` image (orthographic, the
/// bounding sphere fills the frame).
pub(crate) fn render(mesh: &Mesh, texture: Option<&Texture>, view: View, size: u32) -> RgbImage {
    if mesh.positions.is_empty() || size == 0 {
        return RgbImage::from_pixel(size, size, BACKGROUND);
    }
    let (lo, hi) = mesh.bounds();
    let centre = [0, 1, 2].map(|a| (lo[a] + hi[a]) * 0.5);
    let radius = mesh
        .positions
        .iter()
        .map(|p| (0..3).map(|a| (p[a] - centre[a]).powi(2)).sum::<f32>())
        .fold(0.0f32, f32::max)
        .sqrt()
        .max(1e-6);
    let frame = Frame {
        centre,
        half_width: radius * 1.05,
        background: BACKGROUND,
        lit: true,
    };
    render_framed(mesh, texture, view, size, &frame)
}

/// Renders `mesh` (coloured by `texture` when given) from `view` into a `size`×`size` image of
/// `frame` (orthographic).
pub(crate) fn render_framed(
    mesh: &Mesh,
    texture: Option<&Texture>,
    view: View,
    size: u32,
    frame: &Frame,
) -> RgbImage {
    let mut img = RgbImage::from_pixel(size, size, frame.background);
    if mesh.positions.is_empty() || size == 0 {
        return img;
    }
    let centre = frame.centre;
    // Camera basis: the camera sits at azimuth 0 on −Y (Blender's front view) and looks at the centre.
    let (sa, ca, se, ce) = (
        view.azimuth.sin(),
        view.azimuth.cos(),
        view.elevation.sin(),
        view.elevation.cos(),
    );
    let forward = [-sa * ce, ca * ce, -se];
    let right = [ca, sa, 0.0];
    let up = cross(right, forward);
    let scale = 0.5 * size as f32 / frame.half_width.max(1e-6);
    let half = size as f32 * 0.5;
    // Light from the upper left of the camera.
    let light = normalize(add(
        add(scale3(up, 0.6), scale3(right, -0.4)),
        scale3(forward, -1.0),
    ));

    let project = |p: [f32; 3]| {
        let d = [p[0] - centre[0], p[1] - centre[1], p[2] - centre[2]];
        [
            half + dot(d, right) * scale,
            half - dot(d, up) * scale,
            dot(d, forward),
        ]
    };
    let screen: Vec<[f32; 3]> = mesh.positions.iter().map(|&p| project(p)).collect();
    // Per vertex: the shaded colour (untextured) or the shading alone (textured, colour per pixel).
    let shade: Vec<[f32; 3]> = mesh
        .normals
        .iter()
        .zip(&mesh.colours)
        .map(|(n, c)| {
            let lambert = if frame.lit {
                0.25 + 0.75 * dot(*n, light).max(0.0)
            } else {
                1.0
            };
            match texture {
                None => c.map(|ch| ch * lambert),
                Some(_) => [lambert; 3],
            }
        })
        .collect();
    let linear_texels: Option<Vec<f32>> = texture.map(|t| {
        t.image
            .as_raw()
            .iter()
            .map(|&b| srgb_to_linear(f32::from(b) / 255.0))
            .collect()
    });

    let mut depth = vec![f32::INFINITY; (size * size) as usize];
    for t in &mesh.faces {
        let [a, b, c] = t.map(|i| screen[i as usize]);
        let area = edge(a, b, c);
        // Back faces (clockwise on screen, y down) and degenerate ones are skipped.
        if area >= 0.0 || !area.is_finite() {
            continue;
        }
        let x0 = a[0].min(b[0]).min(c[0]).floor().max(0.0) as u32;
        let x1 = (a[0].max(b[0]).max(c[0]).ceil() as u32).min(size - 1);
        let y0 = a[1].min(b[1]).min(c[1]).floor().max(0.0) as u32;
        let y1 = (a[1].max(b[1]).max(c[1]).ceil() as u32).min(size - 1);
        let [s0, sb, sc] = t.map(|i| shade[i as usize]);
        for y in y0..=y1 {
            for x in x0..=x1 {
                let p = [x as f32 + 0.5, y as f32 + 0.5, 0.0];
                let (w0, w1, w2) = (
                    edge(b, c, p) / area,
                    edge(c, a, p) / area,
                    edge(a, b, p) / area,
                );
                if w0 < 0.0 || w1 < 0.0 || w2 < 0.0 {
                    continue;
                }
                let z = w0 * a[2] + w1 * b[2] + w2 * c[2];
                let slot = &mut depth[(y * size + x) as usize];
                if z < *slot {
                    *slot = z;
                    let albedo = match (texture, &linear_texels) {
                        (Some(tex), Some(texels)) => {
                            let uv = [0, 1].map(|k| {
                                let [ua, ub, uc] = t.map(|i| tex.uvs[i as usize][k]);
                                w0 * ua + w1 * ub + w2 * uc
                            });
                            bilinear(texels, tex.image.width(), tex.image.height(), uv)
                        }
                        _ => [1.0; 3],
                    };
                    let rgb = [0, 1, 2].map(|k| {
                        let lin = (w0 * s0[k] + w1 * sb[k] + w2 * sc[k]) * albedo[k];
                        (linear_to_srgb(lin) * 255.0).round() as u8
                    });
                    img.put_pixel(x, y, Rgb(rgb));
                }
            }
        }
    }
    img
}

/// Bilinear sample (clamped at the borders) of linear RGB `texels` (`w`×`h`, rows top down) at glTF `uv`.
pub(crate) fn bilinear(texels: &[f32], w: u32, h: u32, uv: [f32; 2]) -> [f32; 3] {
    let x = (uv[0] * w as f32 - 0.5).clamp(0.0, (w - 1) as f32);
    let y = (uv[1] * h as f32 - 0.5).clamp(0.0, (h - 1) as f32);
    let (x0, y0) = (x.floor() as u32, y.floor() as u32);
    let (x1, y1) = ((x0 + 1).min(w - 1), (y0 + 1).min(h - 1));
    let (fx, fy) = (x - x0 as f32, y - y0 as f32);
    let at = |x: u32, y: u32, k: usize| texels[((y * w + x) * 3) as usize + k];
    [0, 1, 2].map(|k| {
        let top = at(x0, y0, k) * (1.0 - fx) + at(x1, y0, k) * fx;
        let bottom = at(x0, y1, k) * (1.0 - fx) + at(x1, y1, k) * fx;
        top * (1.0 - fy) + bottom * fy
    })
}

fn edge(a: [f32; 3], b: [f32; 3], p: [f32; 3]) -> f32 {
    (b[0] - a[0]) * (p[1] - a[1]) - (b[1] - a[1]) * (p[0] - a[0])
}

fn dot(a: [f32; 3], b: [f32; 3]) -> f32 {
    a[0] * b[0] + a[1] * b[1] + a[2] * b[2]
}

fn cross(a: [f32; 3], b: [f32; 3]) -> [f32; 3] {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}

fn add(a: [f32; 3], b: [f32; 3]) -> [f32; 3] {
    [a[0] + b[0], a[1] + b[1], a[2] + b[2]]
}

fn scale3(a: [f32; 3], s: f32) -> [f32; 3] {
    a.map(|v| v * s)
}

fn normalize(a: [f32; 3]) -> [f32; 3] {
    let l = dot(a, a).sqrt();
    a.map(|v| v / l)
}
