#!/usr/bin/env bash
# clipsculpt against its PyTorch twins on one device, interleaved, one table: each stage of
# `bench-stages` against stages.py, `export` against stages.py's, the whole-run pair
# `generate --guide off` against pipeline.py (diffusers' ShapEPipeline), and guided `generate`
# against guided.py (the same pipeline's parts in a PyTorch loop of the guided steps). See README.md.
#
# Usage: MODEL=DIR [DEVICE=cpu|cuda] [DTYPE=f32|bf16] gpu-compare.sh [ROUNDS] [STAGES]
#   MODEL       a random-models --preset published folder (or any diffusers-layout one with clip/)
#   DEVICE      cpu (default) or cuda; DTYPE: bf16 on cuda, f32 on cpu by default
#   ROUNDS      rounds of every stage (default 2); STAGES: default "matmul prior-eval
#               prior-backward prior-backward-ckpt guide-ckpt export pipeline guided"
#   PY          a python with torch, diffusers, transformers, safetensors, scikit-image (python3)
#   BENCH       the bench-stages binary, CLIPSCULPT the clipsculpt binary (default: built here
#               with cargo, CPU only; a CUDA run takes those of a build-cuda.sh --dist archive)
#   STEPS, GRID, PROMPT   the whole-run pairs' prior steps (64), mesh grid (96) and prompt
#   REPEATS     timed repeats per process (1); OUT: where runs and the log go (a new temp folder)
# Prints every JSON line as `round N {...}`, then the table (gpu_compare.py). Exit 1 if any run failed.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
rounds=${1:-2}
stages=${2:-"matmul prior-eval prior-backward prior-backward-ckpt guide-ckpt export pipeline guided"}
py=${PY:-python3}
model=${MODEL:?set MODEL to a random-models --preset published folder}
device=${DEVICE:-cpu}
dtype=${DTYPE:-$([ "$device" = cpu ] && echo f32 || echo bf16)}
steps=${STEPS:-64}
grid=${GRID:-96}
prompt=${PROMPT:-a red cube}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
export CLIPSCULPT_DEVICE=$device CLIPSCULPT_DTYPE=$dtype REPEATS=${REPEATS:-1}
cmp=("$py" "$HERE/gpu_compare.py")

if ! "$py" -c "import torch, diffusers, transformers, safetensors, skimage" 2>/dev/null; then
  echo "gpu-compare.sh: $py lacks torch, diffusers, transformers, safetensors or scikit-image" >&2
  exit 2
fi
# The binaries: given, or built in this repository (CPU).
if [ -z "${BENCH:-}" ] || [ -z "${CLIPSCULPT:-}" ]; then
  root=$(cd "$HERE/../../../.." && pwd)
  (cd "$root" && cargo build --release -q -p clipsculpt-cli) || exit 2
  BENCH=${BENCH:-$(cd "$root" && cargo bench -q -p clipsculpt --bench stages --no-run --message-format=json |
    "$py" -c 'import json, sys
print([m["executable"] for m in map(json.loads, sys.stdin) if m.get("target", {}).get("name") == "stages"][-1])')}
  CLIPSCULPT=${CLIPSCULPT:-$root/target/release/clipsculpt}
fi
"$py" "$HERE/stages.py" --write-latent "$out/latent.safetensors" || exit 2

# emit ROUND IMPL STAGE CMD...: runs CMD, prints its last JSON line as `round N {...}` (or why not).
emit() {
  local round=$1 impl=$2 stage=$3; shift 3
  local line
  line=$("$@" 2>"$out/last.err" | grep '^{' | tail -1)
  if [ -n "$line" ]; then echo "round $round $line"; else
    echo "round $round $impl $stage failed: $(tail -1 "$out/last.err")"
  fi
}
# The export command as a process: wall seconds and peak RSS.
export_rs() {
  "${cmp[@]}" time "$out/time" "$CLIPSCULPT" -q --device "$device" --dtype "$dtype" export \
    "$out/latent.safetensors" --model "$model/shap_e" --grid 128 --formats ply --out "$out/export" --overwrite \
    >/dev/null || return 1
  read -r secs kib <"$out/time"
  echo "{\"impl\": \"clipsculpt\", \"stage\": \"export\", \"seconds\": [$secs], \"min_seconds\": $secs," \
    "\"peak_rss_mib\": $((kib / 1024)), \"peak_device_mib\": null, \"device\": \"$device\", \"dtype\": \"$dtype\"}"
}
# generate (GUIDE: off for the pipeline pair, sampling for the guided one): its report as lines.
whole_clipsculpt() {  # whole_clipsculpt STAGE GUIDE
  "${cmp[@]}" time "$out/time" "$CLIPSCULPT" -q --device "$device" --dtype "$dtype" generate "$prompt" \
    --model "$model/shap_e" --clip "$model/clip" --guide "$2" --prior-steps "$steps" --guidance-scale 15 \
    --grid "$grid" --formats ply --out "$out/generate-$1" --overwrite >/dev/null || return 1
  "${cmp[@]}" report "$out/generate-$1" $(cat "$out/time") "$device" "$1"
}
whole_pytorch() {  # whole_pytorch STAGE
  "$py" "$HERE/$1.py" --model "$model" --steps "$steps" --grid "$grid" --prompt "$prompt" \
    --repeats "$REPEATS" --out "$out"
}
# pair ROUND STAGE: both sides of one stage (the pipeline's three lines each).
pair() {
  local round=$1 stage=$2 side lines
  case "$stage" in
    pipeline | guided)
      local guide=off
      [ "$stage" = guided ] && guide=sampling
      for side in clipsculpt pytorch; do
        lines=$("whole_$side" "$stage" "$guide" 2>"$out/last.err" | grep '^{')
        if [ -n "$lines" ]; then printf '%s\n' "$lines" | sed "s/^/round $round /"
        else echo "round $round $side $stage failed: $(tail -1 "$out/last.err")"; fi
      done ;;
    export)
      emit "$round" clipsculpt export export_rs
      emit "$round" pytorch export "$py" "$HERE/stages.py" --stage export --model "$model" --out "$out" \
        --repeats "$REPEATS" ;;
    *)
      emit "$round" clipsculpt "$stage" env STAGE="$stage" MODEL="$model" "$BENCH"
      emit "$round" pytorch "$stage" "$py" "$HERE/stages.py" --stage "$stage" --model "$model" --repeats "$REPEATS" ;;
  esac
}

{
  grep -m1 "model name" /proc/cpuinfo || true
  echo "cores: $(nproc); device $device, dtype $dtype; $("$py" -c "import torch, diffusers, transformers
print('torch', torch.__version__, 'diffusers', diffusers.__version__, 'transformers', transformers.__version__,
      'gpu', torch.cuda.get_device_name() if torch.cuda.is_available() else 'none')")"
  for round in $(seq "$rounds"); do
    for stage in $stages; do
      pair "$round" "$stage"
      echo "load average: $(cut -d' ' -f1-3 /proc/loadavg)"
    done
  done
} | tee "$out/gpu-compare.log"
echo
echo "## clipsculpt vs PyTorch"
"${cmp[@]}" table <"$out/gpu-compare.log"
grep -q ' failed: ' "$out/gpu-compare.log" && exit 1
exit 0
