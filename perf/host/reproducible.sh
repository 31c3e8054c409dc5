#!/usr/bin/env bash
# reproducible.sh — what the reproducible mode costs (issue 15, item 8):
# AllReduce and ReduceScatter of floats with PLAIT_REPRODUCIBLE=0 (the
# tuner's paths), 1 (rank-order fold: the ordered exchange beyond the
# one-shot sizes) and 2 (exact sums), interleaved per round.
#
#   perf/host/reproducible.sh [BINDIR] [ROUNDS] [RANKS]
#
# BINDIR (default build/bin) holds plait-run and the *_perf tools. 8 B -
# 64 MiB, -n 10 -w 3, -c 1 (each result checked). Prints the median
# out-of-place time (us) per collective, size and mode, and each mode's
# ratio to mode 0.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN=${1:-$ROOT/build/bin} ROUNDS=${2:-3} NP=${3:-2}
OUT=$(mktemp -d /tmp/plait-reproducible.XXXXXX)
SWEEP=(-b 8 -e 64M -f 8 -n 10 -w 3 -c 1 -d float)
COLLS=(all_reduce reduce_scatter)
for ((r = 1; r <= ROUNDS; r++)); do
  for c in "${COLLS[@]}"; do
    for mode in 0 1 2; do
      PLAIT_REPRODUCIBLE=$mode "$BIN/plait-run" -n "$NP" -- "$BIN/${c}_perf" "${SWEEP[@]}" > "$OUT/$c.$mode.$r" 2>&1 ||
        echo "reproducible.sh: $c mode $mode failed (see $OUT/$c.$mode.$r)" >&2
    done
  done
done
python3 - "$OUT" "$ROUNDS" "${COLLS[@]}" <<'PY'
import statistics, sys
out, rounds, colls = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def times(tag):
    t = {}
    try:
        for line in open(f"{out}/{tag}"):
            f = line.split()
            if len(f) > 8 and f[0].isdigit(): t[int(f[0])] = float(f[5])
    except OSError:
        pass
    return t
def med(tag, size):
    return statistics.median(times(f"{tag}.{r}").get(size, float("nan")) for r in range(1, rounds + 1))
for c in colls:
    sizes = sorted(times(f"{c}.0.1"))
    print(f"{c}: out-of-place time (us), medians of {rounds}; mode 1 and 2 as a ratio to mode 0")
    print("| bytes | mode 0 | mode 1 | mode 2 |")
    print("|---:|---:|---:|---:|")
    for s in sizes:
        m0, m1, m2 = (med(f"{c}.{m}", s) for m in (0, 1, 2))
        print(f"| {s} | {m0:.1f} | {m1:.1f} ({m1 / m0:.2f}x) | {m2:.1f} ({m2 / m0:.2f}x) |")
PY
echo "raw outputs: $OUT"
