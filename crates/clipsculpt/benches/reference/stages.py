"""PyTorch twin of `cargo bench --bench stages` (see benches/stages.rs): one stage of a
published-size run on the random weights of `random-models --preset published`, loaded with
diffusers' `PriorTransformer.from_pretrained`.

Stages: `prior-eval` (one evaluation, batch 2, no graph), `prior-backward` (the guided x0
prediction u + 3 (c - u) of a state x, loss sum(w * guided), backward to x),
`prior-backward-ckpt` (the same with every block under `torch.utils.checkpoint`), `guide` and
`guide-ckpt` (one guidance step at published sizes, see `guide_step`), `matmul` (torch's matrix
product on the prior's shapes, as in benches/stages.rs) and `export`:
the twin of `clipsculpt export LATENT --grid 128 --formats ply` on the latent that `--write-latent`
writes. It follows diffusers' `ShapERenderer.decode_to_mesh` (load, params projection, the STF
signed distance on a 128^3 grid in batches of 4096, a -1 border, marching cubes, the STF colour of
every vertex) and writes a binary PLY. Marching cubes is scikit-image's: diffusers' own
table-driven one needs the `mesh_decoder.cases`/`masks` tables of the published checkpoint, which
random weights do not hold.

    venv/bin/python benches/reference/stages.py --stage prior-eval --model /tmp/rm --repeats 1
    venv/bin/python benches/reference/stages.py --stage prior-eval --model /tmp/rm --device cuda --dtype bf16

`--device`, `--dtype` and `--warmup` as twin.py reads them (bf16: clipsculpt's mixed precision).
Prints one JSON line: the seconds of each repeat, their minimum, the peak RSS (MiB, weights
included) of the process and, on CUDA, the allocator's peak over the timed repeats
(`peak_device_mib`, weights included; null on the CPU).
"""

import argparse
import json

import numpy as np
import torch
import torch.nn.functional as F
from diffusers import PriorTransformer
from diffusers.pipelines.shap_e.renderer import encode_position
from guide_cpu_v1 import DIRENC_DIM, clip_loss, orbit_rays
from torch.utils.checkpoint import checkpoint
from twin import DTYPES, Clock, add_device_args, narrow, narrow_linear, record, repeat, resolve

TIMESTEP = 250.0
MATMUL_SHAPES = [(2052, 1024, 1024), (2052, 1024, 4096), (2052, 4096, 1024)]
CFG_SCALE = 3.0


def twin_dtype(args):
    """The torch dtype of --dtype."""
    return DTYPES[args.dtype]


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


def shade(mlp, weights, pts, fine):
    """Raw density (r, s) and colour (r, s, 3) of the NeRF level at points (r, s, 3); the first
    len(weights) layers take the latent's projected weights, the direction columns (always zero
    in Shap-E rendering) are dropped, as in guide_cpu_v1.py."""
    h = encode_position(pts.reshape(1, -1, 3))
    layers = mlp.mlp
    for i, layer in enumerate(layers):
        if i < len(weights):
            h = torch.baddbmm(layer.bias, h, weights[i].transpose(1, 2))
        elif i == mlp.config.insert_direction_at:
            h = narrow_linear(h, layer.weight[:, : layer.weight.shape[1] - DIRENC_DIM], layer.bias)
        else:
            h = layer(h)
        if i < len(layers) - 1:
            h = F.silu(h)
    raw = h.reshape(*pts.shape[:2], -1)
    density, rgb = (raw[..., 2], raw[..., 9:12]) if fine else (raw[..., 1], raw[..., 6:9])
    return F.relu(density), torch.sigmoid(rgb)


def composite(density, rgb, delta, hit):
    """(r, 4): colour over black and opacity; rays that miss are transparent."""
    tau = density * delta
    mass = torch.cumsum(tau, 1)
    before = torch.cat([torch.zeros_like(mass[:, :1]), mass[:, :-1]], 1)
    w = (1 - torch.exp(-tau)) * torch.exp(-before)
    colour = (rgb * w[..., None]).sum(1) * hit[:, None]
    trans = torch.exp(-mass[:, -1]) * hit + (1 - hit)
    return torch.cat([colour, (1 - trans)[:, None]], 1), w


def partition(ts, t0, t1):
    """Bin edges around sorted samples ts (r, s) in [t0, t1] (diffusers VolumeRange.partition)."""
    mids = (ts[:, 1:] + ts[:, :-1]) / 2
    return torch.cat([t0[:, None], mids], 1), torch.cat([mids, t1[:, None]], 1)


def fine_chunk(mlp, o, d, ts, delta, hit, *weights):
    pts = o[:, None, :] + ts[..., None] * d[:, None, :]
    return composite(*shade(mlp, weights, pts, True), delta, hit)[0]


def view_loss(renderer, vit, z, text, ckpt, res=64, views=2, n_coarse=64, n_fine=64, chunk=1024, seed=5):
    """The guidance loss of latent z: `views` orbit views of res^2 rays, a graph-free coarse pass
    of n_coarse stratified samples that places n_fine importance samples (diffusers'
    ImportanceRaySampler, alpha 1e-5), the image from the fine pass over all samples, each view
    over 4 grey backgrounds, bilinear resize to the tower's side, -mean cosine to `text`.
    ckpt: ray chunks of `chunk` under torch.utils.checkpoint (the vision tower's blocks are
    checkpointed by the caller). Random draws come from a CPU generator, so every device draws
    the same."""
    dev = z.device
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.rand(*shape, generator=gen).to(dev)

    weights = list(renderer.params_proj(z).values())
    cams = [orbit_rays(0.6 + v * 1.5, 0.5, 4.0, 0.7, res) for v in range(views)]
    o, d = torch.cat([c[0] for c in cams]).to(dev), torch.cat([c[1] for c in cams]).to(dev)
    dd = torch.where(d < 0, d - 1e-6, d + 1e-6)
    a, b = (-1.0 - o) / dd, (1.0 - o) / dd
    t0 = torch.minimum(a, b).amax(-1).clamp(min=0.0)
    t1 = torch.maximum(a, b).amin(-1)
    hit = (t0 + 1e-3 < t1).float()
    t0, t1 = t0 * hit, t1 * hit + (1 - hit)
    u = torch.linspace(0.0, 1.0, n_coarse, device=dev)
    edges = t0[:, None] * (1 - u) + t1[:, None] * u
    lower, upper = partition(edges, t0, t1)
    ts_c = lower + (upper - lower) * rand(o.shape[0], n_coarse)
    lower, upper = partition(ts_c, t0, t1)
    with torch.no_grad():
        w = torch.cat([
            composite(*shade(renderer.mlp, weights, o[s:s + chunk, None] + ts_c[s:s + chunk, :, None]
                             * d[s:s + chunk, None], False), (upper - lower)[s:s + chunk], hit[s:s + chunk])[1]
            for s in range(0, o.shape[0], chunk)
        ])
        pmf = (w + 1e-5) / (w + 1e-5).sum(1, keepdim=True)
        inds = torch.searchsorted(torch.cumsum(pmf, 1), rand(o.shape[0], n_fine))
        inds = inds.clamp(0, n_coarse - 1)
        lo, hi = torch.gather(lower, 1, inds), torch.gather(upper, 1, inds)
        ts_f = lo + (hi - lo) * rand(o.shape[0], n_fine)
        ts = torch.sort(torch.cat([ts_c, ts_f], 1), 1).values
        lower, upper = partition(ts, t0, t1)
        delta = upper - lower
    args = (o, d, ts, delta, hit)
    if ckpt:
        out = torch.cat([
            checkpoint(fine_chunk, renderer.mlp, *(x[s:s + chunk] for x in args), *weights, use_reentrant=False)
            for s in range(0, o.shape[0], chunk)
        ])
    else:
        out = fine_chunk(renderer.mlp, *args, *weights)
    rgb = out[:, :3].reshape(views, res, res, 3).permute(0, 3, 1, 2)
    alpha = out[:, 3].reshape(views, 1, res, res)
    images = torch.cat([rgb + (1 - alpha) * g for g in (0.0, 0.33, 0.66, 1.0)])
    return clip_loss(vit, images, text, vit.config.image_size)


def guide_step(renderer, vit, latent0, text, ckpt):
    """One guidance step: view_loss of a copy of latent0 and its backward to that copy."""
    z = latent0.clone().requires_grad_(True)
    view_loss(renderer, vit, z, text, ckpt).backward()
    assert z.grad is not None


def load_guide_models(model, device, dtype, ckpt):
    """The decoder of `model/shap_e/shap_e_renderer` and the vision tower of `model/clip`, frozen,
    on `device` with clipsculpt's precision; the tower's blocks checkpointed when `ckpt`."""
    from diffusers.pipelines.shap_e.renderer import ShapERenderer
    from transformers import CLIPVisionModelWithProjection

    renderer = ShapERenderer.from_pretrained(f"{model}/shap_e/shap_e_renderer").eval().to(device)
    narrow(renderer, dtype, skip=("params_proj",)).requires_grad_(False)
    vit = CLIPVisionModelWithProjection.from_pretrained(f"{model}/clip").to(device)
    narrow(vit, dtype).requires_grad_(False)
    vit.train(False)
    if ckpt:
        vit.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        vit.train(True)  # transformers only checkpoints in training mode; the model has no dropout
    return renderer, vit


def guide_stage(args, device):
    """The guide stages' seconds and device peak."""
    ckpt = args.stage == "guide-ckpt"
    renderer, vit = load_guide_models(args.model, device, twin_dtype(args), ckpt)
    gen = torch.Generator().manual_seed(3)
    latent0 = (torch.randn(1, 1024, 1024, generator=gen) * 0.3).clamp(-1, 1).to(device)
    text = F.normalize(torch.randn(1, vit.config.projection_dim, generator=gen), dim=-1).to(device)
    return repeat(Clock(device), lambda: guide_step(renderer, vit, latent0, text, ckpt), args.repeats, args.warmup)


def load_renderer(model, device):
    """diffusers' ShapERenderer of `model/shap_e/shap_e_renderer`, frozen, on `device`."""
    from diffusers.pipelines.shap_e.renderer import ShapERenderer

    renderer = ShapERenderer.from_pretrained(f"{model}/shap_e/shap_e_renderer").eval().to(device)
    return renderer.requires_grad_(False)


@torch.no_grad()
def mesh_of(renderer, latent, dtype, grid=128, batch=4096):
    """Vertices (world), faces and colours (uint8) of latent (1, 1024, 1024), as diffusers'
    decode_to_mesh makes them: the projected params copied into the MLP (which keeps them f32;
    its other layers are narrowed to dtype), the STF signed distance on a grid^3 lattice in
    batches, a -1 border, scikit-image's marching cubes, the STF colour of every vertex."""
    from diffusers.pipelines.shap_e.renderer import volume_query_points
    from skimage.measure import marching_cubes

    params = renderer.params_proj(latent)
    projected = []
    for name, param in renderer.mlp.state_dict().items():
        if f"nerstf.{name}" in params:
            param.copy_(params[f"nerstf.{name}"].squeeze(0))
            projected.append("mlp." + name.rsplit(".", 1)[0])
    narrow(renderer, dtype, skip=["params_proj", *projected])

    def stf(points):
        return [
            renderer.mlp(position=points[:, i:i + batch], direction=None, ts=None,
                         nerf_level="fine", rendering_mode="stf")
            for i in range(0, points.shape[1], batch)
        ]

    points = volume_query_points(renderer.volume, grid)[None]
    sdf = torch.cat([o.signed_distance for o in stf(points)], dim=1).float().reshape(grid, grid, grid)
    full = torch.full((grid + 2,) * 3, -1.0)
    full[1:-1, 1:-1, 1:-1] = sdf.cpu()
    verts, faces, _, _ = marching_cubes(full.numpy(), 0.0)
    lo, hi = (b.reshape(3).float().cpu() for b in (renderer.volume.bbox_min, renderer.volume.bbox_max))
    verts = torch.from_numpy(verts.copy()).float()
    world = lo + (verts - 1.0) * (hi - lo) / (grid - 1)
    rgb = torch.cat([o.channels[..., :3] for o in stf(world[None].to(latent.device))], dim=1)[0]
    return world.numpy(), faces, (rgb.clamp(0, 1) * 255).round().byte().cpu().numpy()


def export(model, out, device, dtype, grid=128):
    """Load, decode, mesh, colour and write the PLY of bench_latent(); the vertex count."""
    renderer = load_renderer(model, device)
    verts, faces, rgb = mesh_of(renderer, bench_latent().to(device), dtype, grid)
    write_ply(out, verts, faces, rgb)
    return len(verts)


def matmul_stage(device, dtype):
    """Seconds (best of 5) and GFLOP/s of each of MATMUL_SHAPES in dtype on device."""
    gen = torch.Generator().manual_seed(3)
    clock, seconds, gflops = Clock(device), [], []
    for m, k, n in MATMUL_SHAPES:
        a = torch.randn(m, k, generator=gen).to(device, dtype)
        b = torch.randn(k, n, generator=gen).to(device, dtype)
        clock.time(lambda: a @ b)  # warm-up: cuBLAS picks its kernel
        best = min(clock.time(lambda: a @ b)[0] for _ in range(5))
        seconds.append(best)
        gflops.append(2 * m * k * n / best / 1e9)
    return seconds, gflops


def prior_stage(args, device):
    """The prior stages' seconds and device peak."""
    prior = PriorTransformer.from_pretrained(f"{args.model}/shap_e/prior").eval().to(device)
    narrow(prior, twin_dtype(args)).requires_grad_(False)
    cfg = prior.config
    tokens, width = cfg.num_embeddings, cfg.embedding_dim
    cond = cfg.embedding_proj_dim or width
    gen = torch.Generator().manual_seed(3)
    x = (torch.randn(1, tokens, width, generator=gen) * 2.0).to(device)
    emb = torch.randn(2, cond, generator=gen).to(device)
    w = torch.randn(1, tokens, width, generator=gen).to(device)
    if args.stage == "prior-backward-ckpt":
        checkpoint_blocks(prior)

    def evaluate():
        with torch.no_grad():
            prior(torch.cat([x, x]), TIMESTEP, proj_embedding=emb)

    def backward():
        xv = x.clone().requires_grad_(True)
        out = prior(torch.cat([xv, xv]), TIMESTEP, proj_embedding=emb).predicted_image_embedding
        pred = out[..., :width]
        u, c = pred[:1], pred[1:]
        guided = u + CFG_SCALE * (c - u)
        (guided * w).sum().backward()
        assert xv.grad is not None

    if args.stage not in ("prior-eval", "prior-backward", "prior-backward-ckpt"):
        raise SystemExit(f"unknown stage {args.stage}")
    fn = evaluate if args.stage == "prior-eval" else backward
    return repeat(Clock(device), fn, args.repeats, args.warmup)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stage", default="prior-eval")
    ap.add_argument("--model", help="a random-models --preset published folder")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--out", default="/tmp/clipsculpt-stages", help="export: the folder for the PLY")
    ap.add_argument("--write-latent", help="write the export stage's latent here and exit")
    add_device_args(ap)
    args = ap.parse_args()
    if args.write_latent:
        from safetensors.torch import save_file
        save_file({"latent": bench_latent()}, args.write_latent)
        return
    if not args.model:
        ap.error("--model is required")
    device = resolve(args)
    if args.stage == "matmul":
        seconds, gflops = matmul_stage(device, twin_dtype(args))
        line = record("matmul", seconds, None, args, gflops=gflops, shapes=MATMUL_SHAPES)
        del line["min_seconds"], line["peak_rss_mib"], line["peak_device_mib"]
    elif args.stage == "export":
        vertices = []

        def fn():
            vertices.append(export(args.model, f"{args.out}/mesh_pytorch.ply", device, twin_dtype(args)))

        seconds, peak = repeat(Clock(device), fn, args.repeats, args.warmup)
        line = record("export", seconds, peak, args, vertices=vertices[-1])
    elif args.stage in ("guide", "guide-ckpt"):
        line = record(args.stage, *guide_stage(args, device), args)
    else:
        line = record(args.stage, *prior_stage(args, device), args)
    print(json.dumps(line))


if __name__ == "__main__":
    main()
