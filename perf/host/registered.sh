#!/usr/bin/env bash
# registered.sh — every collective on registered buffers (the direct path,
# -R 1) beside the same collective on unregistered ones (the FIFO paths,
# -R 0) and beside 2-thread memcpy, interleaved (issue 13, item 5).
#
#   perf/host/registered.sh [BINDIR] [ROUNDS] [RANKS]
#
# BINDIR (default build/bin) holds plait-run, the *_perf tools and
# memcpy_perf (cmake -DPLAIT_BUILD_PERF=ON). 64 KiB - 16 MiB, -n 20 -w 5.
# Prints the median out-of-place busbw (GB/s) per collective, size and mode,
# and memcpy's rate with RANKS threads (each copying the same number of bytes
# at once: the rate one rank's single copy can reach while the others copy).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN=${1:-$ROOT/build/bin} ROUNDS=${2:-3} NP=${3:-2}
OUT=$(mktemp -d /tmp/plait-registered.XXXXXX)
SWEEP=(-b 64K -e 16M -f 4 -n 20 -w 5)
COLLS=(all_reduce all_gather reduce_scatter broadcast reduce alltoall gather scatter)
for ((r = 1; r <= ROUNDS; r++)); do
  for c in "${COLLS[@]}"; do
    for mode in 0 1; do
      "$BIN/plait-run" -n "$NP" -- "$BIN/${c}_perf" "${SWEEP[@]}" -R "$mode" > "$OUT/$c.$mode.$r" 2>&1 ||
        echo "registered.sh: $c -R $mode failed (see $OUT/$c.$mode.$r)" >&2
    done
  done
  "$BIN/memcpy_perf" -t "$NP" "${SWEEP[@]}" > "$OUT/memcpy.$r" 2>&1
done
python3 - "$OUT" "$ROUNDS" "${COLLS[@]}" <<'PY'
import statistics, sys
out, rounds, colls = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def busbw(tag):
    t = {}
    try:
        for line in open(f"{out}/{tag}"):
            f = line.split()
            if len(f) > 8 and f[0].isdigit(): t[int(f[0])] = float(f[7])
    except OSError:
        pass
    return t
def med(tag, size):
    return statistics.median(busbw(f"{tag}.{r}").get(size, float("nan")) for r in range(1, rounds + 1))
sizes = sorted(busbw("memcpy.1"))
print("busbw GB/s, out of place, medians of", rounds, "| -R 0 (FIFO) / -R 1 (direct), ratio; memcpy per thread")
print("| collective | " + " | ".join(f"{s >> 10} KiB" for s in sizes) + " |")
print("|---|" + "---:|" * len(sizes))
for c in colls:
    cells = [f"{med(f'{c}.0', s):.1f} / {med(f'{c}.1', s):.1f} ({med(f'{c}.1', s) / med(f'{c}.0', s):.1f}x)"
             for s in sizes]
    print(f"| {c} | " + " | ".join(cells) + " |")
print("| memcpy | " + " | ".join(f"{med('memcpy', s):.1f}" for s in sizes) + " |")
PY
echo "raw outputs: $OUT"
