//! Volume renders of analytic [`WorldObject`]s that look like the decoder's renders: the density
//! the toy decoder is fitted to ([`crate::fit_decoder`]: `D·σ(k·sdf)`), flat sRGB colour,
//! stratified samples through Shap-E's `[−1, 1]³` volume, compositing over black. The toy CLIP is
//! trained on these images, so it sees what guidance will show it.

use candle_core::{Device, Result, Tensor};
use rayon::prelude::*;

use crate::world::WorldObject;
use clipsculpt::autodiff::rng::Rng;
use clipsculpt::mesh::colour::linear_to_srgb;
use clipsculpt::render::rays::intersect_all;
use clipsculpt::render::Camera;

/// Sharpness `k` and interior density `D` of the rendered density `D·σ(k·sdf)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DensityModel {
    /// Sharpness `k`.
    pub sharpness: f32,
    /// Interior density `D`.
    pub density: f32,
}

/// One rendered view: premultiplied sRGB over black `(3, H, W)` and opacity `(1, H, W)`.
#[derive(Debug, Clone)]
pub struct View {
    /// Premultiplied colour.
    pub rgb: Tensor,
    /// Opacity `1 − T`.
    pub alpha: Tensor,
}

/// What [`render_object`] draws: a signed distance (positive inside) and one flat colour.
pub trait Solid: Sync {
    /// Signed distance at `p`, positive inside.
    fn sdf(&self, p: [f32; 3]) -> f32;
    /// Linear RGB, uniform over the solid.
    fn rgb(&self) -> [f32; 3];
}

impl Solid for WorldObject {
    fn sdf(&self, p: [f32; 3]) -> f32 {
        WorldObject::sdf(self, p)
    }

    fn rgb(&self) -> [f32; 3] {
        self.params.rgb
    }
}

/// Renders `object` through `camera` with `samples` stratified samples per ray (jitter from `rng`).
pub fn render_object(
    object: &impl Solid,
    camera: &Camera,
    samples: usize,
    model: DensityModel,
    rng: &mut Rng,
    dev: &Device,
) -> Result<View> {
    let (h, w) = (camera.height, camera.width);
    let (origins, dirs) = camera.rays();
    let ranges = intersect_all(&origins, &dirs);
    let jitter: Vec<f32> = (0..h * w * samples).map(|_| rng.uniform()).collect();
    let colour = object.rgb().map(linear_to_srgb);
    let per_ray: Vec<([f32; 3], f32)> = (0..h * w)
        .into_par_iter()
        .map(|r| {
            let range = ranges[r];
            if !range.hit {
                return ([0.0; 3], 0.0);
            }
            let (o, d) = (&origins[3 * r..3 * r + 3], &dirs[3 * r..3 * r + 3]);
            let step = (range.t1 - range.t0) / samples as f32;
            let mut transmittance = 1.0f32;
            for s in 0..samples {
                let t = range.t0 + (s as f32 + jitter[r * samples + s]) * step;
                let p = [o[0] + t * d[0], o[1] + t * d[1], o[2] + t * d[2]];
                let sigma = model.density / (1.0 + (-model.sharpness * object.sdf(p)).exp());
                transmittance *= (-sigma * step).exp();
                if transmittance < 1e-4 {
                    transmittance = 0.0;
                    break;
                }
            }
            let a = 1.0 - transmittance;
            (colour.map(|c| c * a), a)
        })
        .collect();
    let mut rgb = vec![0f32; 3 * h * w];
    let mut alpha = vec![0f32; h * w];
    for (i, (c, a)) in per_ray.into_iter().enumerate() {
        for k in 0..3 {
            rgb[k * h * w + i] = c[k];
        }
        alpha[i] = a;
    }
    Ok(View {
        rgb: Tensor::from_vec(rgb, (3, h, w), dev)?,
        alpha: Tensor::from_vec(alpha, (1, h, w), dev)?,
    })
}

/// A random orbit camera like guidance uses: azimuth uniform, elevation 10°–50°, radius 4, FOV 0.7.
pub fn random_camera(size: usize, rng: &mut Rng) -> Camera {
    let az = rng.range(0.0, std::f32::consts::TAU);
    let el = rng.range(10f32.to_radians(), 50f32.to_radians());
    Camera::orbit(az, el, 4.0, 0.7, size, size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::world::{Colour, Shape};

    /// A red sphere seen from outside: opaque red in the middle, empty in the corners.
    #[test]
    fn sphere_render_is_opaque_in_the_middle_and_empty_at_the_corners() -> Result<()> {
        let obj = WorldObject::canonical(Shape::Sphere, Colour::Red);
        let cam = Camera::orbit(0.3, 0.4, 4.0, 0.7, 16, 16);
        let model = DensityModel {
            sharpness: 8.0,
            density: 20.0,
        };
        let v = render_object(&obj, &cam, 64, model, &mut Rng::new(1), &Device::Cpu)?;
        let a = v.alpha.to_vec3::<f32>()?;
        assert!(a[0][8][8] > 0.99, "centre opacity {}", a[0][8][8]);
        assert!(a[0][0][0] < 0.05, "corner opacity {}", a[0][0][0]);
        let rgb = v.rgb.to_vec3::<f32>()?;
        let red = linear_to_srgb(Colour::Red.linear()[0]);
        assert!((rgb[0][8][8] - red * a[0][8][8]).abs() < 1e-5);
        assert!(rgb[1][8][8] < 0.2);
        Ok(())
    }
}
