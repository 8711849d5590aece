//! Pinhole cameras (diffusers `pipelines/shap_e/camera.py`, `DifferentiableProjectiveCamera`;
//! `docs/shap-e.md`, "Rendering"): an origin and an orthonormal frame `x` (right), `y` (down), `z` (forward), with
//! per-axis field of view. Rays go through pixel centres' grid `f = (p/(res−1))·2 − 1`, scaled
//! by `tan(fov/2)`, row-major with the row index `py`.

/// A pinhole camera.
#[derive(Debug, Clone, PartialEq)]
pub struct Camera {
    /// Camera position.
    pub(crate) origin: [f32; 3],
    /// Image-right axis.
    pub(crate) x: [f32; 3],
    /// Image-down axis.
    pub(crate) y: [f32; 3],
    /// Viewing direction.
    pub(crate) z: [f32; 3],
    /// Pixels per row.
    pub width: usize,
    /// Rows.
    pub height: usize,
    /// Horizontal field of view (radians).
    pub(crate) x_fov: f32,
    /// Vertical field of view (radians).
    pub(crate) y_fov: f32,
}

/// Field of view of Shap-E's pan cameras (radians).
pub(crate) const PAN_FOV: f32 = 0.7;
/// Distance of Shap-E's pan cameras from the origin.
pub(crate) const PAN_RADIUS: f32 = 4.0;
/// Number of pan views in a contact sheet.
pub(crate) const PAN_VIEWS: usize = 20;

fn cross(a: [f64; 3], b: [f64; 3]) -> [f64; 3] {
    [
        a[1] * b[2] - a[2] * b[1],
        a[2] * b[0] - a[0] * b[2],
        a[0] * b[1] - a[1] * b[0],
    ]
}

fn to32(v: [f64; 3]) -> [f32; 3] {
    v.map(|c| c as f32)
}

impl Camera {
    /// A camera on a sphere of `radius` around the origin looking at it: `azimuth` (radians)
    /// turns about +z like the pan cameras (0 looks along +y), `elevation` (radians) raises the
    /// camera above the xy-plane (the pan cameras use `atan(0.5)` ≈ 26.6°), square `fov`.
    pub fn orbit(
        azimuth: f32,
        elevation: f32,
        radius: f32,
        fov: f32,
        width: usize,
        height: usize,
    ) -> Self {
        let (a, e) = (azimuth as f64, elevation as f64);
        let z = [a.sin() * e.cos(), a.cos() * e.cos(), -e.sin()];
        let x = [a.cos(), -a.sin(), 0.0];
        Self::from_frame(z, x, radius as f64, fov, width, height)
    }

    fn from_frame(
        z: [f64; 3],
        x: [f64; 3],
        radius: f64,
        fov: f32,
        width: usize,
        height: usize,
    ) -> Self {
        Self {
            origin: to32(z.map(|c| -c * radius)),
            x: to32(x),
            y: to32(cross(z, x)),
            z: to32(z),
            width,
            height,
            x_fov: fov,
            y_fov: fov,
        }
    }

    /// Ray origins and unit directions, each `width·height·3` floats, pixel-major (row `py`,
    /// column `px`, index `py·width + px`).
    pub fn rays(&self) -> (Vec<f32>, Vec<f32>) {
        let n = self.width * self.height;
        let frac = |p: usize, res: usize, fov: f32| -> f32 {
            let f = if res > 1 {
                (p as f32 / (res - 1) as f32) * 2.0 - 1.0
            } else {
                0.0
            };
            f * (fov / 2.0).tan()
        };
        let mut origins = Vec::with_capacity(3 * n);
        let mut dirs = Vec::with_capacity(3 * n);
        for p in 0..n {
            let (fx, fy) = (
                frac(p % self.width, self.width, self.x_fov),
                frac(p / self.width, self.height, self.y_fov),
            );
            let d: [f32; 3] = std::array::from_fn(|i| self.z[i] + self.x[i] * fx + self.y[i] * fy);
            let norm = (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt();
            origins.extend_from_slice(&self.origin);
            dirs.extend(d.iter().map(|c| c / norm));
        }
        (origins, dirs)
    }
}

/// Shap-E's 20 pan cameras (`create_pan_cameras`): θ = linspace(0, 2π, 20) (first and last
/// coincide), `z = normalize(sin θ, cos θ, −0.5)`, origin `−4z`, `x = (cos θ, −sin θ, 0)`,
/// `y = z × x`, fov 0.7, `size × size` pixels.
pub(crate) fn pan_cameras(size: usize) -> Vec<Camera> {
    (0..PAN_VIEWS)
        .map(|i| {
            let theta = 2.0 * std::f64::consts::PI * i as f64 / (PAN_VIEWS - 1) as f64;
            let z = [theta.sin(), theta.cos(), -0.5];
            let n = (z[0] * z[0] + z[1] * z[1] + z[2] * z[2]).sqrt();
            let z = z.map(|c| c / n);
            Camera::from_frame(
                z,
                [theta.cos(), -theta.sin(), 0.0],
                PAN_RADIUS as f64,
                PAN_FOV,
                size,
                size,
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The orbit camera at elevation atan(0.5), radius 4 is the pan camera at the same azimuth.
    #[test]
    fn orbit_reproduces_pan_cameras() {
        let pans = pan_cameras(8);
        let theta = 2.0 * std::f32::consts::PI * 3.0 / 19.0;
        let o = Camera::orbit(theta, 0.5f32.atan(), 4.0, 0.7, 8, 8);
        for (a, b) in o
            .origin
            .iter()
            .chain(&o.y)
            .zip(pans[3].origin.iter().chain(&pans[3].y))
        {
            assert!((a - b).abs() < 1e-5, "{a} vs {b}");
        }
    }

    /// The centre pixel of an odd-sized image looks straight along z, corners are symmetric.
    #[test]
    fn centre_ray_is_forward() {
        let c = Camera::orbit(0.3, 0.2, 3.0, 0.9, 5, 5);
        let (o, d) = c.rays();
        let mid = 3 * 12;
        for i in 0..3 {
            assert!((d[mid + i] - c.z[i]).abs() < 1e-6);
            assert_eq!(o[mid + i], c.origin[i]);
        }
        let dot = |i: usize| (0..3).map(|k| d[3 * i + k] * c.z[k]).sum::<f32>();
        assert!((dot(0) - dot(24)).abs() < 1e-6);
        assert!((dot(0) - (1.0 / (1.0 + 2.0 * (0.45f32).tan().powi(2))).sqrt()).abs() < 1e-5);
    }
}
