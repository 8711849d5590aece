#!/usr/bin/env bash
# The Python wheels that gpu-check.sh's compare-pytorch step needs beyond what our lent GPU machines' image holds
# (it has torch, transformers, safetensors and scikit-image, not diffusers), downloaded here into .whl/ (kept out of
# git through .git/info/exclude) so that they can travel with the working tree to a machine without network.
# There, before the step: python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl &&
#   export PYTHONPATH=/tmp/site
# Usage: scripts/gpu-wheels.sh   (about 6.5 MB; needs pip and a package index)
set -euo pipefail
cd "$(dirname "$0")/.."
exclude=$(git rev-parse --git-path info/exclude)
grep -qx '/.whl/' "$exclude" 2>/dev/null || echo '/.whl/' >>"$exclude"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 -d .whl diffusers==0.42.1 importlib_metadata==10.2.0
ls -l .whl
