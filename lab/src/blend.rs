//! Objects between two shapes, the scoring CLIP's hard negatives: a linear blend of one object's
//! signed distance with another shape's at the same size and yaw (a sphere halfway to a cube is a
//! rounded cube). Guidance's decoder produces such in-between shapes; a real CLIP ranks them below
//! the clean object its caption names, and a toy scorer trained only on clean objects need not.

use crate::render::Solid;
use crate::world::{Shape, WorldObject};
use clipsculpt::autodiff::rng::Rng;

/// The range of the other shape's weight: far enough from both ends that the blend is neither.
pub const BLEND_RANGE: (f32, f32) = (0.35, 0.65);

/// `object`'s distance blended with `other`'s at weight `weight` (same size, yaw and colour).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Blend {
    /// The object whose colour and variation the blend keeps.
    pub object: WorldObject,
    /// The shape blended in.
    pub other: Shape,
    /// The other shape's weight.
    pub weight: f32,
}

impl Blend {
    /// A blend of `object` with a random other shape at a weight in [`BLEND_RANGE`].
    pub fn random(object: WorldObject, rng: &mut Rng) -> Self {
        let others: Vec<Shape> = Shape::ALL
            .into_iter()
            .filter(|&s| s != object.shape)
            .collect();
        let other = others[rng.below(others.len())];
        let weight = rng.range(BLEND_RANGE.0, BLEND_RANGE.1);
        Self {
            object,
            other,
            weight,
        }
    }
}

impl Solid for Blend {
    fn sdf(&self, p: [f32; 3]) -> f32 {
        let other = WorldObject {
            shape: self.other,
            ..self.object
        };
        (1.0 - self.weight) * self.object.sdf(p) + self.weight * other.sdf(p)
    }

    fn rgb(&self) -> [f32; 3] {
        self.object.params.rgb
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::world::Colour;

    /// A sphere–cube blend is inside where both are, outside where neither is, and differs from
    /// both at a cube corner (inside the cube, outside the sphere).
    #[test]
    fn blend_lies_between_its_two_shapes() {
        let object = WorldObject::canonical(Shape::Sphere, Colour::Green);
        let cube = WorldObject::canonical(Shape::Cube, Colour::Green);
        let blend = Blend {
            object,
            other: Shape::Cube,
            weight: 0.5,
        };
        assert!(blend.sdf([0.0; 3]) > 0.0);
        assert!(blend.sdf([0.99, 0.0, 0.0]) < 0.0);
        // Find a point inside the cube and outside the sphere along the diagonal.
        let corner = (1..100)
            .map(|i| i as f32 / 100.0)
            .map(|t| [t, t, t])
            .find(|&p| cube.sdf(p) > 0.02 && object.sdf(p) < -0.02)
            .expect("the cube reaches past the sphere along its diagonal");
        let (a, b, m) = (object.sdf(corner), cube.sdf(corner), blend.sdf(corner));
        assert!(a < m && m < b, "{a} < {m} < {b}");
        assert_eq!(blend.rgb(), object.params.rgb);
    }

    /// Random blends never pick the object's own shape and stay within the weight range.
    #[test]
    fn random_blends_pick_another_shape() {
        let mut rng = Rng::new(3);
        for shape in Shape::ALL {
            let object = WorldObject::canonical(shape, Colour::Red);
            for _ in 0..20 {
                let b = Blend::random(object, &mut rng);
                assert_ne!(b.other, shape);
                assert!((BLEND_RANGE.0..=BLEND_RANGE.1).contains(&b.weight));
            }
        }
    }
}
