"""GFLOP/s of numpy's bundled BLAS and torch.matmul on the prior's product shapes (rows = 2 x 1026 tokens), the
best of 5 after one untimed each: context for `stages.py --stage matmul`, which times torch against candle's.

    venv/ref/bin/python benches/reference/blas_rates.py
"""
import time

import numpy as np
import torch
from stages import MATMUL_SHAPES


def best_seconds(f, runs=5):
    f()
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return best


for m, k, n in MATMUL_SHAPES:
    a = np.random.randn(m, k).astype(np.float32)
    b = np.random.randn(k, n).astype(np.float32)
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    flop = 2 * m * k * n / 1e9
    rates = {name: flop / best_seconds(f) for name, f in [("numpy", lambda: a @ b), ("torch", lambda: ta @ tb)]}
    print(f"({m}x{k})·({k}x{n}): numpy {rates['numpy']:.0f}, torch {rates['torch']:.0f} GFLOP/s")
