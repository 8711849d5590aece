#!/usr/bin/env bash
# The first check of a CUDA build on a GPU machine (no Rust, no network needed): runs from an
# unpacked `scripts/build-cuda.sh --dist` archive. See docs/gpu.md.
set -uo pipefail

usage() {
  cat <<'EOF'
usage: gpu-check.sh [--quick] [--steps NAME,...] [--out DIR] [--budget SECONDS]

Runs the prebuilt CUDA binary and benches of an unpacked dist archive
(clipsculpt-cuda-smNN/{bin,lib,scripts}) and prints one markdown table:
  (0) the one-time costs of a fresh machine: the first use of each kernel module with an empty
      driver cache, then cached (bench-kernel_load);
  (a) the embedded toy default on the GPU (bf16 twice, since the first CUDA process on a machine
      pays one-time costs, then f32) and on the CPU (f32): CLIP cosines, mesh statistics,
      seconds and peak memory from each report.json;
  (b) random-weight models of published sizes (Shap-E prior 24 x 1024, decoder 256 wide,
      CLIP ViT-B/16 geometry; written by clipsculpt-lab random-models) through `generate`:
      guided sampling through the prior with the prior's blocks unchecked vs checkpointed (the
      latents should be bitwise equal), then under --memory-budget 8GiB;
  (c) the prior-guidance bench at the published prior shape (f32 and bf16), `generate` with
      its defaults on (b)'s models (64 prior steps), then end-to-end guidance on them (a short
      chain, then its defaults);
  (d) the other benches (guide, clip, render, checkpoint) on the GPU, unchecked vs checkpointed
      and f32 vs bf16;
  (e) compare-pytorch: (b)'s models through scripts/reference/gpu-compare.sh, clipsculpt against
      its PyTorch twins (each published-size stage, `generate --guide off` against diffusers'
      ShapEPipeline, guided `generate` against a PyTorch loop of its guided steps), interleaved,
      one table; needs a python3 (or $PY) with torch, diffusers, transformers, safetensors and
      scikit-image; COMPARE_ROUNDS (1) and COMPARE_STAGES (gpu-compare.sh's list) size it.
      It is last and long: run it alone with --steps random-models,compare-pytorch --budget 900.
Steps run in that order, so a short --budget keeps the first ones. The research settings of the
runs (views, render side, checkpoint policies, end-to-end chain) are the --settings files in
scripts/gpu-check/.

  --quick           only (a) on the GPU in bf16 and one guide bench (a smoke test, ~1 min)
  --steps NAME,...  run only the steps of these names (as the step table names them; the
                    published-* steps also need random-models), e.g. to rerun what a budget cut
  --out DIR         where runs and logs go (default: a new temporary folder)
  --budget SECONDS  stop starting new steps after this many seconds (default 420)
  -h, --help        this text

Needs: the NVIDIA driver (nvidia-smi, libcuda.so.1), python3, and the CUDA 13 runtime
libraries of a PyTorch cu13 install (found through python3, else `find`); libcurand comes from
the archive's lib/, else from that install or anywhere `find` sees one. Exit codes: 0 all
steps ran, 1 some step failed or was skipped, 2 usage or setup.
EOF
}

die_usage() { echo "gpu-check.sh: $1 (see --help)" >&2; exit 2; }

QUICK=0
ONLY=""
OUT=""
BUDGET=420
while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --quick) QUICK=1 ;;
    --steps) [ $# -ge 2 ] && [ -n "$2" ] || die_usage "--steps needs step names"; ONLY=",$2,"; shift ;;
    --out) [ $# -ge 2 ] && [ -n "$2" ] || die_usage "--out needs a directory"; OUT=$2; shift ;;
    --budget)
      [ $# -ge 2 ] || die_usage "--budget needs a number of seconds"
      case "$2" in '' | *[!0-9]*) die_usage "--budget needs a number of seconds, got '$2'" ;; esac
      BUDGET=$2; shift ;;
    -*) die_usage "unknown option '$1'" ;;
    *) die_usage "unexpected argument '$1'" ;;
  esac
  shift
done

ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN="$ROOT/bin"
SET="$ROOT/scripts/gpu-check"
if [ ! -x "$BIN/clipsculpt" ]; then
  echo "gpu-check.sh: no $BIN/clipsculpt: run this from an unpacked build-cuda.sh --dist archive" >&2
  exit 2
fi
if [ ! -x "$BIN/clipsculpt-lab" ] || [ ! -f "$SET/published.json" ]; then
  echo "gpu-check.sh: no $BIN/clipsculpt-lab or $SET/*.json: unpack an archive from this tree's build-cuda.sh --dist" >&2
  exit 2
fi
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT" || die_usage "cannot create --out $OUT"
LOG="$OUT/gpu-check.log"
: >"$LOG"

# Runtime libraries: the archive's libcurand plus the CUDA 13 libraries of a PyTorch cu13 install.
CU13=$(python3 -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13", "lib"))' 2>/dev/null)
if [ -z "$CU13" ] || [ ! -e "$CU13/libcublas.so.13" ]; then
  CU13=$(dirname "$(find / -name libcublas.so.13 -path '*cu13*' 2>/dev/null | head -1)" 2>/dev/null)
fi
CURAND=""
if [ ! -e "$ROOT/lib/libcurand.so.10" ] && { [ -z "$CU13" ] || [ ! -e "$CU13/libcurand.so.10" ]; }; then
  CURAND=$(dirname "$(find / -name 'libcurand.so.10*' 2>/dev/null | head -1)" 2>/dev/null)
fi
export LD_LIBRARY_PATH="$ROOT/lib${CU13:+:$CU13}${CURAND:+:$CURAND}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if ldd "$BIN/clipsculpt" "$BIN/clipsculpt-lab" | grep -q 'not found'; then
  echo "gpu-check.sh: unresolved libraries (LD_LIBRARY_PATH=$LD_LIBRARY_PATH):" >&2
  ldd "$BIN/clipsculpt" "$BIN/clipsculpt-lab" | grep 'not found' >&2
  exit 2
fi

START=$SECONDS
FAILED=0
declare -a STEPS=()
left() { echo $((BUDGET - (SECONDS - START))); }
# step NAME TIMEOUT CMD...: runs CMD with a time limit, logs it, records its status.
step() {
  local name=$1 limit=$2; shift 2
  case "$ONLY" in "" | *",$name,"*) ;; *) return 1 ;; esac
  if [ "$(left)" -lt 10 ]; then
    STEPS+=("| $name | skipped (time budget) | |"); FAILED=1; return 1
  fi
  [ "$limit" -gt "$(left)" ] && limit=$(left)
  local t0=$SECONDS
  echo "### $name" >>"$LOG"
  timeout "$limit" "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"
  local rc=$?
  cat "$OUT/$name.out" >>"$LOG"
  local status=ok
  if [ $rc -eq 124 ]; then status="timed out after ${limit} s"; FAILED=1
  elif [ $rc -ne 0 ]; then status="failed (exit $rc): $(tail -1 "$OUT/$name.err")"; FAILED=1; fi
  STEPS+=("| $name | $status | $((SECONDS - t0)) s |")
  [ $rc -eq 0 ]
}

echo "# clipsculpt GPU check ($(cat "$ROOT/COMMIT" 2>/dev/null || echo unknown commit), $(cat "$ROOT/COMPUTE_CAP" 2>/dev/null))"
echo
nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv,noheader 2>&1 | sed 's/^/GPU: /'
echo

CS="$BIN/clipsculpt"
LAB="$BIN/clipsculpt-lab"
# (0) One-time costs of a fresh machine: the first use of each of candle's kernel modules with an
#     empty driver cache (CUDA_CACHE_PATH), then with the cache kept.
KL=(env CLIPSCULPT_DEVICE=cuda CLIPSCULPT_DTYPE=f32 "$BIN/bench-kernel_load")
if [ "$QUICK" = 0 ]; then
  step bench-kernel-cold 60 env CUDA_CACHE_PATH="$OUT/nv-cache" "${KL[@]}"
  step bench-kernel-cached 60 env CUDA_CACHE_PATH="$OUT/nv-cache" "${KL[@]}"
  [ -d "$OUT/nv-cache" ] && echo "driver cache after the kernel probes: $(du -sh "$OUT/nv-cache" | cut -f1)" | tee -a "$LOG"
fi

GEN=(generate "a red cube" --formats glb,ply --settings "$SET/toy.json")
# (a) The embedded toy default: GPU f32, GPU bf16, CPU f32. The first run is the machine's first
#     with the default driver cache (~/.nv/ComputeCache), unless CUDA_CACHE_PATH is set.
step toy-gpu-bf16 120 "$CS" -q --device cuda --dtype bf16 "${GEN[@]}" --out "$OUT/toy-gpu-bf16"
# The same again: the first process on a machine also pays the driver's compilation of the
# kernels it uses (cached on disk for later processes).
step toy-gpu-bf16-warm 120 "$CS" -q --device cuda --dtype bf16 "${GEN[@]}" --out "$OUT/toy-gpu-bf16-warm"
if [ "$QUICK" = 0 ]; then
  step toy-gpu-f32 120 "$CS" -q --device cuda --dtype f32 "${GEN[@]}" --out "$OUT/toy-gpu-f32"
  step toy-cpu-f32 150 "$CS" -q --device cpu --dtype f32 "${GEN[@]}" --out "$OUT/toy-cpu-f32"
fi

# (b) Random-weight models of published sizes: guided sampling through the prior with its blocks
#     unchecked vs checkpointed (decoder chunks and CLIP blocks checkpointed in both).
if [ "$QUICK" = 0 ]; then
  if step random-models 90 "$LAB" -q random-models "$OUT/published" --preset published; then
    BIG=(generate "a red cube" --model "$OUT/published/shap_e" --clip "$OUT/published/clip"
         --prior-steps 16 --grid 64 --formats glb)
    step published-blocks 120 "$CS" -q --device cuda "${BIG[@]}" --guide sampling \
      --settings "$SET/published.json" --out "$OUT/published-blocks"
    step published-none 120 "$CS" -q --device cuda "${BIG[@]}" --guide sampling \
      --settings "$SET/published-prior-none.json" --out "$OUT/published-none"
    step published-budget 120 "$CS" -q --device cuda "${BIG[@]}" --guide sampling \
      --settings "$SET/published.json" --memory-budget 8GiB --out "$OUT/published-budget"
  fi
fi

# (c) The prior-guidance bench at the published prior shape (the fastest of 3 runs per row), the
#     default settings at published size (64 prior steps, 29 of them guided), end to end.
if [ "$QUICK" = 0 ]; then
  step bench-prior-f32 120 env CLIPSCULPT_DEVICE=cuda CLIPSCULPT_DTYPE=f32 PRIOR_BENCH_REPEATS=3 "$BIN/bench-prior_guidance"
  if [ -d "$OUT/published" ]; then
    step published-default 180 "$CS" -q --device cuda generate "a wooden chair" --model "$OUT/published/shap_e" \
      --clip "$OUT/published/clip" --formats glb --out "$OUT/published-default"
  fi
  step bench-prior-bf16 90 env CLIPSCULPT_DEVICE=cuda CLIPSCULPT_DTYPE=bf16 PRIOR_BENCH_REPEATS=3 "$BIN/bench-prior_guidance"
  if [ -d "$OUT/published" ]; then
    step published-e2e 120 "$CS" -q --device cuda "${BIG[@]}" --guide end-to-end \
      --settings "$SET/published-e2e.json" --out "$OUT/published-e2e"
    step published-e2e-default 180 "$CS" -q --device cuda generate "a wooden chair" \
      --model "$OUT/published/shap_e" --clip "$OUT/published/clip" --guide end-to-end \
      --formats glb --out "$OUT/published-e2e-default"
  fi
fi

# (d) The other benches on the GPU (last: the published-size runs matter more).
bench() {  # bench NAME BINARY DTYPE [VAR=VALUE...]
  local name=$1 b=$2 dt=$3; shift 3
  step "$name" 60 env CLIPSCULPT_DEVICE=cuda CLIPSCULPT_DTYPE="$dt" CLIPSCULPT_BENCH_SIZE=gpu "$@" "$BIN/bench-$b"
}
bench bench-guide-64-bf16 guide bf16 GUIDE_BENCH_RES=64 GUIDE_BENCH_VIEWS=1 GUIDE_BENCH_CKPT=both
if [ "$QUICK" = 0 ]; then
  bench bench-guide-64-f32 guide f32 GUIDE_BENCH_RES=64 GUIDE_BENCH_VIEWS=1 GUIDE_BENCH_CKPT=both
  bench bench-guide-gpu-bf16 guide bf16
  bench bench-guide-gpu-f32 guide f32
  # The fastest of 2 rounds: on the GPU the first row otherwise carries one-time costs.
  bench bench-clip-bf16 clip bf16 CLIP_BENCH_REPEATS=2
  bench bench-clip-f32 clip f32 CLIP_BENCH_REPEATS=2
  bench bench-render-bf16 render bf16
  bench bench-checkpoint-bf16 checkpoint bf16
fi

# (e) clipsculpt against its PyTorch twins on (b)'s models (scripts/reference/README.md).
if [ "$QUICK" = 0 ] && [ -d "$OUT/published" ]; then
  step compare-pytorch 600 env DEVICE=cuda DTYPE=bf16 MODEL="$OUT/published" OUT="$OUT/compare-pytorch" \
    BENCH="$BIN/bench-stages" CLIPSCULPT="$CS" PY="${PY:-python3}" \
    "$ROOT/scripts/reference/gpu-compare.sh" "${COMPARE_ROUNDS:-1}" ${COMPARE_STAGES:+"$COMPARE_STAGES"}
fi

# (f) One markdown table from the reports, then the bench tables and the step log.
echo "## Runs (report.json)"
echo
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
mib = lambda b: "" if b is None else f"{b / 2**20:.0f}"
rows = []
for name in ["toy-cpu-f32", "toy-gpu-f32", "toy-gpu-bf16", "toy-gpu-bf16-warm", "published-none",
             "published-blocks", "published-budget", "published-default", "published-e2e",
             "published-e2e-default"]:
    p = os.path.join(out, name, "report.json")
    if not os.path.isfile(p):
        continue
    r = json.load(open(p))
    m, mem, s = r["mesh"], r["memory"], r["settings"]
    rel = mem["export_release"]
    sec, peak = r["seconds"], mem["peak_bytes"]
    rows.append([name, mem["device"], mem["dtype"], str(s.get("mode", "")),
                 str(s.get("sampling", {}).get("prior_policy", "")), str(s.get("clip_policy", "")),
                 f'{r["cosine_before"]:.4f} → {r["cosine_after"]:.4f}',
                 f'{m["vertices"]}/{m["faces"]}', f'{m["signed_volume"]:.4f}',
                 f'{sec["loading"]:.2f}', f'{sec["scoring"]:.2f}', f'{sec["sampling"]:.2f}',
                 f'{sec["optimizing"]:.2f}',
                 f'{sec["total"]:.2f}',
                 mib(peak["sampling"]), mib(peak["optimizing"]), mib(peak["export"]),
                 f'{mib(rel["before"]["reserved_bytes"])} → {mib(rel["after"]["reserved_bytes"])}'])
head = ["run", "device", "dtype", "guide", "prior policy", "decoder/CLIP policy",
        "cosine before → after", "vertices/faces", "volume", "loading s", "scoring s", "sampling s",
        "optimize s",
        "total s", "peak sampling MiB", "peak optimize MiB", "peak export MiB",
        "reserved MiB before → after trim"]
print("| " + " | ".join(head) + " |")
print("|" + "---|" * len(head))
for row in rows:
    print("| " + " | ".join(row) + " |")
ref = {}
for name in ["toy-cpu-f32", "toy-gpu-f32", "toy-gpu-bf16"]:
    p = os.path.join(out, name, "report.json")
    if os.path.isfile(p):
        ref[name] = json.load(open(p))
if "toy-cpu-f32" in ref:
    c = ref["toy-cpu-f32"]
    print()
    for name in ["toy-gpu-f32", "toy-gpu-bf16"]:
        if name in ref:
            g = ref[name]
            print(f'- {name} vs CPU f32: |Δ cosine after| = {abs(g["cosine_after"] - c["cosine_after"]):.2e}, '
                  f'|Δ score after| = {abs(g["score_after"] - c["score_after"]):.2e}, '
                  f'vertices {g["mesh"]["vertices"]} vs {c["mesh"]["vertices"]}, '
                  f'volume {g["mesh"]["signed_volume"]:.4f} vs {c["mesh"]["signed_volume"]:.4f}')
latents = [os.path.join(out, n, "latent.safetensors") for n in ["published-none", "published-blocks"]]
if all(os.path.isfile(p) for p in latents):
    same = open(latents[0], "rb").read() == open(latents[1], "rb").read()
    print(f'- published latent, prior unchecked vs checkpointed: {"bitwise equal" if same else "DIFFERENT"}')
PY
echo
echo "## Benches"
for f in "$OUT"/bench-*.out; do
  [ -e "$f" ] || continue
  echo
  echo "### $(basename "$f" .out)"
  echo
  grep -E '^(\||device |## |weights|CUDA_)' "$f"
done
if [ -f "$OUT/compare-pytorch/gpu-compare.log" ]; then  # also what a time limit cut short
  echo
  echo "## clipsculpt vs PyTorch"
  python3 "$ROOT/scripts/reference/gpu_compare.py" table <"$OUT/compare-pytorch/gpu-compare.log"
fi
echo
echo "## Steps ($((SECONDS - START)) s; outputs in $OUT)"
echo
echo "| step | status | seconds |"
echo "|---|---|---|"
printf '%s\n' "${STEPS[@]}"
exit $FAILED
