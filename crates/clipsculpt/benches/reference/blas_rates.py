"""GFLOP/s of numpy's bundled BLAS and torch.matmul on the prior's product shapes (rows = 2 x 1026 tokens), the
best of 5 after one untimed each: context for `stages.py --stage matmul`, which times torch against candle's.

    venv/ref/bin/python benches/reference/blas_rates.py
"""
import numpy as np
import torch
from stages import MATMUL_SHAPES
from twin import Clock

clock = Clock(torch.device("cpu"))


def best_seconds(f, runs=5):
    clock.time(f)
    return min(clock.time(f)[0] for _ in range(runs))


for m, k, n in MATMUL_SHAPES:
    a = np.random.randn(m, k).astype(np.float32)
    b = np.random.randn(k, n).astype(np.float32)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    flop = 2 * m * k * n / 1e9
    rates = {name: flop / best_seconds(f) for name, f in [("numpy", lambda: a @ b), ("torch", lambda: ta @ tb)]}
    print(f"({m}x{k})·({k}x{n}): numpy {rates['numpy']:.0f}, torch {rates['torch']:.0f} GFLOP/s")
