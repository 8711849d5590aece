"""PyTorch reference of workload guide-cpu-v1 (see benches/guide.rs): one CLIP-guidance step,
forward + backward to the latent, on random weights.

Same workload as `cargo bench --bench guide`: the Shap-E decoder geometry (diffusers'
`ShapEParamsProjModel` projects a 1024 x 1024 latent to the first four MLP weights; the other
MLP layers are a diffusers `MLPNeRSTFModel`'s, the always-zero direction columns dropped), one
N x N view (orbit camera at azimuth 0.6, elevation 0.5, radius 4, fov 0.7), 64 stratified samples
per ray at the bin centres in the [-1, 1]^3 box, the fine density/colour channels, compositing
over black, then over grey backgrounds 0, 0.33, 0.66 and 1 (4 images), bilinear resize to 224 with
CLIP normalisation, transformers' `CLIPVisionModelWithProjection` at its default config (ViT-B/32)
+ projection to 512, loss -mean cosine with a fixed random unit text embedding, backward.

Checkpointing ("ckpt"): ray chunks of 256 through `torch.utils.checkpoint` and transformers'
gradient checkpointing of every CLIP block.

Run (see benches/reference/README.md for the venv):
    venv/bin/python benches/reference/guide_cpu_v1.py --res 32 --ckpt --repeats 3
Prints one JSON line: the seconds of each repeat, their minimum, and the peak RSS (MiB, weights
included) of the process.
"""

import argparse
import json
import math
import resource
import time

import torch
import torch.nn.functional as F
from diffusers.pipelines.shap_e.renderer import MLPNeRSTFModel, ShapEParamsProjModel, encode_position
from torch.utils.checkpoint import checkpoint
from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection

from twin import add_flush_arg, flush

N_SAMPLES = 64
CHUNK = 256
DIRENC_DIM = 51  # the direction encoding's width, always zero in Shap-E rendering
OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_STD = (0.26862954, 0.26130258, 0.27577711)


def orbit_rays(azimuth, elevation, radius, fov, res):
    """Origins and unit directions (res*res, 3) of an orbit camera looking at the origin."""
    a, e = azimuth, elevation
    z = torch.tensor([math.sin(a) * math.cos(e), math.cos(a) * math.cos(e), -math.sin(e)], dtype=torch.float64)
    x = torch.tensor([math.cos(a), -math.sin(a), 0.0], dtype=torch.float64)
    y = torch.linalg.cross(z, x)
    f = torch.linspace(-1.0, 1.0, res, dtype=torch.float64) * math.tan(fov / 2)
    fy, fx = torch.meshgrid(f, f, indexing="ij")
    d = z + fx.reshape(-1, 1) * x + fy.reshape(-1, 1) * y
    d = d / d.norm(dim=-1, keepdim=True)
    o = (-z * radius).expand_as(d)
    return o.float().contiguous(), d.float().contiguous()


def ray_samples(o, d):
    """Stratified sample distances at the bin centres (jitter 0.5), bin widths and the hit mask."""
    dd = torch.where(d < 0, d - 1e-6, d + 1e-6)
    a, b = (-1.0 - o) / dd, (1.0 - o) / dd
    t0 = torch.minimum(a, b).amax(-1).clamp(min=0.0)
    t1 = torch.maximum(a, b).amin(-1)
    hit = t0 + 1e-3 < t1
    t0 = torch.where(hit, t0, torch.zeros_like(t0))
    t1 = torch.where(hit, t1, torch.ones_like(t1))
    u = torch.linspace(0.0, 1.0, N_SAMPLES)
    ts = t0[:, None] * (1 - u) + t1[:, None] * u
    mids = (ts[:, 1:] + ts[:, :-1]) / 2
    lower = torch.cat([t0[:, None], mids], 1)
    upper = torch.cat([mids, t1[:, None]], 1)
    ts = lower + (upper - lower) * 0.5
    mids = (ts[:, 1:] + ts[:, :-1]) / 2
    lower = torch.cat([t0[:, None], mids], 1)
    upper = torch.cat([mids, t1[:, None]], 1)
    return ts, upper - lower, hit.float()


class Renderer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.params_proj = ShapEParamsProjModel()
        self.mlp = MLPNeRSTFModel()
        for p in self.parameters():
            p.requires_grad_(False)

    def mlp_weights(self, latent):
        return list(self.params_proj(latent).values())

    def chunk(self, o, d, ts, delta, hit, *weights):
        """(r, 4): RGB over black and opacity of rays o + t d."""
        pts = o[:, None, :] + ts[..., None] * d[:, None, :]
        h = encode_position(pts.reshape(1, -1, 3))
        layers = self.mlp.mlp
        for i, layer in enumerate(layers):
            if i < len(weights):
                h = torch.baddbmm(layer.bias, h, weights[i].transpose(1, 2))
            elif i == self.mlp.config.insert_direction_at:
                h = F.linear(h, layer.weight[:, : layer.weight.shape[1] - DIRENC_DIM], layer.bias)
            else:
                h = layer(h)
            if i < len(layers) - 1:
                h = F.silu(h)
        raw = h.reshape(o.shape[0], N_SAMPLES, -1)
        density = F.relu(raw[..., 2])
        rgb = torch.sigmoid(raw[..., 9:12])
        tau = density * delta
        mass = torch.cumsum(tau, 1)
        trans = torch.exp(-mass[:, -1])
        before = torch.cat([torch.zeros_like(mass[:, :1]), mass[:, :-1]], 1)
        w = (1 - torch.exp(-tau)) * torch.exp(-before)
        colour = (rgb * w[..., None]).sum(1) * hit[:, None]
        trans = trans * hit + (1 - hit)
        return torch.cat([colour, (1 - trans)[:, None]], 1)

    def forward(self, latent, o, d, ckpt):
        ts, delta, hit = ray_samples(o, d)
        weights = self.mlp_weights(latent)
        if not ckpt:
            return self.chunk(o, d, ts, delta, hit, *weights)
        outs = []
        for s in range(0, o.shape[0], CHUNK):
            sl = slice(s, s + CHUNK)
            outs.append(checkpoint(self.chunk, o[sl], d[sl], ts[sl], delta[sl], hit[sl], *weights, use_reentrant=False))
        return torch.cat(outs, 0)


def clip_loss(vit, images, text, side):
    """-mean cosine of the images (bilinear resize to side, CLIP normalisation) with the text."""
    images = F.interpolate(images, size=(side, side), mode="bilinear", align_corners=False, antialias=True)
    mean = torch.tensor(OPENAI_MEAN, device=images.device).view(1, 3, 1, 1)
    std = torch.tensor(OPENAI_STD, device=images.device).view(1, 3, 1, 1)
    emb = vit(pixel_values=(images - mean) / std).image_embeds
    return -(F.normalize(emb, dim=-1) @ text.T).mean()


def step(renderer, vit, latent0, text, res, ckpt):
    z = latent0.clone().requires_grad_(True)
    o, d = orbit_rays(0.6, 0.5, 4.0, 0.7, res)
    out = renderer(z, o, d, ckpt)
    rgb = out[:, :3].reshape(res, res, 3).permute(2, 0, 1)
    alpha = out[:, 3].reshape(1, res, res)
    images = torch.stack([rgb + (1 - alpha) * g for g in (0.0, 0.33, 0.66, 1.0)])
    loss = clip_loss(vit, images, text, 224)
    loss.backward()
    assert z.grad is not None
    return loss.item()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--res", type=int, default=32)
    ap.add_argument("--ckpt", action="store_true")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    add_flush_arg(ap)
    a = ap.parse_args()
    flush(a)
    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    renderer = Renderer()
    vit = CLIPVisionModelWithProjection(CLIPVisionConfig(projection_dim=512))
    vit.requires_grad_(False)
    vit.train(False)
    if a.ckpt:
        vit.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        vit.train(True)  # transformers only checkpoints in training mode; the model has no dropout
    latent0 = (torch.randn(1, 1024, 1024) * 0.3).clamp(-1, 1)
    text = F.normalize(torch.randn(1, 512), dim=-1)
    secs = []
    for _ in range(a.repeats):
        t = time.perf_counter()
        step(renderer, vit, latent0, text, a.res, a.ckpt)
        secs.append(time.perf_counter() - t)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({
        "impl": "pytorch", "torch": torch.__version__, "threads": torch.get_num_threads(),
        "res": a.res, "ckpt": a.ckpt, "flush_denormal": a.flush_denormal,
        "seconds": secs, "min_seconds": min(secs), "peak_rss_mib": rss,
    }))


if __name__ == "__main__":
    main()
