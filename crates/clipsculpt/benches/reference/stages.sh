#!/usr/bin/env bash
# Side by side: `cargo bench --bench stages` and its PyTorch twin `stages.py`, one stage per
# process, Rust and PyTorch interleaved, ROUNDS rounds, on the random published-size models in MODEL.
# The `export` stage times the release binary's `export --grid 128 --formats ply` (wall seconds and
# peak RSS from /usr/bin/time) on the latent stages.py writes, against stages.py's twin.
# Usage: PY=venv/bin/python MODEL=/tmp/rm benches/reference/stages.sh [ROUNDS] [STAGES]
# TWIN_ARGS adds options to every stages.py run (`--flush-denormal`: flush subnormals as clipsculpt does).
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-1}
stages=${2:-"matmul prior-eval prior-backward prior-backward-ckpt guide-ckpt export"}
py=${PY:-python3}
model=${MODEL:?set MODEL to a random-models --preset published folder}
cargo bench --bench stages --no-run >/dev/null 2>&1
# The application binary (crate clipsculpt-cli) for the export stage; CLIPSCULPT names another.
clipsculpt=${CLIPSCULPT:-../../target/release/clipsculpt}
case " $stages " in *" export "*) [ -n "${CLIPSCULPT:-}" ] || cargo build --release -q -p clipsculpt-cli ;; esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" benches/reference/stages.py --write-latent "$tmp/latent.safetensors"

# The export command, timed as a process: one JSON line like the bench's.
export_rs() {
  /usr/bin/time -f '%e %M' -o "$tmp/time" "$clipsculpt" -q export "$tmp/latent.safetensors" \
    --model "$model/shap_e" --grid 128 --formats ply --out "$tmp" --overwrite >/dev/null
  read -r secs kib <"$tmp/time"
  echo "{\"impl\": \"clipsculpt\", \"stage\": \"export\", \"seconds\": [$secs], \"min_seconds\": $secs, \"peak_rss_mib\": $((kib / 1024))}"
}
grep -m1 "model name" /proc/cpuinfo || true
echo "cores: $(nproc); load average: $(cut -d' ' -f1-3 /proc/loadavg)"
"$py" -c "import torch, diffusers; print('torch', torch.__version__, 'diffusers', diffusers.__version__)"
for round in $(seq "$rounds"); do
  for stage in $stages; do
    if [ "$stage" = export ]; then
      echo "round $round $(export_rs)"
    else
      echo "round $round $(STAGE=$stage MODEL=$model cargo bench --bench stages 2>/dev/null | tail -1)"
    fi
    echo "round $round $("$py" benches/reference/stages.py --stage "$stage" --model "$model" --out "$tmp" ${TWIN_ARGS:-} 2>/dev/null | tail -1)"
    echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
  done
done
