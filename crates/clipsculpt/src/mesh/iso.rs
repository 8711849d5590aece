//! The iso level a mesh is extracted at: a given level, or the rule that chooses it from the
//! sampled field alone (`docs/mesh.md`, "The iso level").
//!
//! The rule: level 0 (the decoder's surface) when the grid's values lie on both sides of 0;
//! otherwise the midpoint of the grid's range, `(min + max) / 2`. A field that is nowhere
//! positive still rises towards what it comes closest to calling inside; halfway between its
//! outside plateau and that peak is where its profile is steepest for a step-like field, the
//! threshold that is least sensitive to either plateau's value. It was fixed from that argument
//! before any evaluation caption was meshed with it.

use serde::{Deserialize, Serialize};

/// How the level was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IsoRule {
    /// Given by the caller (`clipsculpt export --level`).
    Given,
    /// The rule found values on both sides of 0: the decoder's own surface.
    Zero,
    /// The rule found 0 outside the field's range and took the midpoint of the range.
    Midpoint,
}

impl std::fmt::Display for IsoRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Given => "given",
            Self::Zero => "zero",
            Self::Midpoint => "midpoint",
        })
    }
}

/// The level to extract at: a fixed one, or the rule's choice from the sampled grid.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Level {
    /// This level, whatever the field.
    Fixed(f32),
    /// 0 when the field crosses it, else the midpoint of its range ([`choose`]).
    FromField,
}

impl From<f32> for Level {
    fn from(level: f32) -> Self {
        Self::Fixed(level)
    }
}

/// The level a mesh was extracted at and how it was chosen.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Iso {
    /// The iso level.
    pub level: f32,
    /// How it was chosen.
    pub rule: IsoRule,
}

/// The level for `level` on a field whose grid values range over `[min, max]`.
pub fn choose(level: Level, (min, max): (f32, f32)) -> Iso {
    match level {
        Level::Fixed(level) => Iso {
            level,
            rule: IsoRule::Given,
        },
        Level::FromField if min < 0.0 && max > 0.0 => Iso {
            level: 0.0,
            rule: IsoRule::Zero,
        },
        Level::FromField => Iso {
            level: 0.5 * (min + max),
            rule: IsoRule::Midpoint,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mesh::export::{export_field, Format};
    use crate::mesh::field::FnField;
    use crate::mesh::shapes;
    use candle_core::Device;

    #[test]
    fn the_rule_keeps_zero_when_the_field_crosses_it() {
        let zero = choose(Level::FromField, (-0.9, 0.4));
        assert_eq!((zero.level, zero.rule), (0.0, IsoRule::Zero));
        let mid = choose(Level::FromField, (-0.9, -0.1));
        assert_eq!((mid.level, mid.rule), (-0.5, IsoRule::Midpoint));
        let above = choose(Level::FromField, (0.2, 1.0));
        assert_eq!((above.level, above.rule), (0.6, IsoRule::Midpoint));
        assert_eq!(choose(0.3.into(), (-1.0, 1.0)).rule, IsoRule::Given);
    }

    /// A sphere's field lifted to be positive everywhere has no surface at 0 (level 0 would give
    /// the grid's box); the rule meshes the sphere and says so. The unlifted field is meshed at 0,
    /// exactly as a fixed level 0 meshes it.
    #[test]
    fn the_rule_meshes_a_field_with_no_surface_at_zero() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let export = |f: &dyn crate::mesh::Field, level: Level| {
            export_field(
                f,
                &Device::Cpu,
                24,
                level,
                &crate::mesh::AssetOptions::RAW,
                &[Format::Ply],
                dir.path(),
                "x",
            )
        };
        let lifted = FnField(|p: [f32; 3]| (shapes::sphere(p, [0.0; 3], 0.5) + 2.0, [0.0; 3]));
        let r = export(&lifted, Level::FromField)?;
        assert_eq!(r.iso.rule, IsoRule::Midpoint);
        assert!(r.iso.level > 1.0, "{:?}", r.iso);
        assert!(r.stats.is_clean_solid(), "{:?}", r.stats);
        // The sphere of the level's radius (2.5 − level), not the grid's box (volume 8).
        let radius = 2.5 - f64::from(r.iso.level);
        let ball = 4.0 / 3.0 * std::f64::consts::PI * radius.powi(3);
        let volume = r.stats.signed_volume;
        assert!((volume / ball - 1.0).abs() < 0.05, "{volume} vs {ball}");
        let sphere = FnField(|p: [f32; 3]| (shapes::sphere(p, [0.0; 3], 0.5), [0.0; 3]));
        let auto = export(&sphere, Level::FromField)?;
        let fixed = export(&sphere, Level::Fixed(0.0))?;
        assert_eq!((auto.iso.level, auto.iso.rule), (0.0, IsoRule::Zero));
        assert_eq!(auto.stats.faces, fixed.stats.faces);
        assert_eq!(auto.stats.signed_volume, fixed.stats.signed_volume);
        Ok(())
    }
}
