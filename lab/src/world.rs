//! The procedural toy world: [`Shape`]s × [`Colour`]s as analytic fields, positive inside (Shap-E's convention,
//! [`clipsculpt::mesh::field`]), in Shap-E's frame (+Z up) and inside [−1, 1]³ with a margin.
//!
//! A [`WorldObject`] is one shape in one colour with a mild random [`Variation`] (uniform size, rotation about +Z,
//! shade) drawn from our seeded [`Rng`]. It is a [`Field`], so it meshes and exports like a model's output.
//! [`HELD_OUT`] lists the combinations that the toy prior never trains on.

use candle_core::Tensor;
use serde::{Deserialize, Serialize};

use clipsculpt::autodiff::rng::Rng;
use clipsculpt::mesh::{shapes, Field, FnField};

/// A shape of the toy world, at a canonical size; see [`Shape::canonical_sdf`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Shape {
    /// Sphere, radius 0.7.
    Sphere,
    /// Cube, side 1.1, faces axis-aligned at yaw 0.
    Cube,
    /// Cylinder, radius 0.5, height 1.1.
    Cylinder,
    /// Cone, base radius 0.6 at the bottom, height 1.3, apex up.
    Cone,
    /// Torus lying flat (ring in the xy plane), ring radius 0.55, tube radius 0.22.
    Torus,
    /// Capsule standing up, radius 0.35, straight part 0.8 (total height 1.5).
    Capsule,
}

/// A colour name of the toy world with its canonical linear RGB ([`Colour::linear`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Colour {
    /// sRGB (0.85, 0.10, 0.10).
    Red,
    /// sRGB (0.10, 0.70, 0.15).
    Green,
    /// sRGB (0.10, 0.20, 0.85).
    Blue,
    /// sRGB (0.95, 0.85, 0.10).
    Yellow,
    /// sRGB (0.95, 0.95, 0.95).
    White,
    /// sRGB (0.08, 0.08, 0.08).
    Black,
}

/// Shape × colour combinations kept out of the toy prior's training set (CLIP still sees them). Each shape and
/// each colour appears exactly once, so every one of them is trained with its five other partners.
pub const HELD_OUT: [(Shape, Colour); 6] = [
    (Shape::Sphere, Colour::Green),
    (Shape::Cube, Colour::Blue),
    (Shape::Cylinder, Colour::Yellow),
    (Shape::Cone, Colour::White),
    (Shape::Torus, Colour::Black),
    (Shape::Capsule, Colour::Red),
];

/// Range of the uniform size factor applied to the canonical shape.
pub const SCALE_RANGE: (f32, f32) = (0.8, 1.0);
/// Range of the brightness factor applied to the canonical linear colour.
pub const BRIGHTNESS_RANGE: (f32, f32) = (0.8, 1.0);
/// Largest relative per-channel jitter of the linear colour.
pub const CHANNEL_JITTER: f32 = 0.06;

/// Everyday words the evaluator reads as a toy shape's name (the toy CLIP never saw them).
pub const SHAPE_ALIASES: [(&str, &str); 6] = [
    ("ball", "sphere"),
    ("box", "cube"),
    ("tube", "cylinder"),
    ("donut", "torus"),
    ("ring", "torus"),
    ("pill", "capsule"),
];

impl Shape {
    /// Every shape, in declaration order.
    pub const ALL: [Shape; 6] = [
        Shape::Sphere,
        Shape::Cube,
        Shape::Cylinder,
        Shape::Cone,
        Shape::Torus,
        Shape::Capsule,
    ];

    /// The word used in captions ("cube").
    pub fn name(self) -> &'static str {
        match self {
            Shape::Sphere => "sphere",
            Shape::Cube => "cube",
            Shape::Cylinder => "cylinder",
            Shape::Cone => "cone",
            Shape::Torus => "torus",
            Shape::Capsule => "capsule",
        }
    }

    /// The shape named by a caption word or one of its [`SHAPE_ALIASES`], if any.
    pub fn from_name(word: &str) -> Option<Self> {
        let word = SHAPE_ALIASES
            .iter()
            .find(|(alias, _)| *alias == word)
            .map_or(word, |(_, name)| name);
        Self::ALL.into_iter().find(|s| s.name() == word)
    }

    /// Signed distance (positive inside) of the canonical shape: centred on its bounding box, yaw 0.
    pub fn canonical_sdf(self, p: [f32; 3]) -> f32 {
        match self {
            Shape::Sphere => shapes::sphere(p, [0.0; 3], 0.7),
            Shape::Cube => shapes::cuboid(p, [0.55; 3]),
            Shape::Cylinder => shapes::cylinder(p, 0.5, 0.55),
            Shape::Cone => shapes::cone(p, 0.6, 1.3),
            Shape::Torus => shapes::torus(p, 0.55, 0.22),
            Shape::Capsule => shapes::capsule(p, 0.35, 0.4),
        }
    }

    /// Volume of the canonical shape (closed forms).
    pub fn canonical_volume(self) -> f32 {
        use std::f32::consts::PI;
        match self {
            Shape::Sphere => 4.0 / 3.0 * PI * 0.7f32.powi(3),
            Shape::Cube => 1.1f32.powi(3),
            Shape::Cylinder => PI * 0.5f32.powi(2) * 1.1,
            Shape::Cone => PI * 0.6f32.powi(2) * 1.3 / 3.0,
            Shape::Torus => 2.0 * PI * PI * 0.55 * 0.22f32.powi(2),
            Shape::Capsule => PI * 0.35f32.powi(2) * 0.8 + 4.0 / 3.0 * PI * 0.35f32.powi(3),
        }
    }

    /// Height of the canonical shape's volume centroid above its bounding-box centre (a cone's is a quarter of
    /// its height below).
    pub fn canonical_centroid_z(self) -> f32 {
        match self {
            Shape::Cone => -1.3 / 4.0,
            _ => 0.0,
        }
    }

    /// Smallest rotation about +Z (radians) that maps the shape onto itself; `None` when every rotation does.
    pub fn yaw_period(self) -> Option<f32> {
        match self {
            Shape::Cube => Some(std::f32::consts::FRAC_PI_2),
            _ => None,
        }
    }
}

impl Colour {
    /// Every colour, in declaration order.
    pub const ALL: [Colour; 6] = [
        Colour::Red,
        Colour::Green,
        Colour::Blue,
        Colour::Yellow,
        Colour::White,
        Colour::Black,
    ];

    /// The word used in captions ("red").
    pub fn name(self) -> &'static str {
        match self {
            Colour::Red => "red",
            Colour::Green => "green",
            Colour::Blue => "blue",
            Colour::Yellow => "yellow",
            Colour::White => "white",
            Colour::Black => "black",
        }
    }

    /// The colour named by a caption word, if any.
    pub fn from_name(word: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.name() == word)
    }

    /// Canonical linear RGB in [0, 1] (the sRGB values in the variant docs, linearised).
    pub fn linear(self) -> [f32; 3] {
        let srgb = match self {
            Colour::Red => [0.85, 0.10, 0.10],
            Colour::Green => [0.10, 0.70, 0.15],
            Colour::Blue => [0.10, 0.20, 0.85],
            Colour::Yellow => [0.95, 0.85, 0.10],
            Colour::White => [0.95, 0.95, 0.95],
            Colour::Black => [0.08, 0.08, 0.08],
        };
        srgb.map(clipsculpt::mesh::colour::srgb_to_linear)
    }
}

/// Whether the embedded toy prior's training set leaves this combination out ([`HELD_OUT`]).
pub fn is_held_out(shape: Shape, colour: Colour) -> bool {
    HELD_OUT.contains(&(shape, colour))
}

/// Every shape × colour combination, shape-major.
pub fn combinations() -> Vec<(Shape, Colour)> {
    Shape::ALL
        .into_iter()
        .flat_map(|s| Colour::ALL.into_iter().map(move |c| (s, c)))
        .collect()
}

/// The combinations the toy prior trains on (all but [`HELD_OUT`]).
#[cfg(test)]
pub fn training_combinations() -> Vec<(Shape, Colour)> {
    combinations()
        .into_iter()
        .filter(|&(s, c)| !is_held_out(s, c))
        .collect()
}

/// The random variation of one object.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Variation {
    /// Uniform size factor on the canonical shape ([`SCALE_RANGE`]).
    pub scale: f32,
    /// Rotation about +Z in radians, counter-clockwise seen from above.
    pub yaw: f32,
    /// The object's linear RGB (the canonical colour, shaded and jittered).
    pub rgb: [f32; 3],
}

/// One object of the toy world: a shape, a colour name and its variation.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct WorldObject {
    /// The shape.
    pub shape: Shape,
    /// The colour name.
    pub colour: Colour,
    /// Size, rotation and shade.
    pub params: Variation,
}

impl WorldObject {
    /// The canonical object: scale 1, yaw 0, canonical colour.
    pub fn canonical(shape: Shape, colour: Colour) -> Self {
        let params = Variation {
            scale: 1.0,
            yaw: 0.0,
            rgb: colour.linear(),
        };
        Self {
            shape,
            colour,
            params,
        }
    }

    /// An object with size, yaw and shade drawn from `rng` (five draws, always in the same order).
    pub fn random(shape: Shape, colour: Colour, rng: &mut Rng) -> Self {
        let scale = rng.range(SCALE_RANGE.0, SCALE_RANGE.1);
        let yaw = rng.range(0.0, std::f32::consts::TAU);
        let brightness = rng.range(BRIGHTNESS_RANGE.0, BRIGHTNESS_RANGE.1);
        let base = colour.linear();
        let rgb = [0, 1, 2].map(|i| {
            let jitter = 1.0 + rng.range(-CHANNEL_JITTER, CHANNEL_JITTER);
            (base[i] * brightness * jitter).clamp(0.0, 1.0)
        });
        let params = Variation { scale, yaw, rgb };
        Self {
            shape,
            colour,
            params,
        }
    }

    /// Signed distance at `p`, positive inside: the canonical shape scaled by `scale`, rotated by `yaw` about +Z.
    pub fn sdf(&self, p: [f32; 3]) -> f32 {
        let Variation { scale, yaw, .. } = self.params;
        let q = rotate_z(p, -yaw).map(|v| v / scale);
        self.shape.canonical_sdf(q) * scale
    }

    /// Linear RGB at `p` (uniform over the object).
    pub fn colour(&self, _p: [f32; 3]) -> [f32; 3] {
        self.params.rgb
    }
}

impl Field for WorldObject {
    fn eval(&self, points: &Tensor) -> candle_core::Result<(Tensor, Tensor)> {
        FnField(|p: [f32; 3]| (self.sdf(p), self.colour(p))).eval(points)
    }
}

/// Rotates `p` by `angle` radians about +Z (counter-clockwise seen from above).
pub fn rotate_z(p: [f32; 3], angle: f32) -> [f32; 3] {
    let (s, c) = angle.sin_cos();
    [c * p[0] - s * p[1], s * p[0] + c * p[1], p[2]]
}

#[cfg(test)]
mod tests {
    use super::*;
    use clipsculpt::mesh::{sample_grid, Bounds};

    #[test]
    fn held_out_set_leaves_every_shape_and_colour_trained() {
        assert_eq!(combinations().len(), 36);
        assert_eq!(training_combinations().len(), 30);
        for s in Shape::ALL {
            let partners = training_combinations().iter().filter(|x| x.0 == s).count();
            assert_eq!(partners, 5, "{s:?}");
        }
        for c in Colour::ALL {
            let partners = training_combinations().iter().filter(|x| x.1 == c).count();
            assert_eq!(partners, 5, "{c:?}");
        }
    }

    #[test]
    fn objects_fit_the_box_with_a_margin_and_match_their_volume() {
        // Sample the largest variation (scale 1) on a 49³ grid over [−1, 1]³: the faces of the box must be outside
        // by at least 0.15, and the inside count must give the closed-form volume within 3 %.
        let n = 49;
        for shape in Shape::ALL {
            let mut rng = Rng::new(shape as u64);
            let mut obj = WorldObject::random(shape, Colour::Red, &mut rng);
            obj.params.scale = 1.0;
            for corner in [[-1.0, -1.0, -1.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]] {
                let shrunk = corner.map(|v: f32| v * 0.85);
                assert!(obj.sdf(shrunk) < 0.0, "{shape:?} reaches {shrunk:?}");
            }
            let g = sample_grid(&obj, &candle_core::Device::Cpu, n, Bounds::SHAP_E, 4096).unwrap();
            let h = 2.0 / (n - 1) as f32;
            let inside = g.values().iter().filter(|v| **v > 0.0).count() as f32;
            let rel = inside * h.powi(3) / shape.canonical_volume() - 1.0;
            assert!(rel.abs() < 0.03, "{shape:?}: volume off by {rel}");
        }
    }

    #[test]
    fn variation_is_seeded_and_mild() {
        let a = WorldObject::random(Shape::Cube, Colour::Yellow, &mut Rng::new(3));
        let b = WorldObject::random(Shape::Cube, Colour::Yellow, &mut Rng::new(3));
        assert_eq!(a, b);
        let mut rng = Rng::new(9);
        for _ in 0..200 {
            let o = WorldObject::random(Shape::Sphere, Colour::White, &mut rng);
            assert!((SCALE_RANGE.0..=SCALE_RANGE.1).contains(&o.params.scale));
            let base = Colour::White.linear();
            for (rgb, base) in o.params.rgb.iter().zip(base) {
                let ratio = rgb / base;
                assert!((0.75..=1.07).contains(&ratio), "{ratio}");
            }
        }
        // Yaw turns the cube: (0.6, 0, 0) is outside at yaw 0 and inside at 45°.
        let mut cube = WorldObject::canonical(Shape::Cube, Colour::Red);
        assert!(cube.sdf([0.6, 0.0, 0.0]) < 0.0);
        cube.params.yaw = std::f32::consts::FRAC_PI_4;
        assert!(cube.sdf([0.6, 0.0, 0.0]) > 0.0);
    }
}
