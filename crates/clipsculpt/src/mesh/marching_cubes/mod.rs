//! Marching cubes over a [`Grid`], our own implementation (tables in [`super::tables`]).
//!
//! * **Padding.** The grid is padded on every side by one virtual layer of an outside value (Shap-E pads with −1,
//!   `docs/shap-e.md`, "Mesh extraction"), so every surface closes, also where the field is inside at the box faces.
//! * **Vertices.** One vertex per crossed grid edge, shared by the cells around it (indexed output, no welding).
//!   Inside means `value > level`; the vertex sits at `t = (v₁ − level)/(v₁ − v₂)` along the edge from its lower
//!   to its upper end.
//! * **Winding and normals.** Triangles are counter-clockwise seen from outside, i.e. the signed volume is positive
//!   for a field that is positive inside. Normals are −∇f from central differences on the padded grid, blended
//!   along the edge; where the gradient vanishes the edge direction (inside → outside) is used.
//! * **Speed.** The grid is swept in z-slabs (in parallel with rayon, or as one slab). Each slab keeps two layers of
//!   inside flags, the inside span of every row (so empty stretches are skipped without looking at their cells),
//!   and edge→vertex caches for the two layers: no allocation per cell. Vertex numbers are slab-local and fixed up
//!   once at the end.
//!
//! [`McMode::ShapEParity`] reproduces `MeshDecoder` exactly: vertices are numbered by Shap-E's global edge id and
//! placed with its coordinate quirk (padded index `v` maps to `min + v/(N − 1)·size` with `N = G + 2`, whereas the
//! sample was taken at `min + (v − 1)/(G − 1)·size`; on Shap-E's [−1, 1]³ this scales the mesh by (G − 1)/(G + 1)
//! about the origin), the pad value is −1 and `t` is not clamped.
//! [`McMode::Exact`] puts the vertices on the segment between the two sampled positions (the pad layer sits one
//! spacing outside the box) and clamps `t` to [`T_EPS`, 1 − `T_EPS`] so that a sample lying exactly on the level
//! cannot collapse several vertices onto one point (zero-area triangles).

use rayon::prelude::*;

mod assemble;
mod sweep;

use assemble::assemble;
use sweep::{SlabOut, Sweep};

use super::error::ExportError;
use super::grid::Grid;
use super::mesh::{Mesh, DEFAULT_COLOUR};

/// Smallest edge parameter in [`McMode::Exact`] (keeps vertices off the grid samples).
pub(crate) const T_EPS: f32 = 1e-3;

/// Where vertices go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum McMode {
    /// Vertices on the segment between sampled positions (default).
    #[default]
    Exact,
    /// Bit-for-bit Shap-E `MeshDecoder` geometry and vertex order, coordinate quirk included (tests, fixtures).
    ShapEParity,
}

/// Marching-cubes settings.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct McOptions {
    /// Iso level; values above it are inside.
    pub level: f32,
    /// Vertex placement.
    pub mode: McMode,
    /// Sweep slabs on all rayon threads (`false`: one slab on the calling thread).
    pub parallel: bool,
}

impl Default for McOptions {
    fn default() -> Self {
        Self {
            level: 0.0,
            mode: McMode::Exact,
            parallel: true,
        }
    }
}

/// Extracts the surface where `grid` crosses `opts.level`, closed by the outside padding.
///
/// Errors: [`ExportError::NonFiniteField`] when the grid holds NaN/inf, [`ExportError::EmptySurface`] when nothing
/// is inside. Colours are [`DEFAULT_COLOUR`] until sampled.
pub fn marching_cubes(grid: &Grid, opts: &McOptions) -> Result<Mesh, ExportError> {
    grid.check_finite()?;
    if !opts.level.is_finite() {
        return Err(ExportError::Invalid {
            what: "level",
            reason: format!("{}: need a finite number", opts.level),
        });
    }
    let sweep = Sweep::new(grid, opts);
    let cell_layers = sweep.np[2] - 1;
    let slabs = if opts.parallel {
        (rayon::current_num_threads() * 4).min(cell_layers)
    } else {
        1
    };
    let bounds: Vec<(usize, usize)> = (0..slabs)
        .map(|s| (s * cell_layers / slabs, (s + 1) * cell_layers / slabs))
        .collect();
    let parts: Vec<SlabOut> = if slabs > 1 {
        bounds
            .par_iter()
            .map(|&(k0, k1)| sweep.slab(k0, k1))
            .collect()
    } else {
        bounds.iter().map(|&(k0, k1)| sweep.slab(k0, k1)).collect()
    };
    let mut mesh = assemble(parts, opts.mode == McMode::ShapEParity);
    if mesh.faces.is_empty() {
        let (min, max) = grid.range();
        return Err(ExportError::EmptySurface {
            level: opts.level,
            min,
            max,
        });
    }
    mesh.colours = vec![DEFAULT_COLOUR; mesh.positions.len()];
    Ok(mesh)
}

#[cfg(test)]
mod tests;
