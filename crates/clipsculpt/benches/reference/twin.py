"""What the PyTorch twins share: the device and dtype choice, clipsculpt's mixed precision, and a
clock that times CUDA work with events and reads the allocator's peak.

- `--device cpu|cuda` (default `$CLIPSCULPT_DEVICE`, else cpu) and `--dtype f32|bf16` (default
  `$CLIPSCULPT_DTYPE`, else bf16 on CUDA and f32 on the CPU), as clipsculpt's benches read them.
- bf16 is clipsculpt's scheme (docs/gpu.md, "Mixed precision"), not autocast: the matrix weights
  of the frozen networks are stored in bf16, each product casts its input to bf16 and its output
  back to f32 before the f32 bias; norms, attention products (SDPA on f32), embeddings and the
  decoder's params projection stay f32.
- `Clock`: on CUDA, `torch.cuda.synchronize()` at both ends, CUDA events around the work, the peak
  from `torch.cuda.max_memory_allocated()` after `reset_peak_memory_stats()`; on the CPU,
  `time.perf_counter()` and no device peak.
"""

import os
import resource
import time

import torch
import torch.nn.functional as F
from torch import nn

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def add_device_args(ap):
    """The --device, --dtype and --warmup options."""
    ap.add_argument("--device", default=os.environ.get("CLIPSCULPT_DEVICE") or "cpu")
    ap.add_argument("--dtype", default=os.environ.get("CLIPSCULPT_DTYPE") or None, choices=list(DTYPES))
    ap.add_argument("--warmup", type=int, default=None,
                    help="untimed runs first (default 1 on CUDA, 0 on the CPU)")
    add_flush_arg(ap)


def add_flush_arg(ap):
    """The --flush-denormal option (see flush)."""
    ap.add_argument("--flush-denormal", action="store_true",
                    help="torch.set_flush_denormal(True), as clipsculpt's binaries flush subnormals")


def flush(args):
    """Applies --flush-denormal; afterwards args.flush_denormal says whether torch accepted it."""
    if args.flush_denormal:
        args.flush_denormal = torch.set_flush_denormal(True)


def resolve(args):
    """Fills in the device-dependent defaults of add_device_args' options; returns the device."""
    device = torch.device(args.device)
    if args.dtype is None:
        args.dtype = "bf16" if device.type == "cuda" else "f32"
    if args.warmup is None:
        args.warmup = 1 if device.type == "cuda" else 0
    flush(args)
    return device


def narrow_linear(x, weight, bias=None):
    """clipsculpt's mixed-precision product: input cast to the weight's dtype, output to f32."""
    y = F.linear(x.to(weight.dtype), weight).float()
    return y if bias is None else y + bias


def _narrow_conv(m, x):
    y = m._conv_forward(x.to(m.weight.dtype), m.weight, None).float()
    return y if m.bias is None else y + m.bias.view(1, -1, 1, 1)


def _narrow_module(m, dtype):
    m.weight.data = m.weight.data.to(dtype)
    if isinstance(m, nn.Linear):
        m.forward = lambda x, m=m: narrow_linear(x, m.weight, m.bias)
    else:
        m.forward = lambda x, m=m: _narrow_conv(m, x)


def narrow(model, dtype, skip=()):
    """Puts the matrix weights of `model` (linears and conv patch embeddings; not the submodules
    named in `skip`) in `dtype` with clipsculpt's casts; a no-op for f32. Returns `model`."""
    if dtype == torch.float32:
        return model
    skipped = {id(m) for name in skip for m in model.get_submodule(name).modules()}
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d)) and id(m) not in skipped:
            _narrow_module(m, dtype)
    return model


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class Clock:
    """Times calls on `device` and tracks the peak device memory since `reset`."""

    def __init__(self, device):
        self.device = device
        self.cuda = device.type == "cuda"

    def reset(self):
        """Synchronises and resets the allocator's peak (CUDA)."""
        sync(self.device)
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)

    def time(self, fn):
        """(seconds, fn()): synchronised at both ends, CUDA events on a GPU."""
        sync(self.device)
        if not self.cuda:
            start = time.perf_counter()
            out = fn()
            return time.perf_counter() - start, out
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        out = fn()
        end.record()
        torch.cuda.synchronize(self.device)
        return begin.elapsed_time(end) / 1000.0, out

    def peak_mib(self):
        """The allocator's peak since `reset` (MiB, weights included); None on the CPU."""
        if not self.cuda:
            return None
        sync(self.device)
        return torch.cuda.max_memory_allocated(self.device) / 2**20


def repeat(clock, fn, repeats, warmup):
    """Seconds of `repeats` timed calls of fn after `warmup` untimed ones, and the device peak
    over the timed ones."""
    for _ in range(warmup):
        fn()
    clock.reset()
    seconds = [clock.time(fn)[0] for _ in range(repeats)]
    return seconds, clock.peak_mib()


def peak_rss_mib():
    """The process's peak resident set (MiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def record(stage, seconds, peak, args, **extra):
    """The JSON line's fields shared by every twin."""
    return {
        "impl": "pytorch", "stage": stage, "seconds": seconds, "min_seconds": min(seconds),
        "peak_rss_mib": peak_rss_mib(), "peak_device_mib": peak, "device": args.device,
        "dtype": args.dtype, "threads": torch.get_num_threads(), "torch": torch.__version__,
        "flush_denormal": args.flush_denormal, **extra,
    }
