//! [`Grid`]: field values sampled on a regular lattice inside an axis-aligned box.
//!
//! Layout: x fastest, `index = (z·ny + y)·nx + x`; sample `i` along an axis sits at
//! `min + (i / (n − 1)) · (max − min)`, so the first and last samples lie on the box faces (as in Shap-E, where the
//! box is [−1, 1]³).

use rayon::prelude::*;

use super::error::ExportError;

/// Largest samples per axis of a cubic grid; grids may hold at most `MAX_GRID³` samples, which keeps every vertex
/// index (at most three per sample) below 2³¹.
pub(crate) const MAX_GRID: usize = 640;

/// An axis-aligned box `[min, max]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bounds {
    /// Lower corner.
    pub(crate) min: [f32; 3],
    /// Upper corner.
    pub(crate) max: [f32; 3],
}

impl Bounds {
    /// Shap-E's query box, [−1, 1]³.
    pub const SHAP_E: Bounds = Bounds {
        min: [-1.0; 3],
        max: [1.0; 3],
    };

    /// Position of a (possibly fractional or out-of-range) index on a lattice of `dims` samples spanning the box.
    pub(crate) fn lattice_point(&self, dims: [usize; 3], index: [f32; 3]) -> [f32; 3] {
        [0, 1, 2].map(|a| {
            let (lo, hi) = (self.min[a], self.max[a]);
            lo + index[a] / (dims[a] - 1) as f32 * (hi - lo)
        })
    }

    pub(crate) fn validate(&self) -> Result<(), ExportError> {
        let ok = (0..3).all(|a| {
            self.min[a].is_finite() && self.max[a].is_finite() && self.min[a] < self.max[a]
        });
        if ok {
            Ok(())
        } else {
            Err(ExportError::Invalid {
                what: "bounds",
                reason: format!(
                    "{:?}..{:?}: need finite min < max on every axis",
                    self.min, self.max
                ),
            })
        }
    }
}

/// Scalar samples on a regular 3D lattice (x fastest), positive inside by the Shap-E convention.
#[derive(Debug, Clone)]
pub struct Grid {
    dims: [usize; 3],
    bounds: Bounds,
    values: Vec<f32>,
}

impl Grid {
    /// Wraps `values` (length `nx·ny·nz`, x fastest) sampled on `dims` points spanning `bounds`.
    pub(crate) fn new(
        dims: [usize; 3],
        bounds: Bounds,
        values: Vec<f32>,
    ) -> Result<Self, ExportError> {
        bounds.validate()?;
        if dims.iter().any(|&n| n < 2) {
            return Err(ExportError::Invalid {
                what: "grid size",
                reason: format!("{dims:?}: need at least 2 samples per axis"),
            });
        }
        let expected = dims.iter().try_fold(1usize, |acc, &n| acc.checked_mul(n));
        let too_big = expected.is_none_or(|n| n > MAX_GRID * MAX_GRID * MAX_GRID);
        if too_big || expected != Some(values.len()) {
            return Err(ExportError::Invalid {
                what: "grid values",
                reason: format!(
                    "{} values for dims {dims:?} (need their product, at most {MAX_GRID}³)",
                    values.len()
                ),
            });
        }
        Ok(Self {
            dims,
            bounds,
            values,
        })
    }

    /// Samples `f` at every lattice point of an `n`³ grid over `bounds` (in parallel; for tests and analytic shapes).
    pub fn from_fn(
        n: usize,
        bounds: Bounds,
        f: impl Fn([f32; 3]) -> f32 + Sync,
    ) -> Result<Self, ExportError> {
        let dims = [n; 3];
        bounds.validate()?;
        if !(2..=MAX_GRID).contains(&n) {
            return Err(ExportError::Invalid {
                what: "grid size",
                reason: format!("{n}: need 2..={MAX_GRID} samples per axis"),
            });
        }
        let mut values = vec![0.0f32; n * n * n];
        let shell = Self {
            dims,
            bounds,
            values: Vec::new(),
        };
        values
            .par_chunks_mut(n * n)
            .enumerate()
            .for_each(|(z, layer)| {
                for (yx, v) in layer.iter_mut().enumerate() {
                    *v = f(shell.position([yx % n, yx / n, z].map(|i| i as f32)));
                }
            });
        Self::new(dims, bounds, values)
    }

    /// Samples per axis (nx, ny, nz).
    pub(crate) fn dims(&self) -> [usize; 3] {
        self.dims
    }

    /// The box the samples span.
    pub(crate) fn bounds(&self) -> Bounds {
        self.bounds
    }

    /// All values, x fastest.
    pub fn values(&self) -> &[f32] {
        &self.values
    }

    /// Value at integer index (x, y, z).
    #[cfg(test)]
    pub(crate) fn get(&self, x: usize, y: usize, z: usize) -> f32 {
        self.values[(z * self.dims[1] + y) * self.dims[0] + x]
    }

    /// Distance between neighbouring samples per axis.
    pub(crate) fn spacing(&self) -> [f32; 3] {
        [0, 1, 2].map(|a| (self.bounds.max[a] - self.bounds.min[a]) / (self.dims[a] - 1) as f32)
    }

    /// Position of a (possibly fractional or out-of-range) lattice index.
    pub(crate) fn position(&self, index: [f32; 3]) -> [f32; 3] {
        self.bounds.lattice_point(self.dims, index)
    }

    /// Smallest and largest value.
    pub(crate) fn range(&self) -> (f32, f32) {
        self.values
            .iter()
            .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &v| {
                (lo.min(v), hi.max(v))
            })
    }

    /// Errors if any value is NaN or infinite.
    pub(crate) fn check_finite(&self) -> Result<(), ExportError> {
        let count = self.values.par_iter().filter(|v| !v.is_finite()).count();
        if count == 0 {
            return Ok(());
        }
        let i = self.values.iter().position(|v| !v.is_finite()).unwrap_or(0);
        let [nx, ny, _] = self.dims;
        Err(ExportError::NonFiniteField {
            count,
            first: [i % nx, (i / nx) % ny, i / (nx * ny)],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_span_the_box_inclusively() {
        let g = Grid::from_fn(5, Bounds::SHAP_E, |p| p[0]).unwrap();
        assert_eq!(g.position([0.0; 3]), [-1.0; 3]);
        assert_eq!(g.position([4.0; 3]), [1.0; 3]);
        assert_eq!(g.spacing(), [0.5; 3]);
        // x fastest: value = x coordinate of sample (3, 1, 2) is −1 + 3·0.5.
        assert_eq!(g.get(3, 1, 2), 0.5);
    }

    #[test]
    fn rejects_bad_inputs() {
        assert!(Grid::new([1, 2, 2], Bounds::SHAP_E, vec![0.0; 4]).is_err());
        assert!(Grid::new([2, 2, 2], Bounds::SHAP_E, vec![0.0; 7]).is_err());
        let flat = Bounds {
            min: [0.0; 3],
            max: [1.0, 0.0, 1.0],
        };
        assert!(Grid::new([2, 2, 2], flat, vec![0.0; 8]).is_err());
        assert!(Grid::from_fn(1, Bounds::SHAP_E, |_| 0.0).is_err());
    }

    #[test]
    fn reports_non_finite_values() {
        let mut v = vec![0.0; 8];
        v[5] = f32::NAN;
        let err = Grid::new([2, 2, 2], Bounds::SHAP_E, v)
            .unwrap()
            .check_finite()
            .unwrap_err();
        assert!(matches!(
            err,
            ExportError::NonFiniteField {
                count: 1,
                first: [1, 0, 1]
            }
        ));
    }
}
