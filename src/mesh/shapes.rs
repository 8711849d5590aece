//! Analytic signed-distance shapes, positive inside (Shap-E convention), for tests, benches and demos.
//!
//! Each function returns the signed distance at `p` (exact for sphere, torus and box).

/// Sphere of `radius` centred at `centre`: `r − |p − c|`.
pub fn sphere(p: [f32; 3], centre: [f32; 3], radius: f32) -> f32 {
    let d = [p[0] - centre[0], p[1] - centre[1], p[2] - centre[2]];
    radius - (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt()
}

/// Torus around the z axis through the origin: ring radius `major`, tube radius `minor`.
pub fn torus(p: [f32; 3], major: f32, minor: f32) -> f32 {
    let ring = (p[0] * p[0] + p[1] * p[1]).sqrt() - major;
    minor - (ring * ring + p[2] * p[2]).sqrt()
}

/// Axis-aligned box centred at the origin with the given half extents.
pub fn cuboid(p: [f32; 3], half: [f32; 3]) -> f32 {
    let q = [0, 1, 2].map(|a| p[a].abs() - half[a]);
    let outside = q.iter().map(|v| v.max(0.0).powi(2)).sum::<f32>().sqrt();
    let inside = q[0].max(q[1]).max(q[2]).min(0.0);
    -(outside + inside)
}

/// Union of two shapes (max of positive-inside distances).
pub fn union(a: f32, b: f32) -> f32 {
    a.max(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_follow_the_shap_e_convention() {
        assert_eq!(sphere([0.0; 3], [0.0; 3], 0.5), 0.5);
        assert_eq!(sphere([1.0, 0.0, 0.0], [0.0; 3], 0.5), -0.5);
        assert!((torus([0.5, 0.0, 0.0], 0.5, 0.2) - 0.2).abs() < 1e-6);
        assert!(torus([0.0; 3], 0.5, 0.2) < 0.0);
        assert_eq!(cuboid([0.0; 3], [0.5, 0.25, 0.5]), 0.25);
        assert_eq!(cuboid([1.0, 0.0, 0.0], [0.5; 3]), -0.5);
    }
}
