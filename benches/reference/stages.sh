#!/usr/bin/env bash
# Side by side: `cargo bench --bench stages` and its PyTorch twin `stages.py`, one stage per
# process, Rust and PyTorch interleaved, ROUNDS rounds, on the random published-size models in MODEL.
# Usage: PY=venv/bin/python MODEL=/tmp/rm benches/reference/stages.sh [ROUNDS] [STAGES]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-1}
stages=${2:-"prior-eval prior-backward prior-backward-ckpt"}
py=${PY:-python3}
model=${MODEL:?set MODEL to a random-models --preset published folder}
cargo bench --bench stages --no-run >/dev/null 2>&1
grep -m1 "model name" /proc/cpuinfo || true
echo "cores: $(nproc); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
"$py" -c "import torch, diffusers; print('torch', torch.__version__, 'diffusers', diffusers.__version__)"
for round in $(seq "$rounds"); do
  for stage in $stages; do
    echo "round $round $(STAGE=$stage MODEL=$model cargo bench --bench stages 2>/dev/null | tail -1)"
    echo "round $round $("$py" benches/reference/stages.py --stage "$stage" --model "$model" 2>/dev/null | tail -1)"
    echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  done
done
