#!/usr/bin/env bash
# Issue 53's training of one U2 world (lab/docs/replication-u-protocol.md §3 and amendment 1): the copy step
# (world L's decoder, latents and text encoder from lab/worlds/toy-deep, U's scoring CLIP from
# lab/worlds/toy-sharp/clip, the frozen guidance.json), then train-toy with --resume. Rerun it unchanged after a
# kill: the copy step is skipped when the folder exists, and training resumes from its checkpoint.
# Usage: lab/scripts/replication_train.sh s1|s2|s1-seed1   (log: lab/runs/replication-u/toy-u2-<world>.train.log)
# LAB_BIN=path runs a saved copy of the lab binary instead of target/release/clipsculpt-lab (so that builds made
# meanwhile do not change the binary a queued training uses).
set -euo pipefail
# One block, read whole before it runs: editing this file meanwhile cannot change a running training.
{
cd "$(dirname "$0")/../.."
S1="a red sphere,a green cube,a blue cylinder,a yellow cone,a white torus,a black capsule"
S2="a blue sphere,a yellow cube,a green cylinder,a black cone,a red torus,a white capsule"
case "${1:-}" in
  s1) out=lab/worlds/toy-u2-s1 split=$S1 seed=0 ;;
  s2) out=lab/worlds/toy-u2-s2 split=$S2 seed=0 ;;
  s1-seed1) out=lab/worlds/toy-u2-s1-seed1 split=$S1 seed=1 ;;
  *) echo "usage: $0 s1|s2|s1-seed1" >&2; exit 2 ;;
esac
bin=${LAB_BIN:-target/release/clipsculpt-lab}
[ -x "$bin" ] || { echo "error: build it first: cargo build --release -p clipsculpt-lab" >&2; exit 1; }
if [ ! -d "$out" ]; then
  tmp="$out.copying"
  rm -rf "$tmp"
  cp -r lab/worlds/toy-deep "$tmp"
  rm -rf "$tmp/clip"
  cp -r lab/worlds/toy-sharp/clip "$tmp/clip"
  printf '%s\n' '{"sampling_scale": 0.5, "e2e_lr": 0.1, "keep_margin": 0.05, "sampler_export": "guarded", "clip": "../clip"}' \
    > "$tmp/shap_e/guidance.json"
  mv "$tmp" "$out"
fi
log=lab/runs/replication-u/$(basename "$out").train.log
mkdir -p "$(dirname "$log")"
nice -n 19 "$bin" train-toy --out "$out" --seed "$seed" --only-prior --held-out "$split" \
  --instances 4 --prior-timestep-power 4 --prior-min-snr 5 --prior-weight-decay 0 --prior-layers 8 \
  --prior-train-steps 4000 --prior-uncaptioned-held-out --prior-uncaptioned-weight 0.1 --prior-distractors 240 \
  --resume 2>>"$log"
exit 0
}
