#!/usr/bin/env bash
# contention.sh — AllReduce latency of Plait and Open MPI beside CPU-bound
# competitors, interleaved (issue 13, item 3).
#
#   perf/host/contention.sh [BINDIR] [ROUNDS] [LOADS]
#
# BINDIR (default build/bin) holds plait-run, all_reduce_perf and
# mpi_coll_perf (cmake -DPLAIT_BUILD_PERF=ON). LOADS (default "0 1 2") are
# numbers of busy processes (each a shell `while :; do :; done`, started
# before and killed after each run, unbound: the scheduler places them).
# Each round runs, for each load, in this order:
#   plait        plait-run -n 2 (ranks bound one per core, the default)
#   plait-nobind plait-run -n 2 --bind-to none
#   ompi         mpirun -np 2 (Open MPI's default binding: one core per rank)
# 8 B - 64 KiB, -n 20000 -w 1000 (so that every size spans several scheduler
# slices: -n 2000 of an 8-byte call fits in one, and a run then reads the
# quiet figure or a slice-long stall spread over 2000 calls), out-of-place time. Prints every round's time
# (us) per size and the median, and the ratio of Plait's median to Open MPI's.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN=${1:-$ROOT/build/bin} ROUNDS=${2:-3} LOADS=${3:-"0 1 2"}
OUT=$(mktemp -d /tmp/plait-contention.XXXXXX)
SWEEP=(-b 8 -e 64K -f 8 -n 20000 -w 1000)
cmdline() {  # variant
  case $1 in
    plait) echo "$BIN/plait-run -n 2 -- $BIN/all_reduce_perf ${SWEEP[*]}" ;;
    plait-nobind) echo "$BIN/plait-run -n 2 --bind-to none -- $BIN/all_reduce_perf ${SWEEP[*]}" ;;
    ompi) echo "mpirun --allow-run-as-root -np 2 $BIN/mpi_coll_perf -c allreduce ${SWEEP[*]} -k 0" ;;
  esac
}
run() {  # tag load variant
  local tag=$1 load=$2 variant=$3 pids=()
  for ((i = 0; i < load; i++)); do
    bash -c 'while :; do :; done' &
    pids+=($!)
  done
  sleep 0.2  # let the load settle on the CPUs
  timeout 300 $(cmdline "$variant") > "$OUT/$tag" 2>&1 || echo "contention.sh: $tag failed (see $OUT/$tag)" >&2
  for p in "${pids[@]}"; do kill "$p"; done
  wait 2>/dev/null || true
}
VARIANTS=(plait plait-nobind ompi)
for ((r = 1; r <= ROUNDS; r++)); do
  for load in $LOADS; do
    for v in "${VARIANTS[@]}"; do run "$v.$load.$r" "$load" "$v"; done
  done
done
python3 - "$OUT" "$ROUNDS" "$LOADS" "${VARIANTS[@]}" <<'PY'
import statistics, sys
out, rounds, loads, variants = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(), sys.argv[4:]
def times(tag):
    t = {}
    try:
        for line in open(f"{out}/{tag}"):
            f = line.split()
            if len(f) > 6 and f[0].isdigit(): t[int(f[0])] = float(f[5])
    except OSError:
        pass
    return t
for load in loads:
    print(f"# {load} busy process(es): out-of-place time (us) per round | median")
    med = {}
    sizes = sorted(set().union(*(times(f"{v}.{load}.{r}") for v in variants for r in range(1, rounds + 1))))
    for v in variants:
        for s in sizes:
            vals = [times(f"{v}.{load}.{r}").get(s, float("nan")) for r in range(1, rounds + 1)]
            med[v, s] = statistics.median(vals)
            print(f"{v:>12} {s:>6}: " + " ".join(f"{x:8.2f}" for x in vals) + f" | {med[v, s]:8.2f}")
    for v in variants:
        if v != "ompi":
            print(f"{v:>12} / ompi: " + " ".join(f"{s}:{med[v, s] / med['ompi', s]:.2f}" for s in sizes))
PY
echo "raw outputs: $OUT"
