//! The up-axis convention, one for all formats, so that the object stands upright in Blender from each of them.
//!
//! [`super::Mesh`] lives in the field's frame, which is Shap-E's: right-handed, **+Z up** (diffusers' docs rotate
//! its meshes by −90° about x before writing glTF because they otherwise come out "viewed from below").
//! Blender (`docs/mesh.md`, measured): GLB and OBJ are read as **+Y up** and converted to Blender's
//! Z-up; PLY is taken as Z-up unchanged. So GLB and OBJ are written through [`to_y_up`] (a −90° rotation about x:
//! `(x, y, z) → (x, z, −y)`, a proper rotation, so winding and normals stay outward) and PLY as-is ([`to_z_up`]).
//! In Blender all three then show the field's +Z as up and its +X as +X.

/// Field frame (Z up) to glTF/OBJ frame (Y up), for positions and normals.
pub(crate) fn to_y_up(v: [f32; 3]) -> [f32; 3] {
    [v[0], v[2], -v[1]]
}

/// Field frame to PLY frame (identity: Blender reads PLY as Z up).
pub(crate) fn to_z_up(v: [f32; 3]) -> [f32; 3] {
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn y_up_is_a_proper_rotation_taking_z_to_y() {
        assert_eq!(to_y_up([0.0, 0.0, 1.0]), [0.0, 1.0, 0.0]);
        assert_eq!(to_y_up([1.0, 0.0, 0.0]), [1.0, 0.0, 0.0]);
        // Determinant +1: e_x × e_y maps to e_z's image.
        let (x, y, z) = (
            to_y_up([1.0, 0.0, 0.0]),
            to_y_up([0.0, 1.0, 0.0]),
            to_y_up([0.0, 0.0, 1.0]),
        );
        let cross = [
            x[1] * y[2] - x[2] * y[1],
            x[2] * y[0] - x[0] * y[2],
            x[0] * y[1] - x[1] * y[0],
        ];
        assert_eq!(cross, z);
    }
}
