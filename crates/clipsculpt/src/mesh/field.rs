//! Fields and graph-free grid sampling.
//!
//! A [`Field`] maps points to a scalar (signed distance or density, **positive inside** as in Shap-E's STF `sdf`
//! channel, `docs/shap-e.md`, "Mesh extraction") and a linear RGB colour. [`sample_grid`] evaluates it on a G³ lattice
//! in chunks of plain tensors on the caller's device; [`sample_colours`] evaluates it at mesh vertices. Outputs are
//! detached, so a field that still holds `Var`s builds no autograd graph here; callers should drop their
//! optimisation state (optimiser moments, saved activations) before export and may call
//! [`super::memory::release_device_caches`].

use candle_core::{DType, Device, Tensor};

use super::error::ExportError;
use super::grid::{Bounds, Grid, MAX_GRID};

/// Points per field evaluation when the caller has no preference (Shap-E uses 4096 on the GPU).
pub const DEFAULT_CHUNK: usize = 32_768;

/// A scalar + colour field evaluated on batches of points.
pub trait Field {
    /// Evaluates `points` `(n, 3)` f32 on some device. Returns the scalar `(n)` or `(n, 1)` (positive inside) and
    /// the colour `(n, 3)`, linear RGB in [0, 1], both on any device and any float dtype.
    fn eval(&self, points: &Tensor) -> candle_core::Result<(Tensor, Tensor)>;

    /// The scalar alone (as [`Field::eval`] returns it); grid sampling calls this, so a field
    /// may skip work on colours that would be thrown away.
    fn eval_scalar(&self, points: &Tensor) -> candle_core::Result<Tensor> {
        Ok(self.eval(points)?.0)
    }
}

/// A field from a plain Rust closure `point -> (value, linear rgb)`, evaluated on the host (analytic shapes, tests).
pub struct FnField<F>(pub F);

impl<F> Field for FnField<F>
where
    F: Fn([f32; 3]) -> (f32, [f32; 3]),
{
    fn eval(&self, points: &Tensor) -> candle_core::Result<(Tensor, Tensor)> {
        let pts = points.to_dtype(DType::F32)?.to_vec2::<f32>()?;
        let mut values = Vec::with_capacity(pts.len());
        let mut rgb = Vec::with_capacity(pts.len() * 3);
        for p in pts {
            let (v, c) = (self.0)([p[0], p[1], p[2]]);
            values.push(v);
            rgb.extend_from_slice(&c);
        }
        let n = values.len();
        Ok((
            Tensor::from_vec(values, n, points.device())?,
            Tensor::from_vec(rgb, (n, 3), points.device())?,
        ))
    }
}

/// Evaluates `field` on a `grid_size`³ lattice over `bounds`, `chunk` points at a time, on `device`.
///
/// Points are sent in grid order (x fastest), so chunk `c` covers flat indices `c·chunk ..`. Only the scalar is
/// kept; colours are taken later at the vertices ([`sample_colours`]), as Shap-E does.
pub fn sample_grid(
    field: &dyn Field,
    device: &Device,
    grid_size: usize,
    bounds: Bounds,
    chunk: usize,
) -> Result<Grid, ExportError> {
    if !(2..=MAX_GRID).contains(&grid_size) {
        return Err(ExportError::Invalid {
            what: "grid size",
            reason: format!("{grid_size}: need 2..={MAX_GRID} samples per axis (Shap-E uses 128)"),
        });
    }
    bounds.validate()?;
    let chunk = chunk.max(1);
    let n = grid_size;
    let total = n * n * n;
    let mut values = Vec::with_capacity(total);
    let mut points = Vec::with_capacity(chunk.min(total) * 3);
    for start in (0..total).step_by(chunk) {
        let end = (start + chunk).min(total);
        points.clear();
        for flat in start..end {
            let idx = [flat % n, (flat / n) % n, flat / (n * n)].map(|i| i as f32);
            points.extend_from_slice(&bounds.lattice_point([n; 3], idx));
        }
        let chunk_values = eval_scalar(field, device, &points)?;
        values.extend_from_slice(&chunk_values);
    }
    Grid::new([n; 3], bounds, values)
}

/// Evaluates the colour of `field` at `positions`, `chunk` points at a time; returns linear RGB clamped to [0, 1]
/// (a non-finite channel becomes 0).
pub fn sample_colours(
    field: &dyn Field,
    device: &Device,
    positions: &[[f32; 3]],
    chunk: usize,
) -> Result<Vec<[f32; 3]>, ExportError> {
    let mut out = Vec::with_capacity(positions.len());
    for block in positions.chunks(chunk.max(1)) {
        let flat: Vec<f32> = block.iter().flatten().copied().collect();
        let n = block.len();
        let (_, rgb) = eval_points(field, device, flat)?;
        let rgb = to_host(&rgb, n, 3)?;
        out.extend(rgb.chunks_exact(3).map(|c| {
            [c[0], c[1], c[2]].map(|v| {
                if v.is_finite() {
                    v.clamp(0.0, 1.0)
                } else {
                    0.0
                }
            })
        }));
    }
    Ok(out)
}

fn eval_scalar(
    field: &dyn Field,
    device: &Device,
    points: &[f32],
) -> Result<Vec<f32>, ExportError> {
    let n = points.len() / 3;
    let wrap = |source| ExportError::Field { points: n, source };
    let points = Tensor::from_slice(points, (n, 3), device).map_err(wrap)?;
    let values = field.eval_scalar(&points).map_err(wrap)?.detach();
    to_host(&values, n, 1)
}

fn eval_points(
    field: &dyn Field,
    device: &Device,
    flat: Vec<f32>,
) -> Result<(Tensor, Tensor), ExportError> {
    let n = flat.len() / 3;
    let wrap = |source| ExportError::Field { points: n, source };
    let points = Tensor::from_vec(flat, (n, 3), device).map_err(wrap)?;
    let (values, rgb) = field.eval(&points).map_err(wrap)?;
    Ok((values.detach(), rgb.detach()))
}

/// Copies a field output to the host as f32, checking it holds `n·width` values.
fn to_host(t: &Tensor, n: usize, width: usize) -> Result<Vec<f32>, ExportError> {
    let wrap = |source| ExportError::Field { points: n, source };
    if t.elem_count() != n * width {
        return Err(ExportError::Field {
            points: n,
            source: candle_core::Error::Msg(format!(
                "field returned shape {:?}, expected {n}×{width} values",
                t.dims()
            )),
        });
    }
    t.to_dtype(DType::F32)
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1::<f32>())
        .map_err(wrap)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sphere() -> FnField<impl Fn([f32; 3]) -> (f32, [f32; 3])> {
        FnField(|p: [f32; 3]| {
            let r = (p[0] * p[0] + p[1] * p[1] + p[2] * p[2]).sqrt();
            (0.5 - r, [p[0].abs(), 0.5, 2.0])
        })
    }

    #[test]
    fn grid_matches_direct_evaluation_across_chunks() {
        // 7 is not a divisor of 5³ = 125, so the last chunk is partial.
        let g = sample_grid(&sphere(), &Device::Cpu, 5, Bounds::SHAP_E, 7).unwrap();
        let direct = Grid::from_fn(5, Bounds::SHAP_E, |p| sphere().0(p).0).unwrap();
        assert_eq!(g.values(), direct.values());
        assert_eq!(g.get(2, 2, 2), 0.5);
    }

    #[test]
    fn colours_are_clamped() {
        let c = sample_colours(&sphere(), &Device::Cpu, &[[-0.25, 0.0, 0.0]], 3).unwrap();
        assert_eq!(c, vec![[0.25, 0.5, 1.0]]);
    }

    #[test]
    fn wrong_output_shape_is_an_error() {
        struct Bad;
        impl Field for Bad {
            fn eval(&self, p: &Tensor) -> candle_core::Result<(Tensor, Tensor)> {
                Ok((
                    Tensor::zeros(1, DType::F32, p.device())?,
                    Tensor::zeros((1, 3), DType::F32, p.device())?,
                ))
            }
        }
        let err = sample_grid(&Bad, &Device::Cpu, 3, Bounds::SHAP_E, 8).unwrap_err();
        assert!(err.to_string().contains("expected 8×1"), "{err}");
    }
}
