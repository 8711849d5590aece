//! Activations with an analytic backward computed on detached tensors.
//!
//! candle's own backward rules for `gelu_erf`, `tanh` and friends are written with the tracked
//! argument, so each gradient drags a graph of its temporaries along: measured on an 8 MiB input,
//! `gelu_erf` backward peaks at 128 MiB and `tanh` at 56 MiB, and the input's gradient keeps
//! them alive. Here the derivative is evaluated once from the detached input: one temporary.

use std::sync::Arc;

use rayon::prelude::*;

use candle_core::{CpuStorage, CustomOp1, CustomOp3, DType, Layout, Result, Shape, Tensor};
use serde::{Deserialize, Serialize};

use super::contiguous_slice;
use super::rows::{by_rows, fused_on};
use crate::autodiff::vjp::attach;
use crate::kernels::{self, normal_cdf};

/// An elementwise activation, named as in the configs (`hidden_act`, `act_fn`,
/// `time_embed_act_fn`): the one activation type of the crate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Activation {
    /// Exact GELU, `x·Φ(x)` with the error function (PyTorch `gelu`, transformers'
    /// `GELUActivation`, diffusers `"gelu"`), not the tanh form.
    #[serde(rename = "gelu", alias = "gelu_erf")]
    GeluErf,
    /// GELU's tanh approximation (`gelu_new`, `gelu_pytorch_tanh`).
    #[serde(alias = "gelu_new", alias = "gelu_pytorch_tanh")]
    GeluTanh,
    /// `x·σ(1.702·x)`, the approximation OpenAI's CLIP was trained with.
    QuickGelu,
    /// `x·σ(x)` (`silu`, `swish`).
    #[serde(alias = "swish")]
    Silu,
    /// `max(x, 0)`.
    Relu,
    /// Hyperbolic tangent.
    Tanh,
    /// Logistic sigmoid.
    Sigmoid,
}

impl Activation {
    /// Applies the activation; differentiable with respect to `x`.
    pub(crate) fn forward(self, x: &Tensor) -> Result<Tensor> {
        let xd = x.detach();
        let y = match self {
            Activation::GeluErf => gelu_erf(&xd)?,
            Activation::GeluTanh => xd.gelu()?,
            Activation::QuickGelu => (&xd * candle_nn::ops::sigmoid(&(&xd * 1.702)?)?)?,
            Activation::Silu => xd.silu()?,
            Activation::Relu => xd.relu()?,
            Activation::Tanh => xd.tanh()?,
            Activation::Sigmoid => sigmoid(&xd)?,
        };
        attach(
            "activation",
            y,
            &[x],
            Arc::new(move |v| Ok(vec![Some(self.vjp(&v.inputs[0], v.output, v.grad)?)])),
        )
    }

    /// `g·f'(x)` from the input alone, for activations whose derivative does not use the output
    /// (all but tanh and sigmoid); bitwise what the node's backward gives (for hand-written VJPs).
    pub(crate) fn input_grad(self, x: &Tensor, g: &Tensor) -> Result<Tensor> {
        if matches!(self, Activation::Tanh | Activation::Sigmoid) {
            candle_core::bail!("{self:?}: the derivative needs the output");
        }
        self.vjp(x, x, g)
    }

    /// `g·f'(x)`: one fused pass on the CPU (no temporaries), composed tensor ops over row
    /// chunks elsewhere.
    fn vjp(self, x: &Tensor, y: &Tensor, g: &Tensor) -> Result<Tensor> {
        let cpu_float = matches!(x.dtype(), DType::F32 | DType::F64);
        if fused_on(x.device()) && cpu_float && g.dtype() == x.dtype() {
            let (x, y, g) = (x.contiguous()?, y.contiguous()?, g.contiguous()?);
            return x.apply_op3_no_bwd(&y, &g, &FusedVjp(self));
        }
        by_rows(&[x, y, g], |p| &p[2] * self.derivative(&p[0], &p[1])?)
    }

    /// `f'(x)` for one element, given `x` and `y = f(x)` (the CPU kernel).
    fn derivative_scalar(self, x: f64, y: f64) -> f64 {
        let sigmoid = |z: f64| 1.0 / (1.0 + (-z).exp());
        match self {
            Activation::GeluErf => {
                normal_cdf(x) + x * (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt()
            }
            Activation::GeluTanh => {
                let c = (2.0 / std::f64::consts::PI).sqrt();
                let t = (c * (x + 0.044715 * x * x * x)).tanh();
                0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * c * (1.0 + 3.0 * 0.044715 * x * x)
            }
            Activation::QuickGelu => {
                let s = sigmoid(1.702 * x);
                s + 1.702 * x * s * (1.0 - s)
            }
            Activation::Silu => {
                let s = sigmoid(x);
                s + x * s * (1.0 - s)
            }
            Activation::Relu => f64::from(u8::from(x > 0.0)),
            Activation::Tanh => 1.0 - y * y,
            Activation::Sigmoid => y * (1.0 - y),
        }
    }

    /// `f'(x)`, given `x` and `y = f(x)` (both detached).
    fn derivative(self, x: &Tensor, y: &Tensor) -> Result<Tensor> {
        match self {
            Activation::GeluErf => {
                // d/dx x·Φ(x) = Φ(x) + x·φ(x)
                let cdf = ((x / std::f64::consts::SQRT_2)?.erf()? + 1.0)? * 0.5;
                let pdf =
                    ((x.sqr()? * -0.5)?.exp()? * (1.0 / (2.0 * std::f64::consts::PI).sqrt()))?;
                cdf? + (x * pdf)?
            }
            Activation::GeluTanh => {
                // y = ½x(1 + tanh u), u = c(x + 0.044715x³): y' = ½(1 + t) + ½x(1 − t²)·c(1 + 3·0.044715x²)
                let c = (2.0 / std::f64::consts::PI).sqrt();
                let u = ((x + (x.powf(3.0)? * 0.044715)?)? * c)?;
                let t = u.tanh()?;
                let du = ((x.sqr()? * (3.0 * 0.044715))? + 1.0)? * c;
                let left = ((&t + 1.0)? * 0.5)?;
                let right = ((x * (t.sqr()?.neg()? + 1.0)?)? * du?)? * 0.5;
                left + right?
            }
            Activation::QuickGelu => {
                // d/dx x·σ(ax) = σ(ax) + a·x·σ(ax)(1 − σ(ax))
                let s = sigmoid(&(x * 1.702)?)?;
                let ds = (&s * (s.neg()? + 1.0)?)?;
                s + ((x * ds)? * 1.702)?
            }
            Activation::Silu => {
                let s = sigmoid(x)?;
                let ds = (&s * (s.neg()? + 1.0)?)?;
                s + (x * ds)?
            }
            Activation::Relu => x.gt(0.0)?.to_dtype(x.dtype()),
            Activation::Tanh => y.sqr()?.neg()? + 1.0,
            Activation::Sigmoid => y * (y.neg()? + 1.0)?,
        }
    }
}

/// Elements per rayon task of [`FusedVjp`].
const PAR_MIN: usize = 1 << 14;

/// The CPU kernel `(x, y, g) -> g·f'(x)` over contiguous f32/f64 storages, elements in parallel
/// (each element's value is the same as a serial pass's).
struct FusedVjp(Activation);

impl CustomOp3 for FusedVjp {
    fn name(&self) -> &'static str {
        "activation_vjp"
    }

    fn cpu_fwd(
        &self,
        x: &CpuStorage,
        lx: &Layout,
        y: &CpuStorage,
        ly: &Layout,
        g: &CpuStorage,
        lg: &Layout,
    ) -> Result<(CpuStorage, Shape)> {
        const OP: &str = "activation_vjp";
        let act = self.0;
        if act == Activation::GeluErf {
            return Ok((gelu_erf_grad_cpu(x, lx, g, lg)?, lx.shape().clone()));
        }
        let out = match (x, y, g) {
            (CpuStorage::F32(x), CpuStorage::F32(y), CpuStorage::F32(g)) => {
                let (x, y, g) = (
                    contiguous_slice(x, lx, OP)?,
                    contiguous_slice(y, ly, OP)?,
                    contiguous_slice(g, lg, OP)?,
                );
                CpuStorage::F32(
                    x.par_iter()
                        .zip(y)
                        .zip(g)
                        .with_min_len(PAR_MIN)
                        .map(|((&x, &y), &g)| g * act.derivative_scalar(x as f64, y as f64) as f32)
                        .collect(),
                )
            }
            (CpuStorage::F64(x), CpuStorage::F64(y), CpuStorage::F64(g)) => {
                let (x, y, g) = (
                    contiguous_slice(x, lx, OP)?,
                    contiguous_slice(y, ly, OP)?,
                    contiguous_slice(g, lg, OP)?,
                );
                CpuStorage::F64(
                    x.par_iter()
                        .zip(y)
                        .zip(g)
                        .with_min_len(PAR_MIN)
                        .map(|((&x, &y), &g)| g * act.derivative_scalar(x, y))
                        .collect(),
                )
            }
            _ => candle_core::bail!("activation_vjp: unsupported dtype (bug)"),
        };
        Ok((out, lx.shape().clone()))
    }
}

/// `g·gelu'(x)` over contiguous f32/f64 storages with the vectorised kernel.
fn gelu_erf_grad_cpu(
    x: &CpuStorage,
    lx: &Layout,
    g: &CpuStorage,
    lg: &Layout,
) -> Result<CpuStorage> {
    const OP: &str = "gelu_erf_vjp";
    Ok(match (x, g) {
        (CpuStorage::F32(x), CpuStorage::F32(g)) => {
            let (x, g) = (contiguous_slice(x, lx, OP)?, contiguous_slice(g, lg, OP)?);
            CpuStorage::F32(kernels::gelu_erf_grad(x, g))
        }
        (CpuStorage::F64(x), CpuStorage::F64(g)) => {
            let (x, g) = (contiguous_slice(x, lx, OP)?, contiguous_slice(g, lg, OP)?);
            CpuStorage::F64(kernels::gelu_erf_grad(x, g))
        }
        _ => candle_core::bail!("gelu_erf_vjp: unsupported dtype (bug)"),
    })
}

/// The exact GELU `x·Φ(x)`: the vectorised kernel on f32 CPU tensors (within 1e-6 of candle's
/// libm-grade `gelu_erf`), candle's `gelu_erf` elsewhere (f64 keeps its full precision for the
/// finite-difference tests).
fn gelu_erf(x: &Tensor) -> Result<Tensor> {
    if fused_on(x.device()) && x.dtype() == DType::F32 {
        x.contiguous()?.apply_op1_no_bwd(&GeluErfCpu)
    } else {
        x.gelu_erf()
    }
}

/// The f32 CPU forward of [`gelu_erf`].
struct GeluErfCpu;

impl CustomOp1 for GeluErfCpu {
    fn name(&self) -> &'static str {
        "gelu_erf"
    }

    fn cpu_fwd(&self, x: &CpuStorage, lx: &Layout) -> Result<(CpuStorage, Shape)> {
        let CpuStorage::F32(x) = x else {
            candle_core::bail!("gelu_erf: unsupported dtype (bug)")
        };
        let x = contiguous_slice(x, lx, "gelu_erf")?;
        Ok((CpuStorage::F32(kernels::gelu_erf(x)), lx.shape().clone()))
    }
}

fn sigmoid(x: &Tensor) -> Result<Tensor> {
    (x.neg()?.exp()? + 1.0)?.recip()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::autodiff::ops::testing::{check_grad, randn};
    use candle_core::Device;

    const ALL: [Activation; 7] = [
        Activation::GeluErf,
        Activation::GeluTanh,
        Activation::QuickGelu,
        Activation::Silu,
        Activation::Relu,
        Activation::Tanh,
        Activation::Sigmoid,
    ];

    #[test]
    fn gradients_match_finite_differences() -> Result<()> {
        // Shifted away from 0 so that relu's kink is not straddled by the difference.
        let x = (randn(&[4, 5], 11, &Device::Cpu)? + 0.013)?;
        for act in ALL {
            check_grad(std::slice::from_ref(&x), |t| act.forward(&t[0]))
                .map_err(|e| candle_core::Error::Msg(format!("{act:?}: {e}")))?;
        }
        Ok(())
    }

    /// The fused CPU kernel and the composed tensor formula (used on other devices) agree.
    #[test]
    fn fused_kernel_matches_composed_formula() -> Result<()> {
        let x = (randn(&[64], 12, &Device::Cpu)? * 3.0)?;
        let g = randn(&[64], 13, &Device::Cpu)?;
        for act in ALL {
            let y = act.forward(&x)?;
            let fused = act.vjp(&x, &y, &g)?;
            let composed = (&g * act.derivative(&x, &y)?)?;
            let err = (fused - composed)?.abs()?.max_all()?.to_scalar::<f32>()?;
            assert!(err < 1e-5, "{act:?}: {err}");
        }
        Ok(())
    }

    /// The vectorised f32 exact GELU agrees with candle's `gelu_erf` (libm-grade `erf`).
    #[test]
    fn exact_gelu_matches_candles() -> Result<()> {
        let x = (randn(&[4096], 14, &Device::Cpu)? * 4.0)?;
        let ours = Activation::GeluErf.forward(&x)?;
        let err = (ours - x.gelu_erf()?)?
            .abs()?
            .max_all()?
            .to_scalar::<f32>()?;
        assert!(err < 1e-6, "{err}");
        Ok(())
    }

    #[test]
    fn names_parse_as_in_configs() {
        for (name, act) in [
            ("\"gelu\"", Activation::GeluErf),
            ("\"quick_gelu\"", Activation::QuickGelu),
            ("\"swish\"", Activation::Silu),
            ("\"silu\"", Activation::Silu),
            ("\"gelu_new\"", Activation::GeluTanh),
        ] {
            assert_eq!(serde_json::from_str::<Activation>(name).unwrap(), act);
        }
        assert!(serde_json::from_str::<Activation>("\"mish\"").is_err());
    }
}
