"""PyTorch twin of guided `clipsculpt generate` (`--guide sampling`, the default) on a
diffusers-layout model folder: the parts of pipeline.py's ShapEPipeline in a PyTorch loop of the
same guided Heun steps (guide/sampling.rs), then the same mesh as pipeline.py.

At each Heun step whose sigma lies in [0.2, 20] (generate's window) the classifier-free-guided x0
prediction is computed with a graph (both branches as one batch, every prior block under
torch.utils.checkpoint), clipped with the gradient passed straight through, scored by the view
loss (stages.py's `view_loss`: 2 views of 64^2 rays, 32 + 32 samples per ray, ray chunks of 1024
and CLIP blocks checkpointed, loss -mean cosine to the scoring CLIP's text embedding), the
gradient taken to the sampler state; the unguided Heun step follows and the state is pushed by
scale * (1 - sigma_next / sigma) * rms(x - D) * g / rms(g). The keep guard then finishes the
unguided chain from the first guided step and scores both latents on 4 held-aside views (64^2
rays, 32 + 32 samples, no graph).

Differences, all cheap next to the products: fixed orbit cameras and backgrounds instead of
random ones, no random crops, no transmittance term, no negative prompts (the random folders have
none), no previews.

    venv/bin/python benches/reference/guided.py --model /tmp/rm --device cuda --dtype bf16

Prints `guided-latent` (prompt encoding, the guided loop and the keep guard), `guided-mesh` and
`guided-total` lines like pipeline.py's, with the number of guided steps.
"""

import time

import torch
import torch.nn.functional as F
from pipeline import load, parse_run_args, report
from stages import checkpoint_blocks, load_guide_models, mesh_of, view_loss, write_ply
from twin import Clock, sync

SIGMA_MIN, SIGMA_MAX, SCALE = 0.2, 20.0, 2.0


class Sampler:
    """The Heun/Karras loop over the pipeline's prior and scheduler, guided by `loss`."""

    def __init__(self, pipe, emb, guidance_scale, loss):
        s = pipe.scheduler
        self.prior, self.emb, self.gs, self.loss = pipe.prior, emb, guidance_scale, loss
        self.sigmas = torch.cat([s.sigmas[:1], s.sigmas[1::2]]).tolist()  # distinct, ending in 0
        self.ts = list(torch.cat([s.timesteps[:1], s.timesteps[1::2]]))  # tensors: fractional
        self.width = pipe.prior.config.embedding_dim

    def denoise(self, x, i):
        """The clipped CFG x0 prediction at sigma i (with a graph when x requires one)."""
        sigma = self.sigmas[i]
        inp = x / (sigma**2 + 1) ** 0.5
        out = self.prior(torch.cat([inp, inp]), timestep=self.ts[i], proj_embedding=self.emb)
        u, c = out.predicted_image_embedding[..., : self.width].chunk(2)
        d = u + self.gs * (c - u)
        return d + (d.clamp(-1, 1) - d).detach()  # the clip, gradient passed straight through

    def step(self, x, i, guided):
        """One Heun step from sigma i (guided when asked); the new state."""
        s, sn = self.sigmas[i], self.sigmas[i + 1]
        g = None
        if guided:
            xg = x.detach().requires_grad_(True)
            d = self.denoise(xg, i)
            (g,) = torch.autograd.grad(self.loss(d), xg)
            d = d.detach()
        else:
            with torch.no_grad():
                d = self.denoise(x, i)
        with torch.no_grad():
            deriv = (x - d) / s
            nxt = x + deriv * (sn - s)
            if sn > 0:
                nxt = x + (deriv + (nxt - self.denoise(nxt, i + 1)) / sn) / 2 * (sn - s)
            if g is not None:
                rms = lambda t: t.pow(2).mean().sqrt()  # noqa: E731
                nxt = nxt - SCALE * (1 - sn / s) * rms(x - d) * g / rms(g)
        return nxt

    def guides(self, i):
        return self.sigmas[i + 1] > 0 and SIGMA_MIN <= self.sigmas[i] <= SIGMA_MAX

    def run(self, x, start=0, guide=True):
        """The chain from step `start`: (latent, guided steps, state at the first guided step)."""
        fork, guided = None, 0
        for i in range(start, len(self.ts)):
            g = guide and self.guides(i)
            if g and fork is None:
                fork = (i, x)
            guided += g
            x = self.step(x, i, g)
        return x, guided, fork


def clip_text(model, prompt, device):
    """The scoring CLIP's normalised text embedding (1, projection) of prompt."""
    from transformers import CLIPTextModelWithProjection, CLIPTokenizerFast

    tok = CLIPTokenizerFast.from_pretrained(f"{model}/clip", model_max_length=77)
    text = CLIPTextModelWithProjection.from_pretrained(f"{model}/clip").eval().to(device)
    ids = tok(prompt, padding="max_length", truncation=True, return_tensors="pt").input_ids.to(device)
    with torch.no_grad():
        return F.normalize(text(ids).text_embeds, dim=-1)


def held_aside(renderer, vit, z, text):
    """The held-aside cosine of z: 4 views, no graph (view_loss's renderer at 32 + 32 samples)."""
    with torch.no_grad():
        return -view_loss(renderer, vit, z, text, False, views=4, n_coarse=32, n_fine=32, seed=11).item()


def guided_run(parts, args, clock, out):
    """One run: (latent seconds, peak, mesh seconds, peak, vertices, guided steps)."""
    pipe, renderer, vit, text, dtype = parts
    gen = torch.Generator().manual_seed(args.seed)
    clock.reset()

    def latent():
        emb = pipe._encode_prompt(args.prompt, pipe.prior.device, 1, True)
        pipe.scheduler.set_timesteps(args.steps, device=pipe.prior.device)
        sampler = Sampler(pipe, emb, args.guidance_scale, lambda d: view_loss(
            renderer, vit, d, text, True, n_coarse=32, n_fine=32))
        noise = torch.randn(1, 1024, sampler.width, generator=gen).to(emb.device)
        z, guided, fork = sampler.run(noise * pipe.scheduler.init_noise_sigma)
        if fork is not None:  # the keep guard: the unguided sample from the same noise, both scored
            plain = sampler.run(fork[1], fork[0], guide=False)[0]
            z = max((z, plain), key=lambda c: held_aside(renderer, vit, c, text))
        return z, guided

    t_latent, (z, guided) = clock.time(latent)
    p_latent = clock.peak_mib()
    clock.reset()

    def mesh():
        verts, faces, rgb = mesh_of(pipe.shap_e_renderer, z.float(), dtype, args.grid)
        write_ply(out, verts, faces, rgb)
        return len(verts)

    t_mesh, vertices = clock.time(mesh)
    return t_latent, p_latent, t_mesh, clock.peak_mib(), vertices, guided


def main():
    args, device, dtype = parse_run_args("a diffusers-layout folder holding shap_e/ and clip/")
    start = time.perf_counter()
    pipe = load(args.model, device, dtype)
    checkpoint_blocks(pipe.prior)
    renderer, vit = load_guide_models(args.model, device, dtype, True)
    text = clip_text(args.model, args.prompt, device)
    sync(device)
    loading = time.perf_counter() - start
    parts, clock, out = (pipe, renderer, vit, text, dtype), Clock(device), f"{args.out}/mesh_guided.ply"
    for _ in range(args.warmup):
        guided_run(parts, args, clock, out)
    runs = [guided_run(parts, args, clock, out) for _ in range(args.repeats)]
    report("guided", runs, loading, args, guided_steps=runs[-1][5])


if __name__ == "__main__":
    main()
