"""PyTorch twin of `clipsculpt generate --guide off` on a diffusers-layout model folder (the random
weights of `random-models --preset published`, or the published Shap-E), offline: diffusers'
`ShapEPipeline` built from the folder's parts (prior, text_encoder, tokenizer, scheduler,
shap_e_renderer) samples one prompt's latent (`output_type="latent"`, 64 Heun steps, guidance
scale 15), then the mesh as diffusers' `decode_to_mesh` makes it, with scikit-image's marching
cubes (stages.py's `mesh_of`: random folders lack the mesh decoder's tables), at `--grid` (96,
generate's default), written as a binary PLY.

    venv/bin/python benches/reference/pipeline.py --model /tmp/rm --device cuda --dtype bf16

`--device`, `--dtype`, `--warmup` as twin.py reads them (bf16: the prior, the text encoder and
the decoder's static MLP layers in clipsculpt's mixed precision). Prints three JSON lines:
`pipeline-latent` (prompt encoding and sampling), `pipeline-mesh` (decode, marching cubes,
colours, PLY) and `pipeline-total` (loading plus both), each with its seconds per repeat and, on
CUDA, the allocator's peak (`peak_device_mib`).

What `generate --guide off` does besides (so its `total` is larger): it also scores the latent
with the scoring CLIP on four held-aside views, renders 20-view previews of the latents and an
8-view mesh preview, decimates the mesh to --faces and writes the latents and report.json; its
noise comes from its own generator, so the two meshes differ (the vertex counts are printed).
"""

import argparse
import json
import os
import time

import torch
from stages import load_renderer, mesh_of, write_ply
from twin import DTYPES, Clock, add_device_args, narrow, record, resolve, sync

# Shap-E's scheduler (diffusers' openai/shap-e scheduler_config.json), used where the folder has none.
SHAP_E_SCHEDULER = dict(
    num_train_timesteps=1024, beta_schedule="exp", prediction_type="sample", use_karras_sigmas=True,
    clip_sample=True, clip_sample_range=1.0, timestep_spacing="linspace", steps_offset=0,
)


def load(model, device, dtype):
    """ShapEPipeline from the parts of `model/shap_e` on `device` (the renderer unnarrowed:
    mesh_of narrows it around the latent's projected layers)."""
    from diffusers import HeunDiscreteScheduler, PriorTransformer, ShapEPipeline
    from transformers import CLIPTextModelWithProjection, CLIPTokenizerFast

    root = f"{model}/shap_e"
    prior = narrow(PriorTransformer.from_pretrained(f"{root}/prior").eval().to(device), dtype)
    text = CLIPTextModelWithProjection.from_pretrained(f"{root}/text_encoder").eval().to(device)
    narrow(text, dtype)
    if os.path.isdir(f"{root}/scheduler"):
        scheduler = HeunDiscreteScheduler.from_pretrained(f"{root}/scheduler")
    else:
        scheduler = HeunDiscreteScheduler(**SHAP_E_SCHEDULER)
    tokenizer = CLIPTokenizerFast.from_pretrained(f"{root}/tokenizer", model_max_length=77)
    pipe = ShapEPipeline(prior=prior, text_encoder=text, tokenizer=tokenizer, scheduler=scheduler,
                         shap_e_renderer=load_renderer(model, device))
    pipe.set_progress_bar_config(disable=True)
    return pipe


def run(pipe, args, clock, dtype, out):
    """One run: (latent seconds, latent peak, mesh seconds, mesh peak, vertices)."""
    gen = torch.Generator().manual_seed(args.seed)
    clock.reset()
    t_latent, latent = clock.time(lambda: pipe(
        args.prompt, num_inference_steps=args.steps, guidance_scale=args.guidance_scale,
        generator=gen, output_type="latent").images)
    p_latent = clock.peak_mib()
    clock.reset()

    def mesh():
        verts, faces, rgb = mesh_of(pipe.shap_e_renderer, latent.reshape(1, 1024, -1).float(), dtype, args.grid)
        write_ply(out, verts, faces, rgb)
        return len(verts)

    t_mesh, vertices = clock.time(mesh)
    return t_latent, p_latent, t_mesh, clock.peak_mib(), vertices


def parse_run_args(model_help):
    """The whole-run twins' shared options (generate's defaults), the device and the dtype."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True, help=model_help)
    ap.add_argument("--prompt", default="a red cube")
    ap.add_argument("--steps", type=int, default=64, help="Heun steps (generate's --prior-steps)")
    ap.add_argument("--guidance-scale", type=float, default=15.0)
    ap.add_argument("--grid", type=int, default=96, help="the mesh lattice (generate's --grid)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--out", default="/tmp/clipsculpt-pipeline", help="the folder for the PLY")
    add_device_args(ap)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    return args, resolve(args), DTYPES[args.dtype]


def report(name, runs, loading, args, **extra):
    """One JSON line each for `name`-latent, -mesh and -total from runs of (latent s, latent peak, mesh s, mesh
    peak, vertices, ...)."""
    peak = lambda i: None if runs[0][i] is None else max(r[i] for r in runs)  # noqa: E731
    extra = dict(steps=args.steps, guidance_scale=args.guidance_scale, grid=args.grid, **extra)
    print(json.dumps(record(f"{name}-latent", [r[0] for r in runs], peak(1), args, **extra)))
    print(json.dumps(record(f"{name}-mesh", [r[2] for r in runs], peak(3), args, vertices=runs[-1][4], **extra)))
    total_peak = None if peak(1) is None else max(peak(1), peak(3))
    print(json.dumps(record(f"{name}-total", [loading + r[0] + r[2] for r in runs], total_peak, args,
                            loading_seconds=loading, **extra)))


def main():
    args, device, dtype = parse_run_args("a diffusers-layout folder holding shap_e/")
    clock = Clock(device)
    start = time.perf_counter()
    pipe = load(args.model, device, dtype)
    sync(device)
    loading = time.perf_counter() - start
    out = f"{args.out}/mesh_pipeline.ply"
    for _ in range(args.warmup):
        run(pipe, args, clock, dtype, out)
    runs = [run(pipe, args, clock, dtype, out) for _ in range(args.repeats)]
    report("pipeline", runs, loading, args)


if __name__ == "__main__":
    main()
