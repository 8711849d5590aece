//! Flush-to-zero for subnormal floats on the CPU's compute threads.
//!
//! Intel cores run a multiply-add whose operand or result is subnormal (below 1.2·10⁻³⁸ in f32)
//! some hundred times slower than a normal one, through a microcode assist. Guidance makes many:
//! points behind an opaque surface have a transmittance that underflows, so their gradients do,
//! and about one entry in seven of the decoder MLP's backward gradients was subnormal in the
//! guide bench. There the backward's matrix products ran at 10–13 GFLOP/s instead of 155–200,
//! and the whole step took 6.4 s instead of 1.7 s (`docs/architecture.md`, "Subnormals").
//!
//! The binaries (`clipsculpt`, `clipsculpt-lab`, the benches) therefore set the SSE control
//! register's flush-to-zero and denormals-are-zero bits when they start, as TensorFlow and XLA do
//! on their CPU threads and as PyTorch offers (`torch.set_flush_denormal`). A subnormal input
//! then reads as zero and a subnormal result is written as zero; normal values are unchanged.
//! The library itself never sets them, so its tests compute with IEEE subnormals.

/// Sets flush-to-zero and denormals-are-zero on the calling thread and on every thread of
/// rayon's global pool (where candle's CPU ops, `gemm` and the fused kernels run); threads
/// started later by the calling thread inherit the mode. Returns whether the CPU has the mode
/// (x86-64); elsewhere it does nothing and returns `false`.
pub fn flush_subnormals() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        x86::set_flush();
        rayon::broadcast(|_| x86::set_flush());
        true
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether subnormals are flushed on the calling thread.
pub fn subnormals_flushed() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        x86::read_csr() & x86::FLUSH == x86::FLUSH
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    /// MXCSR's flush-to-zero (bit 15) and denormals-are-zero (bit 6).
    pub(super) const FLUSH: u32 = (1 << 15) | (1 << 6);

    /// The calling thread's MXCSR.
    pub(super) fn read_csr() -> u32 {
        let mut csr: u32 = 0;
        // SAFETY: `stmxcsr` stores the thread's SSE control register into `csr`, a valid u32.
        unsafe {
            std::arch::asm!("stmxcsr [{}]", in(reg) &mut csr, options(nostack, preserves_flags));
        }
        csr
    }

    /// Sets [`FLUSH`] in the calling thread's MXCSR, keeping its other bits.
    pub(super) fn set_flush() {
        let csr = read_csr() | FLUSH;
        // SAFETY: `ldmxcsr` loads a control word that differs from the current one only in the
        // two flush bits, which change how subnormal values are read and written, nothing else.
        unsafe {
            std::arch::asm!(
                "ldmxcsr [{}]",
                in(reg) &csr,
                options(nostack, preserves_flags, readonly)
            );
        }
    }
}
