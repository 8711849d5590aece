//! Analytic signed-distance shapes, positive inside (Shap-E convention), for tests, benches and demos.
//!
//! Each function returns the signed distance at `p` (exact for all of them); the axis-symmetric ones stand on the
//! z axis (Shap-E's up axis) and are centred at the origin.

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

/// Cylinder around the z axis: `radius`, from `−half_height` to `half_height`.
pub fn cylinder(p: [f32; 3], radius: f32, half_height: f32) -> f32 {
    let d = [p[0].hypot(p[1]) - radius, p[2].abs() - half_height];
    let outside = d[0].max(0.0).hypot(d[1].max(0.0));
    -(outside + d[0].max(d[1]).min(0.0))
}

/// Cone around the z axis: base disc of `radius` at `z = −height/2`, apex at `z = height/2`.
pub fn cone(p: [f32; 3], radius: f32, height: f32) -> f32 {
    // In the (ρ, z) half-plane the solid is the triangle (0, z0), (r, z0), (0, z0 + h); its surface is the slanted
    // edge and the base edge (the axis edge is not a surface).
    let q = [p[0].hypot(p[1]), p[2]];
    let z0 = -height / 2.0;
    let slant = segment_distance_2d(q, [radius, z0], [0.0, z0 + height]);
    let base = segment_distance_2d(q, [0.0, z0], [radius, z0]);
    let d = slant.min(base);
    let inside = q[1] >= z0 && q[0] <= radius * (1.0 - (q[1] - z0) / height);
    if inside {
        d
    } else {
        -d
    }
}

/// Capsule around the z axis: the points within `radius` of the segment from `−half_length` to `half_length`.
pub fn capsule(p: [f32; 3], radius: f32, half_length: f32) -> f32 {
    let z = p[2] - p[2].clamp(-half_length, half_length);
    radius - (p[0] * p[0] + p[1] * p[1] + z * z).sqrt()
}

fn segment_distance_2d(p: [f32; 2], a: [f32; 2], b: [f32; 2]) -> f32 {
    let (ab, ap) = ([b[0] - a[0], b[1] - a[1]], [p[0] - a[0], p[1] - a[1]]);
    let len2 = ab[0] * ab[0] + ab[1] * ab[1];
    let t = if len2 > 0.0 {
        ((ap[0] * ab[0] + ap[1] * ab[1]) / len2).clamp(0.0, 1.0)
    } else {
        0.0
    };
    (ap[0] - t * ab[0]).hypot(ap[1] - t * ab[1])
}

/// Union of two shapes (max of positive-inside distances).
#[cfg(test)]
pub(crate) fn union(a: f32, b: f32) -> f32 {
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
        // Cylinder r = 0.5, half height 0.4: centre is 0.4 from the caps; (1, 0, 0) is 0.5 outside the side.
        assert!((cylinder([0.0; 3], 0.5, 0.4) - 0.4).abs() < 1e-6);
        assert!((cylinder([1.0, 0.0, 0.0], 0.5, 0.4) + 0.5).abs() < 1e-6);
        // Cone r = 1, h = 2: the base centre (0, 0, −1) is on the surface, the apex (0, 0, 1) too, and the point
        // (0, 0, 2) is 1 above the apex; (0, 0, −0.9) is 0.1 above the base and far from the slant.
        assert!(cone([0.0, 0.0, -1.0], 1.0, 2.0).abs() < 1e-6);
        assert!((cone([0.0, 0.0, 2.0], 1.0, 2.0) + 1.0).abs() < 1e-6);
        assert!((cone([0.0, 0.0, -0.9], 1.0, 2.0) - 0.1).abs() < 1e-6);
        // Capsule r = 0.3, half length 0.5: the tip (0, 0, 0.8) is on the surface, the centre 0.3 inside.
        assert!(capsule([0.0, 0.0, 0.8], 0.3, 0.5).abs() < 1e-6);
        assert!((capsule([0.0; 3], 0.3, 0.5) - 0.3).abs() < 1e-6);
    }
}
