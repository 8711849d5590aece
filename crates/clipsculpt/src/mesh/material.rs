//! The one material every exported mesh carries (`docs/mesh.md`, "Material and texture"): PBR
//! metallic-roughness, metallic 0, roughness [`ROUGHNESS`], base colour white × the mesh's colour (glTF
//! `COLOR_0`, or the baked [`super::Texture`]). OBJ gets it as an MTL file when textured.

use std::io::Write;

/// Name of the material in GLB and MTL.
pub(crate) const NAME: &str = "clipsculpt";

/// Roughness of the material: a matte surface, as the previews' Lambert shading draws it.
pub(crate) const ROUGHNESS: f32 = 0.8;

/// Writes an MTL file defining [`NAME`] with a white diffuse colour (×`map_Kd`, the texture file `texture`).
pub(crate) fn write_mtl_to(texture: &str, w: &mut impl Write) -> std::io::Result<()> {
    writeln!(w, "# clipsculpt {}", env!("CARGO_PKG_VERSION"))?;
    writeln!(w, "newmtl {NAME}")?;
    writeln!(w, "Ka 0 0 0\nKd 1 1 1\nKs 0 0 0\nd 1\nillum 1")?;
    // The PBR extension of MTL, which Blender's importer reads.
    writeln!(w, "Pr {ROUGHNESS}\nPm 0")?;
    writeln!(w, "map_Kd {texture}")?;
    Ok(())
}
