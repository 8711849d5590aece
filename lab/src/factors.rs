//! The numbers that tell instances of one combination apart, each in about [−1, 1]: the factors
//! that structured instance codes ([`crate::fit_decoder`]) weight.
//!
//! Geometry: the size, and for the cube (the one shape a yaw changes) the yaw on its quarter-turn
//! period as a cosine and a sine; shade: each linear channel's ratio to the canonical colour.

use crate::world::{WorldObject, BRIGHTNESS_RANGE, CHANNEL_JITTER, SCALE_RANGE};

/// Geometry factors per object.
pub const GEOMETRY: usize = 3;
/// Shade factors per object.
pub const SHADE: usize = 3;

/// The object's geometry factors: size, cos and sin of the yaw on the shape's period (0 for shapes
/// every yaw maps onto themselves, all but the cube).
pub fn geometry(o: &WorldObject) -> [f32; GEOMETRY] {
    let (lo, hi) = SCALE_RANGE;
    let size = centred(o.params.scale, lo, hi);
    match o.shape.yaw_period() {
        Some(period) => {
            let turn = o.params.yaw * std::f32::consts::TAU / period;
            [size, turn.cos(), turn.sin()]
        }
        _ => [size, 0.0, 0.0],
    }
}

/// The object's shade factors: each linear channel over the canonical colour's, centred on the
/// range that brightness and jitter give.
pub fn shade(o: &WorldObject) -> [f32; SHADE] {
    let base = o.colour.linear();
    let lo = BRIGHTNESS_RANGE.0 * (1.0 - CHANNEL_JITTER);
    let hi = BRIGHTNESS_RANGE.1 * (1.0 + CHANNEL_JITTER);
    [0, 1, 2].map(|i| centred(o.params.rgb[i] / base[i].max(1e-6), lo, hi))
}

/// `x` mapped from `[lo, hi]` onto `[−1, 1]`.
fn centred(x: f32, lo: f32, hi: f32) -> f32 {
    (2.0 * x - lo - hi) / (hi - lo)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::world::{Colour, Shape};
    use clipsculpt::autodiff::rng::Rng;

    /// Every random object's factors lie in [−1, 1]; the canonical object has the cube's yaw
    /// factor (1, 0), a size at the top of the range, and other shapes have no yaw factor.
    #[test]
    fn factors_stay_in_range_and_follow_the_variation() {
        let mut rng = Rng::new(3);
        for shape in Shape::ALL {
            for colour in Colour::ALL {
                for _ in 0..20 {
                    let o = WorldObject::random(shape, colour, &mut rng);
                    for f in geometry(&o).into_iter().chain(shade(&o)) {
                        assert!((-1.0..=1.0).contains(&f), "{shape:?} {colour:?}: {f}");
                    }
                    if shape != Shape::Cube {
                        assert_eq!(&geometry(&o)[1..], &[0.0, 0.0]);
                    }
                }
            }
        }
        let cube = WorldObject::canonical(Shape::Cube, Colour::Red);
        let g = geometry(&cube);
        assert!(
            (g[0] - 1.0).abs() < 1e-5 && g[1] == 1.0 && g[2] == 0.0,
            "{g:?}"
        );
        // A quarter turn leaves the cube, and so its factors, unchanged.
        let mut turned = cube;
        turned.params.yaw = std::f32::consts::FRAC_PI_2;
        let g = geometry(&turned);
        assert!((g[1] - 1.0).abs() < 1e-5 && g[2].abs() < 1e-5, "{g:?}");
    }
}
