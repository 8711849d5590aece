#!/usr/bin/env python3
"""How well latent arithmetic recovers each held-out toy combination from the fitted latents.

For every held-out (shape, colour) it forms d = a + b - c from seen objects a = (s', colour),
b = (shape, c'), c = (s', c') and prints the RMS error of d (and of the mean of all such d)
against the fitted latent of the held-out object, next to the RMS distance from that latent to
its nearest other object. Needs numpy and safetensors (pip install numpy safetensors).

    python3 scripts/analogy_error.py [assets/toy/latents.safetensors]
"""
import sys

import numpy as np
from safetensors.numpy import load_file

SHAPES = ["sphere", "cube", "cylinder", "cone", "torus", "capsule"]
COLOURS = ["red", "green", "blue", "yellow", "white", "black"]
# toy::world::HELD_OUT as (shape, colour) indices; the file holds the 36 latents shape-major.
HELD_OUT = [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5), (5, 0)]


def rms(x):
    return float(np.sqrt((x**2).mean()))


def main():
    path = sys.argv[1] if len(sys.argv) > 1 else "assets/toy/latents.safetensors"
    latents = load_file(path)["latent"].astype(np.float64)
    at = lambda s, c: latents[s * 6 + c]
    for s, c in HELD_OUT:
        target = at(s, c)
        completions = [
            np.clip(at(s2, c) + at(s, c2) - at(s2, c2), -1, 1)
            for s2 in range(6)
            for c2 in range(6)
            if s2 != s and c2 != c
            and not {(s2, c), (s, c2), (s2, c2)} & set(HELD_OUT)
        ]
        errors = [rms(d - target) for d in completions]
        nearest = min(rms(latents[j] - target) for j in range(36) if j != s * 6 + c)
        print(
            f"{COLOURS[c]} {SHAPES[s]}: {len(completions)} completions, RMS error "
            f"min {min(errors):.3f} median {np.median(errors):.3f}, of their mean "
            f"{rms(np.mean(completions, 0) - target):.3f}; nearest other object {nearest:.3f}"
        )


if __name__ == "__main__":
    main()
