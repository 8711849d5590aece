//! The memory meters' nesting, in a test binary of its own: the heap counter is process-wide,
//! and other tests' stages would reset its high-water mark while this one reads it.

use candle_core::{Device, Result};
use clipsculpt::autodiff::memory::CountingAlloc;
use clipsculpt::device::memory::{peak_bytes, reset_peak, used_bytes, SpanMeter};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// A span measured inside a stage (a budget plan measuring one block) sees only its own bytes,
/// and the stage's peak from before the span survives it.
#[test]
fn a_span_inside_a_stage_keeps_the_stage_peak() -> Result<()> {
    let dev = Device::Cpu;
    reset_peak(&dev)?;
    let base = used_bytes(&dev)?;
    drop(std::hint::black_box(vec![1u8; 32 << 20]));
    let inner = {
        let Some(span) = SpanMeter::start(&dev)? else {
            candle_core::bail!("the counting allocator is installed, so the CPU has a peak");
        };
        let v = std::hint::black_box(vec![1u8; 1 << 20]);
        let peak = span.peak_above_base()?;
        drop(v);
        peak
    };
    assert!(
        (1 << 20..32 << 20).contains(&inner),
        "the span measures only itself: {inner} bytes"
    );
    let stage = peak_bytes(&dev)?;
    assert!(
        stage >= base + (32 << 20),
        "stage peak {stage}, base {base}"
    );
    reset_peak(&dev)?;
    let next = peak_bytes(&dev)?;
    assert!(
        next < base + (32 << 20),
        "a new stage starts afresh: {next}"
    );
    Ok(())
}
