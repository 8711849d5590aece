//! Differentiation machinery on top of candle's autograd: custom VJPs ([`vjp`]), differentiable
//! ops that candle-nn lacks ([`ops`]) and layers built on them ([`nn`]), the gradient-checkpoint
//! engine ([`checkpoint`]), our seeded generator ([`rng`]), memory meters ([`memory`]) and
//! vectorisable math kernels ([`fastmath`]).

pub mod checkpoint;
pub mod fastmath;
pub mod memory;
pub mod nn;
pub mod ops;
pub mod rng;
pub mod vjp;
