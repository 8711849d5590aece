//! Differentiation machinery on top of candle's autograd: custom VJPs ([`vjp`]), differentiable
//! ops that candle-nn lacks ([`ops`]) and layers built on them ([`nn`]), the gradient-checkpoint
//! engine ([`checkpoint`]), our seeded generator ([`rng`]) and memory meters ([`memory`]). The
//! plain-array CPU kernels of the fused passes live a layer below, in [`crate::kernels`].

pub mod checkpoint;
pub mod memory;
pub mod nn;
pub(crate) mod ops;
pub mod rng;
pub(crate) mod vjp;
