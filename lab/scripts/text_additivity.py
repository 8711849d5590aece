#!/usr/bin/env python3
"""How the toy prior's conditioning places the held-out captions: the text embeddings of the 36
captions "a <colour> <shape>" from the world's `shap_e/text_encoder` (transformers'
`CLIPTextModelWithProjection`), a least-squares fit of the 30 seen ones on one-hot colour + shape,
and for each held-out caption its residual against that additive fit, its cosine to the fit, and
the seen caption whose embedding is nearest. Needs torch, transformers and tokenizers.

    python3 scripts/text_additivity.py [WORLD (assets/toy)] [HELD_OUT_FILE]

HELD_OUT_FILE lists one caption per line; default: WORLD/shap_e/held_out.txt, else world A's six.
"""
import os
import sys

import numpy as np
import torch
from tokenizers import Tokenizer
from transformers import CLIPTextModelWithProjection

COLOURS = ["red", "green", "blue", "yellow", "white", "black"]
SHAPES = ["sphere", "cube", "cylinder", "cone", "torus", "capsule"]
WORLD_A = ["a green sphere", "a blue cube", "a yellow cylinder", "a white cone", "a black torus", "a red capsule"]


def main():
    world = sys.argv[1] if len(sys.argv) > 1 else "assets/toy"
    path = sys.argv[2] if len(sys.argv) > 2 else f"{world}/shap_e/held_out.txt"
    held = [l.strip() for l in open(path) if l.strip()] if os.path.exists(path) else WORLD_A
    model = CLIPTextModelWithProjection.from_pretrained(f"{world}/shap_e/text_encoder").eval()
    tok = Tokenizer.from_file(f"{world}/shap_e/tokenizer/tokenizer.json")
    names, emb, onehot = [], [], []
    for ci, c in enumerate(COLOURS):
        for si, s in enumerate(SHAPES):
            names.append(f"a {c} {s}")
            with torch.no_grad():
                ids = torch.tensor([tok.encode(names[-1]).ids])
                emb.append(model(input_ids=ids).text_embeds[0].numpy())
            x = np.zeros(13)
            x[ci], x[6 + si], x[12] = 1, 1, 1
            onehot.append(x)
    emb, onehot = np.array(emb), np.array(onehot)
    seen = np.array([n not in held for n in names])
    coef, *_ = np.linalg.lstsq(onehot[seen], emb[seen], rcond=None)
    fit = onehot @ coef
    spread = np.linalg.norm(emb - emb[seen].mean(0), axis=1)
    residual = np.linalg.norm(fit - emb, axis=1) / spread
    unit = emb / np.linalg.norm(emb, axis=1, keepdims=True)
    print(f"seen captions: mean residual of the additive fit {residual[seen].mean():.3f} (relative to the spread)")
    print("| held-out caption | residual | cosine to the additive fit | nearest seen caption (cosine) |")
    print("|---|---|---|---|")
    for i in np.where(~seen)[0]:
        cos = unit[seen] @ unit[i]
        j = np.where(seen)[0][int(np.argmax(cos))]
        to_fit = fit[i] @ emb[i] / np.linalg.norm(fit[i]) / np.linalg.norm(emb[i])
        print(f"| {names[i]} | {residual[i]:.3f} | {to_fit:.3f} | {names[j]} ({cos.max():.3f}) |")


if __name__ == "__main__":
    main()
