#!/usr/bin/env bash
# torch.distributed on plait against gloo, and Plait's own *_perf programs
# interleaved with them (what the torch path costs over the C API, in the
# same window).
#   perf/torch/run.sh [RANKS] [MAX_BYTES] [REPEATS]   (defaults: 2, 256M, 3)
#   BIN=build/bin PLAIT_BUILD_DIR=build perf/torch/run.sh 4
#   TORCH_FR_BUFFER_SIZE=0 perf/torch/run.sh          (torch's flight recorder off)
# Writes perf/results/torch/<RANKS>ranks.md.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
RANKS="${1:-2}"
MAX="${2:-256M}"
REPEATS="${3:-3}"
BIN="${BIN:-${PLAIT_BUILD_DIR:-$ROOT/build}/bin}"
OUT="$ROOT/perf/results/torch"
PY=$("$ROOT/scripts/setup_torch.sh" | tail -1)
mkdir -p "$OUT"
"$PY" "$ROOT/perf/torch/bench_torch.py" --ranks "$RANKS" --repeats "$REPEATS" --max-bytes "$MAX" --native "$BIN" \
  --out "$OUT"
# The DRAM reference for the largest sizes: RANKS threads each copying a
# buffer of the size at once (busbw = each thread's copy rate).
{
  echo
  echo "memcpy_perf -t $RANKS (each of $RANKS threads copying its own buffer at once, after the runs above):"
  echo
  echo '```'
  "$BIN/memcpy_perf" -t "$RANKS" -b 2M -e "$MAX" -f 4 -n 20 -w 3 | grep -v '^#  *$'
  echo '```'
} >> "$OUT/${RANKS}ranks.md"
