"""PyTorch twin of `cargo bench --bench stages` (see benches/stages.rs): one stage of a
published-size run on the random weights of `random-models --preset published`, loaded with
diffusers' `PriorTransformer.from_pretrained`.

Stages: `prior-eval` (one evaluation, batch 2, no graph), `prior-backward` (the guided x0
prediction u + 3 (c - u) of a state x, loss sum(w * guided), backward to x) and
`prior-backward-ckpt` (the same with every block under `torch.utils.checkpoint`).

    venv/bin/python benches/reference/stages.py --stage prior-eval --model /tmp/rm --repeats 1

Prints one JSON line: the seconds of each repeat, their minimum, and the peak RSS (MiB, weights
included) of the process.
"""

import argparse
import json
import resource
import time

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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stage", default="prior-eval")
    ap.add_argument("--model", required=True)
    ap.add_argument("--repeats", type=int, default=1)
    args = ap.parse_args()
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
