#!/usr/bin/env bash
# torch.distributed on plait against gloo, and Plait's own *_perf programs
# in the same window (what the torch path costs over the C API).
#   perf/torch/run.sh [RANKS] [MAX_BYTES]      (defaults: 2, 256M)
#   BIN=build/bin PLAIT_BUILD_DIR=build perf/torch/run.sh 4
# Writes perf/results/torch/<RANKS>ranks.md (the torch table) and
# native_<RANKS>ranks.txt (the *_perf tables).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
RANKS="${1:-2}"
MAX="${2:-256M}"
BIN="${BIN:-${PLAIT_BUILD_DIR:-$ROOT/build}/bin}"
OUT="$ROOT/perf/results/torch"
PY=$("$ROOT/scripts/setup_torch.sh" | tail -1)
mkdir -p "$OUT"
native="$OUT/native_${RANKS}ranks.txt"
: > "$native"
for coll in all_reduce all_gather reduce_scatter alltoall; do
  "$BIN/plait-run" -n "$RANKS" "$BIN/${coll}_perf" -b 8 -e "$MAX" -f 4 -n 50 -w 5 >> "$native"
done
"$PY" "$ROOT/perf/torch/bench_torch.py" --ranks "$RANKS" --repeats 3 --max-bytes "$MAX" --out "$OUT"
