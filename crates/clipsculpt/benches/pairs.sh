#!/usr/bin/env bash
# Before/after pairs of one stage of the `stages` bench: two bench binaries (say one built before a change and
# one after; `cargo bench --bench stages --no-run` prints the path, copy it aside between builds), run
# alternately, one process each, N times; prints each pair's seconds and the ratio A/B pair by pair, with the
# median. Only the ratio of back-to-back runs is meaningful on a machine whose speed drifts.
# Usage: MODEL=/tmp/rm benches/pairs.sh N STAGE BENCH_A BENCH_B
set -euo pipefail
[ $# -eq 4 ] || { echo "usage: MODEL=dir $0 N STAGE BENCH_A BENCH_B" >&2; exit 2; }
n=$1 stage=$2 a=$3 b=$4
: "${MODEL:?set MODEL to a random-models --preset published folder}"
secs() { STAGE=$stage "$1" --bench 2>/dev/null | tail -1 | grep -o '"min_seconds":[0-9.]*' | cut -d: -f2; }
for _ in $(seq "$n"); do
  echo "$(secs "$a") $(secs "$b")"
done | python3 -c '
import statistics, sys
rows = [tuple(map(float, l.split())) for l in sys.stdin if l.strip()]
ratios = [a / b for a, b in rows]
print(" ".join(f"{a:.2f}/{b:.2f}" for a, b in rows))
print("ratios", " ".join(f"{r:.3f}" for r in ratios))
print(f"median {statistics.median(ratios):.3f}, range {min(ratios):.3f}-{max(ratios):.3f}, {sum(r < 1 for r in ratios)} of {len(ratios)} below 1")
'
