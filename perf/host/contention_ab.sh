#!/usr/bin/env bash
# contention_ab.sh — AllReduce latency of two builds of libplait, interleaved,
# on a quiet machine and beside CPU-bound competitors (issue 13, item 3).
#
#   perf/host/contention_ab.sh BINDIR LIBDIR_A LIBDIR_B [ROUNDS]
#
# BINDIR holds plait-run and all_reduce_perf; LIBDIR_A / LIBDIR_B each hold a
# libplait.so.0 (LD_LIBRARY_PATH overrides the programs' RUNPATH). Each round
# runs, for A then B: 2 ranks quiet, 2 ranks beside one busy loop (a shell
# `while :; do :; done`), 4 ranks quiet (oversubscribed on 2 cores); sizes
# 8 B - 64 KiB, -n 2000. Prints every round's out-of-place time (us) per size
# and the medians per setting and size.
set -euo pipefail
BIN=$1 A=$2 B=$3 ROUNDS=${4:-4}
OUT=$(mktemp -d /tmp/plait-contention.XXXXXX)
run() {  # tag libdir ranks busy
  local tag=$1 lib=$2 np=$3 busy=$4 pid=""
  [ "$busy" = 1 ] && { bash -c 'while :; do :; done' & pid=$!; }
  LD_LIBRARY_PATH=$lib "$BIN/plait-run" -n "$np" -- "$BIN/all_reduce_perf" -b 8 -e 64K -f 8 -n 2000 -w 50 \
    > "$OUT/$tag" 2>&1 || true
  [ -n "$pid" ] && kill "$pid"
  return 0
}
for ((r = 1; r <= ROUNDS; r++)); do
  for v in A B; do
    lib=$A; [ $v = B ] && lib=$B
    run "$v.quiet2.$r" "$lib" 2 0
    run "$v.busy2.$r" "$lib" 2 1
    run "$v.quiet4.$r" "$lib" 4 0
  done
done
python3 - "$OUT" "$ROUNDS" <<'PY'
import statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def times(tag):
    t = {}
    for line in open(f"{out}/{tag}"):
        f = line.split()
        if len(f) > 6 and f[0].isdigit(): t[int(f[0])] = float(f[5])
    return t
for setting in ("quiet2", "busy2", "quiet4"):
    print(f"# {setting}: out-of-place time (us), rounds then median")
    sizes = sorted(times(f"A.{setting}.1"))
    for v in ("A", "B"):
        for s in sizes:
            vals = [times(f"{v}.{setting}.{r}").get(s, float('nan')) for r in range(1, rounds + 1)]
            print(f"{v} {s:>6}: " + " ".join(f"{x:8.2f}" for x in vals) + f"  | median {statistics.median(vals):8.2f}")
PY
rm -rf "$OUT"
