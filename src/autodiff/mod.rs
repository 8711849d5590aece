//! Differentiation machinery on top of candle's autograd: custom VJPs ([`vjp`]), differentiable
//! ops that candle-nn lacks ([`ops`]) and layers built on them ([`nn`]), the gradient-checkpoint
//! engine ([`checkpoint`]), our seeded generator ([`rng`]), memory meters ([`memory`]),
//! vectorisable math ([`fastmath`]) and the plain-array CPU kernels of the fused passes
//! ([`kernels`]: strided matrix products, bias + activation in one pass).

pub mod checkpoint;
pub mod fastmath;
pub mod kernels;
pub mod memory;
pub mod nn;
pub mod ops;
pub mod rng;
pub mod vjp;
