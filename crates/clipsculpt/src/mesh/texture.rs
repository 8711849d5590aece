//! [`Texture`]: a base-colour atlas for a [`super::Mesh`]: one UV per vertex and an sRGB image, as glTF and OBJ
//! carry it (`docs/mesh.md`, "Material and texture").

use image::codecs::png::PngEncoder;
use image::{ImageEncoder, RgbImage};

use super::error::ExportError;

/// Per-vertex texture coordinates and the base-colour image they index.
///
/// UVs follow glTF: `u` to the right, `v` **down** from the image's top row, both in [0, 1]. The image is sRGB.
#[derive(Debug, Clone, PartialEq)]
pub struct Texture {
    /// One `[u, v]` per mesh vertex.
    pub uvs: Vec<[f32; 2]>,
    /// The base colour, sRGB-encoded.
    pub image: RgbImage,
}

impl Texture {
    /// Checks there is one finite UV in [0, 1] per vertex of a mesh with `vertices` vertices.
    pub(crate) fn validate(&self, vertices: usize) -> Result<(), ExportError> {
        let invalid = |reason| {
            Err(ExportError::Invalid {
                what: "texture",
                reason,
            })
        };
        if self.uvs.len() != vertices {
            return invalid(format!("{} UVs for {vertices} vertices", self.uvs.len()));
        }
        if let Some(uv) = self
            .uvs
            .iter()
            .find(|uv| !uv.iter().all(|t| (0.0..=1.0).contains(t)))
        {
            return invalid(format!("UV {uv:?} outside [0, 1]"));
        }
        if self.image.width() == 0 || self.image.height() == 0 {
            return invalid("empty image".into());
        }
        Ok(())
    }

    /// The image as PNG bytes (8-bit RGB; PNG images are sRGB unless tagged otherwise).
    pub(crate) fn png(&self) -> Result<Vec<u8>, image::ImageError> {
        let mut png = Vec::new();
        PngEncoder::new(&mut png).write_image(
            self.image.as_raw(),
            self.image.width(),
            self.image.height(),
            image::ExtendedColorType::Rgb8,
        )?;
        Ok(png)
    }
}
