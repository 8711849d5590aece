#!/usr/bin/env bash
# Side-by-side timing of workload guide-cpu-v1: `cargo bench --bench guide` vs the PyTorch
# reference, one configuration per process, Rust and PyTorch interleaved, ROUNDS rounds.
# Usage: PY=venv/ref/bin/python benches/reference/compare.sh [ROUNDS] [RESOLUTIONS]
# TWIN_ARGS adds options to every PyTorch run (`--flush-denormal`: flush subnormals as clipsculpt does).
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
resolutions=${2:-"32 64"}
py=${PY:-python3}
cargo bench --bench guide --no-run >/dev/null 2>&1
grep -m1 "model name" /proc/cpuinfo || true
echo "cores: $(nproc)"
for round in $(seq "$rounds"); do
  for res in $resolutions; do
    for ckpt in none ckpt; do
      # The bench's row: "| ViT-B/32 | 2×32×32 | <checkpointing> | <seconds> | …".
      rust=$(GUIDE_BENCH_RES=$res GUIDE_BENCH_CKPT=$ckpt cargo bench --bench guide 2>/dev/null | grep "×${res}×${res} |")
      echo "round $round rust    $rust"
      flag=""
      [ "$ckpt" = ckpt ] && flag="--ckpt"
      torch=$("$py" benches/reference/guide_cpu_v1.py --res "$res" $flag ${TWIN_ARGS:-} 2>/dev/null | tail -1)
      echo "round $round pytorch $torch"
    done
  done
done
