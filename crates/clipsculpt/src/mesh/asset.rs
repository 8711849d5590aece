//! From the marching-cubes mesh to the asset a Blender user drops in (`docs/mesh.md`): optional Taubin
//! smoothing, simplification to a face count, a UV atlas with the field's colour baked into a texture, and real
//! size with the origin at the base centre. [`AssetOptions`] holds every default.

use std::time::Instant;

use candle_core::Device;

use super::error::ExportError;
use super::field::Field;
use super::mesh::Mesh;
use super::simplify::{simplify, SimplifyReport};
use super::texture::Texture;
use super::{atlas, bake, placement, smooth};

/// Fewest faces `--faces` accepts (below this a closed shape is a handful of facets).
pub const MIN_FACES: usize = 100;
/// Most faces `--faces` accepts.
pub const MAX_FACES: usize = 10_000_000;
/// Texture sides `--texture` accepts.
pub const TEXTURE_SIDES: std::ops::RangeInclusive<u32> = 16..=8192;
/// Most Taubin iterations `--smooth` accepts.
pub const MAX_SMOOTH: usize = 1000;

/// How the extracted mesh becomes the exported asset. [`Default`] is what `generate` and `export` write.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct AssetOptions {
    /// Simplify to about this many triangles (`None`: the full marching-cubes mesh).
    pub faces: Option<usize>,
    /// Bake the colour into a texture of this side in texels (`None`: vertex colours only).
    pub texture: Option<u32>,
    /// Taubin λ|μ smoothing iterations before simplification (0: none).
    pub smooth: usize,
    /// Height of the exported object in metres, standing on z = 0 with its origin at the base centre
    /// (`None`: the field's own units and origin).
    pub height: Option<f32>,
}

impl Default for AssetOptions {
    fn default() -> Self {
        Self {
            faces: Some(20_000),
            texture: None,
            smooth: 0,
            height: Some(1.0),
        }
    }
}

impl AssetOptions {
    /// The marching-cubes mesh as extracted: full resolution, vertex colours, the field's frame.
    pub const RAW: AssetOptions = AssetOptions {
        faces: None,
        texture: None,
        smooth: 0,
        height: None,
    };

    /// Checks every value; the error names the setting and its range.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(f) = self.faces {
            if !(MIN_FACES..=MAX_FACES).contains(&f) {
                return Err(format!(
                    "faces {f} is out of range ({MIN_FACES}..={MAX_FACES}, or none for the full mesh)"
                ));
            }
        }
        if let Some(t) = self.texture {
            if !TEXTURE_SIDES.contains(&t) {
                let (lo, hi) = (TEXTURE_SIDES.start(), TEXTURE_SIDES.end());
                return Err(format!(
                    "texture {t} is out of range ({lo}..={hi} texels a side, or none)"
                ));
            }
        }
        if self.smooth > MAX_SMOOTH {
            return Err(format!(
                "smooth {} is over {MAX_SMOOTH} iterations",
                self.smooth
            ));
        }
        if let Some(h) = self.height {
            if !(h.is_finite() && h > 0.0 && h <= 10_000.0) {
                return Err(format!(
                    "height {h} must be a positive number of metres (at most 10000)"
                ));
            }
        }
        Ok(())
    }
}

/// A mesh ready to write: its vertices and, when baked, the texture over them.
#[derive(Debug, Clone, Default)]
pub struct Asset {
    /// The mesh (split at UV seams when textured).
    pub mesh: Mesh,
    /// The baked base colour, when asked for.
    pub texture: Option<Texture>,
}

/// What [`build`] did (`report.json`'s `asset`).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct AssetReport {
    /// Faces before and after simplification and its error, when it ran.
    pub simplify: Option<SimplifyReport>,
    /// Volumetric change of the smoothing, as signed volume after / before (when it ran).
    pub smooth_volume_ratio: Option<f64>,
    /// Texture side, when baked.
    pub texture: Option<u32>,
    /// The exported object's size in metres along x, y, z (z up), when placed.
    pub size_m: Option<[f32; 3]>,
    /// Seconds spent smoothing, simplifying, unwrapping and baking.
    pub seconds: [f64; 4],
}

/// Turns `mesh` (coloured, in `field`'s frame) into the asset `opts` asks for; the texture is baked from `field`
/// before the mesh is scaled and moved.
pub(crate) fn build(
    mut mesh: Mesh,
    field: &dyn Field,
    device: &Device,
    opts: &AssetOptions,
    chunk: usize,
) -> Result<(Asset, AssetReport), ExportError> {
    opts.validate().map_err(|reason| ExportError::Invalid {
        what: "asset options",
        reason,
    })?;
    let mut report = AssetReport::default();
    let clock = Instant::now();
    if opts.smooth > 0 {
        let before = mesh.stats().signed_volume;
        smooth::taubin(&mut mesh, opts.smooth);
        report.smooth_volume_ratio = Some(mesh.stats().signed_volume / before);
    }
    let t1 = Instant::now();
    if let Some(target) = opts.faces {
        let (simplified, r) = simplify(&mesh, target)?;
        mesh = simplified;
        report.simplify = Some(r);
    }
    let t2 = Instant::now();
    let mut texture = None;
    let mut t3 = t2;
    if let Some(size) = opts.texture {
        let (unwrapped, uvs) = atlas::unwrap(&mesh, size)?;
        t3 = Instant::now();
        let image = bake::bake(field, device, &unwrapped, &uvs, size, chunk)?;
        mesh = unwrapped;
        texture = Some(Texture { uvs, image });
        report.texture = Some(size);
    }
    let t4 = Instant::now();
    if let Some(height) = opts.height {
        placement::place(&mut mesh, height);
        let (lo, hi) = mesh.bounds();
        report.size_m = Some([0, 1, 2].map(|a| hi[a] - lo[a]));
    }
    let secs = |a: Instant, b: Instant| (b - a).as_secs_f64();
    report.seconds = [secs(clock, t1), secs(t1, t2), secs(t2, t3), secs(t3, t4)];
    Ok((Asset { mesh, texture }, report))
}
