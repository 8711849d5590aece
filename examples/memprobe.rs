use candle_core::{Device, Result, Var};
use clipsculpt::autodiff::checkpoint::{run_chain, Block, Policy, ResidualMlp};
use clipsculpt::autodiff::memory::{self, CountingAlloc, PeakMeter};
use clipsculpt::autodiff::rng::Rng;
#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;
fn main() -> Result<()> {
    let dev = Device::Cpu;
    let (n, d, h, rows) = (16, 256, 1024, 2048);
    let blocks: Vec<ResidualMlp> = (0..n)
        .map(|i| ResidualMlp::new(d, h, 10 + i as u64, &dev))
        .collect::<Result<_>>()?;
    let mut rng = Rng::new(2);
    let x0 = rng.normal_tensor(&[rows, d], &dev)?;
    let w = rng.normal_tensor(&[rows, d], &dev)?;
    // one block, graph-free forward
    let m = PeakMeter::start();
    let y = blocks[0].forward(&x0, &[])?;
    println!(
        "graph-free block fwd: peak {} live {}",
        memory::mib(m.peak_above_base()),
        memory::mib(m.live_above_base())
    );
    drop(y);
    let x = Var::from_tensor(&x0)?;
    let m = PeakMeter::start();
    let y = blocks[0].forward(x.as_tensor(), &[])?;
    println!(
        "tracked block fwd: peak {} live {}",
        memory::mib(m.peak_above_base()),
        memory::mib(m.live_above_base())
    );
    let g = (y * &w)?.sum_all()?.backward()?;
    println!(
        "  +backward: peak {} live {}",
        memory::mib(m.peak_above_base()),
        memory::mib(m.live_above_base())
    );
    drop(g);
    for p in [Policy::BLOCKS, Policy::None] {
        let plan = p.plan(n, None).unwrap();
        let m = PeakMeter::start();
        let out = run_chain(&blocks, x.as_tensor(), &[], &plan)?;
        println!(
            "{p}: after fwd peak {} live {}",
            memory::mib(m.peak_above_base()),
            memory::mib(m.live_above_base())
        );
        let g = (out * &w)?.sum_all()?.backward()?;
        println!(
            "{p}: after bwd peak {} live {}",
            memory::mib(m.peak_above_base()),
            memory::mib(m.live_above_base())
        );
        drop(g);
    }
    Ok(())
}
