//! Colour spaces per format (`docs/mesh.md`, measured in Blender): glTF `COLOR_0` is **linear**,
//! PLY and OBJ vertex colours are read as **sRGB**. [`super::Mesh`] stores linear RGB; writers encode.
//!
//! Shap-E's STF colour channel is sRGB-like (diffusers linearises it before export, `docs/shap-e.md`); a field
//! adapter should pass it through [`srgb_to_linear`] so that [`super::Field`] returns linear colour.

/// sRGB transfer function (IEC 61966-2-1) from linear to encoded, input clamped to [0, 1].
pub fn linear_to_srgb(u: f32) -> f32 {
    let u = if u.is_finite() {
        u.clamp(0.0, 1.0)
    } else {
        0.0
    };
    if u <= 0.003_130_8 {
        u * 12.92
    } else {
        1.055 * u.powf(1.0 / 2.4) - 0.055
    }
}

/// Inverse sRGB transfer function, as diffusers applies it to Shap-E colours: `u ≤ 0.04045 ? u/12.92 :
/// ((u + 0.055)/1.055)^2.4`, input clamped to [0, 1].
pub fn srgb_to_linear(u: f32) -> f32 {
    let u = if u.is_finite() {
        u.clamp(0.0, 1.0)
    } else {
        0.0
    };
    if u <= 0.040_45 {
        u / 12.92
    } else {
        ((u + 0.055) / 1.055).powf(2.4)
    }
}

/// [`srgb_to_linear`] on every element of a tensor (values clamped to [0, 1] first).
pub(crate) fn srgb_to_linear_tensor(
    t: &candle_core::Tensor,
) -> candle_core::Result<candle_core::Tensor> {
    let u = t.clamp(0f32, 1f32)?;
    let low = (&u / 12.92)?;
    let high = ((&u + 0.055)? / 1.055)?.powf(2.4)?;
    u.le(0.040_45f32)?.where_cond(&low, &high)
}

/// Linear RGB to sRGB-encoded bytes (PLY, previews).
pub(crate) fn srgb_bytes(linear: [f32; 3]) -> [u8; 3] {
    linear.map(|c| (linear_to_srgb(c) * 255.0).round() as u8)
}

/// Linear RGB to sRGB-encoded floats in [0, 1] (OBJ `v x y z r g b`).
pub(crate) fn srgb_floats(linear: [f32; 3]) -> [f32; 3] {
    linear.map(linear_to_srgb)
}

/// Linear RGB clamped to [0, 1] (glTF `COLOR_0`).
pub(crate) fn clamp_linear(linear: [f32; 3]) -> [f32; 3] {
    linear.map(|c| {
        if c.is_finite() {
            c.clamp(0.0, 1.0)
        } else {
            0.0
        }
    })
}

#[cfg(test)]
mod tests {

    /// The tensor form agrees with the scalar one, on both sides of the linear segment's end.
    #[test]
    fn tensor_form_matches_the_scalar_form() {
        let xs: Vec<f32> = (0..=200)
            .map(|i| i as f32 / 200.0)
            .chain([0.01, 0.04, 0.0405, -0.5, 1.5])
            .collect();
        let t = candle_core::Tensor::new(xs.as_slice(), &candle_core::Device::Cpu).unwrap();
        let got = srgb_to_linear_tensor(&t).unwrap().to_vec1::<f32>().unwrap();
        for (x, g) in xs.iter().zip(got) {
            assert!(
                (g - srgb_to_linear(*x)).abs() < 1e-6,
                "{x}: {g} vs {}",
                srgb_to_linear(*x)
            );
        }
    }

    use super::*;

    #[test]
    fn transfer_functions_round_trip_and_hit_anchors() {
        for i in 0..=255 {
            let u = i as f32 / 255.0;
            assert!((linear_to_srgb(srgb_to_linear(u)) - u).abs() < 1e-5, "{u}");
        }
        // docs/mesh.md: byte 100 reads as 0.127 linear from PLY/OBJ (sRGB) and 0.392 from GLB (linear).
        assert!((srgb_to_linear(100.0 / 255.0) - 0.127).abs() < 1e-3);
        assert_eq!(srgb_bytes([0.0, 1.0, 2.0]), [0, 255, 255]);
        assert_eq!(srgb_bytes([srgb_to_linear(100.0 / 255.0); 3]), [100; 3]);
        assert_eq!(clamp_linear([f32::NAN, -1.0, 0.5]), [0.0, 0.0, 0.5]);
    }
}
