"""PyTorch twin of `cargo bench --bench stages` (see benches/stages.rs): one stage of a
published-size run on the random weights of `random-models --preset published`, loaded with
diffusers' `PriorTransformer.from_pretrained`.

Stages: `prior-eval` (one evaluation, batch 2, no graph), `prior-backward` (the guided x0
prediction u + 3 (c - u) of a state x, loss sum(w * guided), backward to x),
`prior-backward-ckpt` (the same with every block under `torch.utils.checkpoint`) and `export`:
the twin of `clipsculpt export LATENT --grid 128 --formats ply` on the latent that `--write-latent`
writes. It follows diffusers' `ShapERenderer.decode_to_mesh` (load, params projection, the STF
signed distance on a 128^3 grid in batches of 4096, a -1 border, marching cubes, the STF colour of
every vertex) and writes a binary PLY. Marching cubes is scikit-image's: diffusers' own
table-driven one needs the `mesh_decoder.cases`/`masks` tables of the published checkpoint, which
random weights do not hold.

    venv/bin/python benches/reference/stages.py --stage prior-eval --model /tmp/rm --repeats 1

Prints one JSON line: the seconds of each repeat, their minimum, and the peak RSS (MiB, weights
included) of the process.
"""

import argparse
import json
import resource
import time

import numpy as np
import torch
from diffusers import PriorTransformer
from torch.utils.checkpoint import checkpoint

TIMESTEP = 250.0
CFG_SCALE = 3.0


def checkpoint_blocks(prior):
    """Wraps every transformer block's forward in torch.utils.checkpoint (non-reentrant)."""
    for block in prior.transformer_blocks:
        forward = block.forward

        def wrapped(*args, _forward=forward, **kwargs):
            return checkpoint(_forward, *args, use_reentrant=False, **kwargs)

        block.forward = wrapped


def bench_latent():
    """The deterministic latent both sides decode: 0.5 sin(0.37 i), 1024 x 1024."""
    i = torch.arange(1024 * 1024, dtype=torch.float64)
    return (0.5 * torch.sin(0.37 * i)).float().reshape(1, 1024, 1024)


def write_ply(path, verts, faces, rgb):
    """A binary little-endian PLY: float xyz and uchar rgb per vertex, int triangles."""
    vert = np.zeros(len(verts), dtype=[("p", "<f4", 3), ("c", "u1", 3)])
    vert["p"], vert["c"] = verts, rgb
    face = np.zeros(len(faces), dtype=[("n", "u1"), ("v", "<i4", 3)])
    face["n"], face["v"] = 3, faces
    with open(path, "wb") as f:
        f.write((
            "ply\nformat binary_little_endian 1.0\n"
            f"element vertex {len(verts)}\nproperty float x\nproperty float y\nproperty float z\n"
            "property uchar red\nproperty uchar green\nproperty uchar blue\n"
            f"element face {len(faces)}\nproperty list uchar int vertex_indices\nend_header\n"
        ).encode())
        f.write(vert.tobytes())
        f.write(face.tobytes())


@torch.no_grad()
def export(model, out, grid=128, batch=4096):
    """Decode, marching cubes, colours and PLY, as diffusers' decode_to_mesh does them."""
    from diffusers.pipelines.shap_e.renderer import ShapERenderer, volume_query_points
    from skimage.measure import marching_cubes

    renderer = ShapERenderer.from_pretrained(f"{model}/shap_e/shap_e_renderer").eval()
    params = renderer.params_proj(bench_latent())
    for name, param in renderer.mlp.state_dict().items():
        if f"nerstf.{name}" in params:
            param.copy_(params[f"nerstf.{name}"].squeeze(0))

    def stf(points):
        return [
            renderer.mlp(position=points[:, i:i + batch], direction=None, ts=None,
                         nerf_level="fine", rendering_mode="stf")
            for i in range(0, points.shape[1], batch)
        ]

    points = volume_query_points(renderer.volume, grid)[None]
    sdf = torch.cat([o.signed_distance for o in stf(points)], dim=1).float().reshape(grid, grid, grid)
    full = torch.full((grid + 2,) * 3, -1.0)
    full[1:-1, 1:-1, 1:-1] = sdf
    verts, faces, _, _ = marching_cubes(full.numpy(), 0.0)
    lo, hi = renderer.volume.bbox_min.reshape(3), renderer.volume.bbox_max.reshape(3)
    verts = torch.from_numpy(verts.copy()).float()
    world = lo + (verts - 1.0) * (hi - lo) / (grid - 1)
    rgb = torch.cat([o.channels[..., :3] for o in stf(world[None])], dim=1)[0]
    write_ply(out, world.numpy(), faces, (rgb.clamp(0, 1) * 255).round().byte().numpy())
    return len(verts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stage", default="prior-eval")
    ap.add_argument("--model", help="a random-models --preset published folder")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--out", default="/tmp/clipsculpt-stages", help="export: the folder for the PLY")
    ap.add_argument("--write-latent", help="write the export stage's latent here and exit")
    args = ap.parse_args()
    if args.write_latent:
        from safetensors.torch import save_file
        save_file({"latent": bench_latent()}, args.write_latent)
        return
    if not args.model:
        ap.error("--model is required")
    if args.stage == "export":
        seconds, vertices = [], 0
        for _ in range(args.repeats):
            start = time.perf_counter()
            vertices = export(args.model, f"{args.out}/mesh_pytorch.ply")
            seconds.append(time.perf_counter() - start)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
        print(json.dumps({
            "impl": "pytorch", "stage": "export", "seconds": seconds, "min_seconds": min(seconds),
            "peak_rss_mib": peak, "vertices": vertices, "threads": torch.get_num_threads(),
        }))
        return
    prior = PriorTransformer.from_pretrained(f"{args.model}/shap_e/prior").eval()
    prior.requires_grad_(False)
    cfg = prior.config
    tokens, width = cfg.num_embeddings, cfg.embedding_dim
    cond = cfg.embedding_proj_dim or width
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(1, tokens, width, generator=gen) * 2.0
    emb = torch.randn(2, cond, generator=gen)
    w = torch.randn(1, tokens, width, generator=gen)
    if args.stage == "prior-backward-ckpt":
        checkpoint_blocks(prior)
    seconds = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        if args.stage == "prior-eval":
            with torch.no_grad():
                prior(torch.cat([x, x]), TIMESTEP, proj_embedding=emb)
        elif args.stage in ("prior-backward", "prior-backward-ckpt"):
            xv = x.clone().requires_grad_(True)
            out = prior(torch.cat([xv, xv]), TIMESTEP, proj_embedding=emb).predicted_image_embedding
            pred = out[..., :width]
            u, c = pred[:1], pred[1:]
            guided = u + CFG_SCALE * (c - u)
            (guided * w).sum().backward()
            assert xv.grad is not None
        else:
            raise SystemExit(f"unknown stage {args.stage}")
        seconds.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(json.dumps({
        "impl": "pytorch", "stage": args.stage, "seconds": seconds, "min_seconds": min(seconds),
        "peak_rss_mib": peak, "threads": torch.get_num_threads(), "torch": torch.__version__,
    }))


if __name__ == "__main__":
    main()
