#!/usr/bin/env bash
# Issue 53's evaluations (lab/docs/replication-u-protocol.md §5 and amendment 3): one worker that takes, in the
# protocol's order, each run that is neither complete nor held by another worker, and runs it with the protocol's
# command, `--resume` and one thread. Start it twice, one per core; rerun after a kill and it continues where the
# records stop.
# Usage: LAB_BIN=path lab/scripts/replication_eval.sh [RUN...]   (run numbers 1–7; default 1 2 3 4 5 6 7)
# LAB_BIN names the one saved binary that runs every eval (default target/release/clipsculpt-lab).
# Records: lab/runs/replication-u/<name>.json, each run's stderr in <name>.log beside it, its lock in <name>.lock.
set -euo pipefail
# One block, read whole before it runs: editing this file meanwhile cannot change a running evaluation.
{
cd "$(dirname "$0")/../.."
bin=${LAB_BIN:-target/release/clipsculpt-lab}
[ -x "$bin" ] || { echo "error: build it first: cargo build --release -p clipsculpt-lab" >&2; exit 1; }
[ $# -gt 0 ] || set -- 1 2 3 4 5 6 7
runs=lab/runs/replication-u
export RAYON_NUM_THREADS=1
# Yield to interactive work: `nice` alone acts only within this session's autogroup (setsid starts a new one).
echo 19 2>/dev/null >/proc/self/autogroup || true
# run WORLD CLIP NAME MODES EXPORT: one run, unless it is complete or another worker holds its lock.
run() {
  local world=$1 clip=$2 name=$3 modes=$4 export=$5 lock
  grep -qs '"complete": true' "$runs/$name.json" && return 0
  exec {lock}>"$runs/$name.lock"
  if flock -n "$lock"; then
    echo "worker $$: run $name, RAYON_NUM_THREADS=$RAYON_NUM_THREADS, binary $bin, $(date -u +%FT%TZ)" \
      >>"$runs/$name.log"
    nice -n 19 "$bin" eval lab/prompts/toy-templates.txt --model "$world/shap_e" --clip "$clip" \
      --seed 100 --seeds 3 --modes "$modes" --sampling-scale 0.5 --e2e-lr 0.1 --keep-margin 0.05 \
      --sampler-export "$export" --reference-latents "$world/latents.safetensors" \
      --records "$runs/$name.json" --resume 2>>"$runs/$name.log"
  fi
  exec {lock}>&-
}
worlds=(lab/worlds/toy-u2-s1 lab/worlds/toy-u2-s2 lab/worlds/toy-u2-s1-seed1)
names=(s1 s2 s1-seed1)
for n in "$@"; do
  case $n in
    1|2|3) w=${worlds[n-1]}; run "$w" "$w/clip" "${names[n-1]}" prior,sampling,end-to-end guarded ;;
    4|5|6) w=${worlds[n-4]}; run "$w" "$w/clip" "${names[n-4]}-unguarded" prior,sampling guided ;;
    7) run lab/worlds/toy-uncaptioned lab/worlds/toy-sharp/clip u prior,sampling,end-to-end guarded ;;
    *) echo "error: run $n: the protocol's runs here are 1–7 (run 8 only if §6's switch is reached)" >&2; exit 2 ;;
  esac
done
exit 0
}
