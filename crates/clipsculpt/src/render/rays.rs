//! Ray/box intersection (diffusers `BoundingBoxVolume.intersect`; `docs/shap-e.md`, "Rendering"): slab test against
//! the axis-aligned box, directions nudged away from zero by 1e-6, `t0` clamped at 0, a hit
//! needs `t0 + 1e-3 < t1`; misses get `[0, 1]`.

/// Shap-E's volume: the cube `[−1, 1]³`.
pub(crate) const BBOX_MIN: [f32; 3] = [-1.0; 3];
/// Upper corner of the volume.
pub(crate) const BBOX_MAX: [f32; 3] = [1.0; 3];
/// Shortest `t` interval that counts as a hit.
pub(crate) const MIN_T_RANGE: f32 = 1e-3;

/// Where a ray is inside the volume.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RayRange {
    /// Entry distance (≥ 0); 0 for a miss.
    pub t0: f32,
    /// Exit distance; 1 for a miss.
    pub t1: f32,
    /// Whether the ray meets the volume.
    pub hit: bool,
}

/// Intersects the ray `origin + t·dir` with the box `[lo, hi]`.
pub(crate) fn intersect_box(
    origin: [f32; 3],
    dir: [f32; 3],
    lo: [f32; 3],
    hi: [f32; 3],
) -> RayRange {
    let mut t0 = f32::NEG_INFINITY;
    let mut t1 = f32::INFINITY;
    for i in 0..3 {
        let d = if dir[i] < 0.0 {
            dir[i] - 1e-6
        } else {
            dir[i] + 1e-6
        };
        let (a, b) = ((lo[i] - origin[i]) / d, (hi[i] - origin[i]) / d);
        t0 = t0.max(a.min(b));
        t1 = t1.min(a.max(b));
    }
    let t0 = t0.max(0.0);
    if t0 + MIN_T_RANGE < t1 {
        RayRange { t0, t1, hit: true }
    } else {
        RayRange {
            t0: 0.0,
            t1: 1.0,
            hit: false,
        }
    }
}

/// Intersects every ray of `origins`/`dirs` (`n·3` floats each) with Shap-E's volume.
pub fn intersect_all(origins: &[f32], dirs: &[f32]) -> Vec<RayRange> {
    origins
        .chunks_exact(3)
        .zip(dirs.chunks_exact(3))
        .map(|(o, d)| intersect_box([o[0], o[1], o[2]], [d[0], d[1], d[2]], BBOX_MIN, BBOX_MAX))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// From (−4, 0, 0) along +x the ray enters the cube at t = 3 and leaves at t = 5.
    #[test]
    fn axis_ray_hits_at_known_t() {
        let r = intersect_box([-4.0, 0.0, 0.0], [1.0, 0.0, 0.0], BBOX_MIN, BBOX_MAX);
        assert!(
            r.hit && (r.t0 - 3.0).abs() < 1e-4 && (r.t1 - 5.0).abs() < 1e-4,
            "{r:?}"
        );
    }

    /// A ray passing beside the cube misses; one starting inside starts at t0 = 0.
    #[test]
    fn miss_and_inside() {
        let r = intersect_box([-4.0, 2.0, 0.0], [1.0, 0.0, 0.0], BBOX_MIN, BBOX_MAX);
        assert_eq!(
            r,
            RayRange {
                t0: 0.0,
                t1: 1.0,
                hit: false
            }
        );
        let r = intersect_box([0.0, 0.0, 0.0], [0.0, 0.0, -1.0], BBOX_MIN, BBOX_MAX);
        assert!(r.hit && r.t0 == 0.0 && (r.t1 - 1.0).abs() < 1e-4);
    }
}
