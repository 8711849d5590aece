//! The CPU kernels of the fused passes, on plain arrays: strided matrix products on the `gemm`
//! crate ([`mod@matmul`]), unmasked attention per (batch × head) pair ([`mod@attention`]),
//! activations ([`activation`]: bias + SiLU, QuickGELU, exact GELU, sigmoid), LayerNorm
//! ([`layer_norm`]), softmax ([`softmax`]), the attention's head layout ([`heads`]), row fills
//! and new arrays filled in parallel ([`rows`]) and vectorisable math
//! ([`fastmath`], with [`fastmath::simd_dispatch!`], which compiles a loop for AVX-512 or AVX2
//! and picks the version the CPU supports at run time). The fused model files (`clip::fused`,
//! `render::fused`, `shap_e::fused_mlp`) only wire their weights to these.

pub(crate) mod activation;
pub(crate) mod attention;
pub(crate) mod fastmath;
pub(crate) mod heads;
pub(crate) mod layer_norm;
pub(crate) mod matmul;
pub(crate) mod real;
pub(crate) mod rows;
pub(crate) mod softmax;

pub(crate) use activation::{
    bias_silu, bias_silu_inplace, bias_silu_inplace_rows, gelu_erf, gelu_erf_grad, normal_cdf,
    quick_gelu, quick_gelu_grad, sigmoid, silu, silu_grad,
};
pub(crate) use layer_norm::{ln_backward, ln_forward, ln_stats};
pub(crate) use matmul::{matmul, matmul_new, matmul_serial, matmul_with, Mat, Write};
pub(crate) use real::Real;
pub(crate) use rows::{add_row, fill_rows, zeros};
pub(crate) use softmax::{softmax_rows, softmax_rows_f32};
