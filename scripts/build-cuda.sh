#!/usr/bin/env bash
# Builds clipsculpt with `--features cuda` on a machine that has no GPU and no CUDA toolkit.
# See docs/gpu.md for why each step is needed; run with --help for the options.
set -euo pipefail

usage() {
  cat <<'EOF'
usage: scripts/build-cuda.sh [--dist] [--no-curand] [--setup-only] [--venv DIR] [--target-dir DIR] [COMPUTE_CAP]

Builds `cargo build --release --features cuda` without a GPU or CUDA toolkit: installs a pinned
CUDA 13.0 nvcc (and the link inputs cuBLAS, cuRAND, NVRTC, cudart) from PyPI into a Python venv,
makes link-time stubs (libcuda.so is the driver's and is not on PyPI), then builds for one GPU family.

  COMPUTE_CAP        compute capability without the dot, 75..=121 (default 90: H100/H200/GH200);
                     the binary runs only on that family (90 becomes sm_90a)
  --dist             also build the bench binaries and write dist/clipsculpt-cuda-smCAP.tar.xz:
                     the stripped binaries (clipsculpt, clipsculpt-lab for random-models), the
                     benches, libcurand.so.10 (PyTorch cu13 installs lack it),
                     scripts/gpu-check.sh with its settings files and scripts/reference/ (the
                     PyTorch twins of its compare-pytorch step); unpack on the GPU machine and
                     run gpu-check.sh (the toy models are inside the binaries)
  --no-curand        leave libcurand.so.10 out of the archive (130 MB raw, 41 MB packed), for a GPU
                     machine that has it (e.g. a PyTorch image with the nvidia-curand wheel)
  --setup-only       install the toolchain and stubs, print CUDA_ROOT, do not build
  --venv DIR         toolchain venv (default $CUDA_VENV, else ~/.cache/clipsculpt/cuda13-venv);
                     keep it outside the repository, it is about 1.2 GB
  --target-dir DIR   cargo target directory (default target/cuda, beside the CPU build)
  -h, --help         this text

Needs python3 (with venv), gcc, cargo; --dist also needs strip, tar and xz. The first build takes
15-40 min on 2 cores (nvcc compiles candle's kernels). Exit codes: 0 built, 2 usage error, other: failed step.
EOF
}

die_usage() {
  echo "build-cuda.sh: $1 (see --help)" >&2
  exit 2
}

DIST=0
CURAND=1
SETUP_ONLY=0
CAP=""
VENV=${CUDA_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/clipsculpt/cuda13-venv}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET_DIR="$ROOT/target/cuda"

while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --dist) DIST=1 ;;
    --setup-only) SETUP_ONLY=1 ;;
    --no-curand) CURAND=0 ;;
    --venv)
      [ $# -ge 2 ] && [ -n "$2" ] || die_usage "--venv needs a directory"
      VENV=$2; shift ;;
    --target-dir)
      [ $# -ge 2 ] && [ -n "$2" ] || die_usage "--target-dir needs a directory"
      TARGET_DIR=$2; shift ;;
    -*) die_usage "unknown option '$1'" ;;
    *)
      [ -z "$CAP" ] || die_usage "one compute capability expected, got '$CAP' and '$1'"
      CAP=$1 ;;
  esac
  shift
done
CAP=${CAP:-90}
case "$CAP" in
  '' | *[!0-9]*) die_usage "invalid compute capability '$CAP': expected digits without a dot, e.g. 90 for 9.0" ;;
esac
# 10# so that a leading zero is not read as octal; CUDA 13 supports Turing (7.5) and newer.
if [ ${#CAP} -gt 3 ] || [ $((10#$CAP)) -lt 75 ] || [ $((10#$CAP)) -gt 121 ]; then
  die_usage "unsupported compute capability '$CAP': CUDA 13 builds 75 to 121 (e.g. 80 A100, 89 L40, 90 H100/H200)"
fi
CAP=$((10#$CAP))

need() { command -v "$1" >/dev/null 2>&1 || { echo "build-cuda.sh: '$1' not found; $2" >&2; exit 3; }; }
need python3 "install Python 3 with the venv module"
need gcc "install gcc (the driver stub and candle's kernels need a host compiler)"
need cargo "install Rust (rustup)"
if [ "$DIST" = 1 ]; then
  need strip "install binutils"; need xz "install xz-utils"; need tar "install tar"
fi

# 1. Toolchain. Pinned to 13.0: nvcc 13.x writes PTX ISA 9.x, and a CUDA 13.0 driver (R580) refuses
#    modules newer than ISA 9.0; cudarc 0.19.10 (Cargo.lock) also reads this version to pick its API.
if [ ! -x "$VENV/bin/pip" ]; then
  mkdir -p "$(dirname "$VENV")"
  python3 -m venv "$VENV"
fi
"$VENV/bin/pip" install -q \
  nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88 \
  nvidia-cuda-runtime==13.0.96 nvidia-cuda-cccl==13.0.85 \
  nvidia-cublas==13.0.2.14 nvidia-curand==10.4.0.35 nvidia-cuda-nvrtc==13.0.88
CUDA_ROOT=$("$VENV/bin/python" -c 'import nvidia, os; print(os.path.join(list(nvidia.__path__)[0], "cu13"))')
[ -x "$CUDA_ROOT/bin/nvcc" ] || { echo "build-cuda.sh: no nvcc in $CUDA_ROOT/bin after the install" >&2; exit 3; }

# 2. Link-time stubs, made before the first build (cudarc's build script adds only the library
#    directories that exist). The wheels ship lib*.so.N only, the linker wants lib*.so.
(cd "$ROOT" && cargo fetch --locked -q)
S="$CUDA_ROOT/lib/stubs"
mkdir -p "$S"
for f in libcublas.so.13 libcublasLt.so.13 libcurand.so.10 libnvrtc.so.13 libcudart.so.13; do
  [ -e "$CUDA_ROOT/lib/$f" ] || { echo "build-cuda.sh: $CUDA_ROOT/lib/$f missing" >&2; exit 3; }
  ln -sf "../$f" "$S/${f%%.so.*}.so"
done
# libcuda.so.1 belongs to the driver: a link-only stand-in with the same SONAME whose every entry
# point returns CUDA_ERROR_STUB_LIBRARY (34). It must never be on LD_LIBRARY_PATH on a GPU machine.
if [ ! -e "$S/libcuda.so" ]; then
  SYS=$(ls "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/cudarc-0.19.*/src/driver/sys/mod.rs 2>/dev/null || true)
  {
    gcc -E -P -I"$CUDA_ROOT/include" "$CUDA_ROOT/include/cuda.h" |
      grep -oE '\bCUresult +(CUDAAPI +)?cu[A-Z][A-Za-z0-9_]* *\('
    if [ -n "$SYS" ]; then grep -ohE '^ +fn cu[A-Z][A-Za-z0-9_]*\(' $SYS; fi
  } | grep -oE 'cu[A-Z][A-Za-z0-9_]*' | sort -u |
    awk '{print "int " $1 "(void) { return 34; }"}' >"$S/libcuda_stub.c"
  gcc -shared -fPIC -O2 -Wl,-soname,libcuda.so.1 -o "$S/libcuda.so" "$S/libcuda_stub.c"
fi
echo "CUDA_ROOT=$CUDA_ROOT"
[ "$SETUP_ONLY" = 1 ] && exit 0

# 3. Build. cudarc runs `nvcc --version` from PATH only; candle-kernels (cudaforge) reads
#    CUDA_COMPUTE_CAP instead of asking nvidia-smi.
export CUDA_ROOT
export PATH="$CUDA_ROOT/bin:$PATH"
export CUDA_COMPUTE_CAP=$CAP
export CUDAFORGE_THREADS=${CUDAFORGE_THREADS:-$(nproc)}
cd "$ROOT"
start=$SECONDS
cargo build --release --locked -p clipsculpt-cli -p clipsculpt-lab \
  --features clipsculpt-cli/cuda,clipsculpt-lab/cuda --target-dir "$TARGET_DIR"
echo "built $TARGET_DIR/release/clipsculpt and clipsculpt-lab for sm_$CAP in $((SECONDS - start)) s"
[ "$DIST" = 1 ] || exit 0

# 4. Shippable archive. xz with a large dictionary: the binaries share candle's kernels, so the
#    copies compress against each other. libcurand does not shrink with strip.
BENCHES="guide render clip checkpoint prior_guidance kernel_load stages"
json=$(mktemp)
cargo bench --no-run --locked -p clipsculpt -p clipsculpt-lab \
  --features clipsculpt/cuda,clipsculpt-lab/cuda --target-dir "$TARGET_DIR" \
  $(for b in $BENCHES; do printf -- '--bench %s ' "$b"; done) --message-format=json >"$json"
stage=$(mktemp -d)
name="clipsculpt-cuda-sm$CAP"
mkdir -p "$stage/$name/bin" "$stage/$name/lib" "$stage/$name/scripts"
strip -o "$stage/$name/bin/clipsculpt" "$TARGET_DIR/release/clipsculpt"
strip -o "$stage/$name/bin/clipsculpt-lab" "$TARGET_DIR/release/clipsculpt-lab"
python3 - "$json" "$stage/$name/bin" $BENCHES <<'PY'
import json, shutil, subprocess, sys
out, want = sys.argv[2], set(sys.argv[3:])
found = {}
for line in open(sys.argv[1]):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    t = m.get("target") or {}
    if m.get("reason") == "compiler-artifact" and m.get("executable") and "bench" in t.get("kind", []):
        found[t["name"]] = m["executable"]
missing = want - set(found)
if missing:
    sys.exit(f"build-cuda.sh: cargo built no bench binary for {sorted(missing)}")
for name in sorted(want):
    subprocess.run(["strip", "-o", f"{out}/bench-{name}", found[name]], check=True)
PY
rm -f "$json"
[ "$CURAND" = 0 ] || cp "$CUDA_ROOT/lib/libcurand.so.10" "$stage/$name/lib/"
# The embedded default is compiled into the binaries (clipsculpt's models::embedded): no assets to ship.
cp "$ROOT/scripts/gpu-check.sh" "$stage/$name/scripts/"
cp -r "$ROOT/scripts/gpu-check" "$stage/$name/scripts/"
# The PyTorch twins of gpu-check.sh's compare-pytorch step.
mkdir -p "$stage/$name/scripts/reference"
REF="$ROOT/crates/clipsculpt/benches/reference"
cp "$REF"/{gpu-compare.sh,gpu_compare.py,twin.py,stages.py,pipeline.py,guided.py,guide_cpu_v1.py,README.md} \
  "$stage/$name/scripts/reference/"
git -C "$ROOT" rev-parse HEAD >"$stage/$name/COMMIT" 2>/dev/null || echo unknown >"$stage/$name/COMMIT"
echo "sm_$CAP" >"$stage/$name/COMPUTE_CAP"
mkdir -p "$ROOT/dist"
out="$ROOT/dist/$name.tar.xz"
tar -C "$stage" -cf - "$name" | xz -9e --lzma2=dict=256MiB -T1 -c >"$out.tmp"
mv "$out.tmp" "$out"
rm -rf "$stage"
echo "wrote $out ($(du -h "$out" | cut -f1)); on the GPU machine: tar -xJf $name.tar.xz && $name/scripts/gpu-check.sh"
