#!/usr/bin/env bash
# perf/host/latency.sh BIN [ROUNDS] [OTHER_BIN] [COLL] — small-message
# latency at 2 ranks: Plait's COLL_perf (default all_reduce) under plait-run
# (a core per rank) against Open MPI's (perf/mpi's mpi_coll_perf, under
# mpirun with its default core binding), and another Plait build's program
# when OTHER_BIN is given (an A/B across commits; "-" for none), ROUNDS
# interleaved rounds (default 6), 3000 calls per size after 200 warm-up
# calls. Prints each configuration's median time per call (us, out of place;
# in place where a program has only that) for 8 B to 4 KiB.
set -euo pipefail
BIN=$1 ROUNDS=${2:-6} OTHER=${3:-} COLL=${4:-all_reduce}
[ "$OTHER" = - ] && OTHER=
MPI_NAME=${COLL//_/}
[ "$COLL" = reduce_scatter ] && MPI_NAME=reduce_scatter
SWEEP=(-b 8 -e 4K -f 8 -n 3000 -w 200)
OUT=$(mktemp -d /tmp/plait-latency.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
plait() { "$1/plait-run" -n 2 -- "$1/${COLL}_perf" "${SWEEP[@]}" -c 0; }
mpi() {
  mpirun --oversubscribe --allow-run-as-root --bind-to core -np 2 "$BIN/mpi_coll_perf" -c "$MPI_NAME" "${SWEEP[@]}" \
    -k 0 2> /dev/null
}
for ((r = 1; r <= ROUNDS; r++)); do
  plait "$BIN" >> "$OUT/plait"
  mpi >> "$OUT/mpi"
  [ -n "$OTHER" ] && plait "$OTHER" >> "$OUT/other"
done
python3 - "$OUT" << 'PY'
import os, statistics, sys
out = sys.argv[1]
cols = [c for c in ("plait", "other", "mpi") if os.path.exists(os.path.join(out, c))]
times = {c: {} for c in cols}
for c in cols:
    for line in open(os.path.join(out, c)):
        f = line.split()
        if len(f) >= 10 and f[0].isdigit():
            # MPI_Bcast has no out-of-place form: its in-place column then
            t = f[5] if f[5] != "N/A" else f[9]
            times[c].setdefault(int(f[0]), []).append(float(t))
print("| size | " + " | ".join(cols) + " | plait/mpi |")
print("|---:|" + "---:|" * (len(cols) + 1))
for size in sorted(times["plait"]):
    med = {c: statistics.median(times[c][size]) for c in cols if size in times[c]}
    print(f"| {size} | " + " | ".join(f"{med[c]:.2f}" for c in cols) + f" | {med['plait'] / med['mpi']:.2f} |")
PY
