//! [`ExportError`]: everything that can go wrong between a field and the files on disk.

use std::path::PathBuf;

/// An error from grid sampling, surface extraction or export.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// No grid value lies above the level (or all of them do and the border is not padded), so there is no surface.
    #[error(
        "no surface at level {level}: the field ranges over [{min}, {max}] and the surface needs values on both \
         sides; choose a level inside that range, or check that the field is positive inside (Shap-E convention)"
    )]
    EmptySurface {
        /// The iso level asked for.
        level: f32,
        /// Smallest grid value.
        min: f32,
        /// Largest grid value.
        max: f32,
    },
    /// The grid holds NaN or infinite values.
    #[error(
        "the field has {count} non-finite values (first at grid index {first:?}); the model produced NaN or inf, \
         re-run the step that produced the latent or check its inputs"
    )]
    NonFiniteField {
        /// How many values are not finite.
        count: usize,
        /// Grid index (x, y, z) of the first one.
        first: [usize; 3],
    },
    /// The grid or the export settings are malformed.
    #[error("invalid {what}: {reason}")]
    Invalid {
        /// Which input is wrong (e.g. "grid size", "bounds").
        what: &'static str,
        /// What is wrong and what is expected.
        reason: String,
    },
    /// The field evaluation failed (device error, shape mismatch, out of memory).
    #[error("evaluating the field on {points} points: {source}; try a smaller chunk size")]
    Field {
        /// Points in the failing chunk.
        points: usize,
        /// The candle error.
        source: candle_core::Error,
    },
    /// Writing a file failed.
    #[error("writing {}: {source}", path.display())]
    Io {
        /// The file being written.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// Encoding a preview image failed.
    #[error("encoding preview {}: {source}", path.display())]
    Image {
        /// The image being written.
        path: PathBuf,
        /// The encoder error.
        source: image::ImageError,
    },
}

impl ExportError {
    /// Wraps an I/O error with the path it concerns.
    pub(crate) fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Self {
        let path = path.into();
        move |source| Self::Io { path, source }
    }
}
