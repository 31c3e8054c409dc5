#!/usr/bin/env bash
# perf/host/launch_modes.sh BIN [RUNS] [COLL] — how a 2-rank run's small-size
# latency depends on how its ranks were started: processes under plait-run
# (a core each) and under mpirun (its default core binding), threads of one
# process (-t 2) bound to a CPU each (the harness's default) and unbound
# (--bind_threads 0), and one thread driving both ranks (-g 2: ncclCommInitAll
# and a group per call, the second rank on the library's worker thread).
# RUNS short runs per mode (default 10), interleaved; each run times
# COLL_perf (default all_reduce) from 8 B to 4 KiB, 3000 calls per size
# after 200 warm-up calls, so a start-up transient shows in its first sizes.
# Prints, per mode and size, the median, the min-max and how many runs read
# over twice the median of all modes' medians at that size (slow runs).
set -euo pipefail
BIN=$1 RUNS=${2:-10} COLL=${3:-all_reduce}
SWEEP=(-b 8 -e 4K -f 8 -n 3000 -w 200 -c 0)
OUT=$(mktemp -d /tmp/plait-launch.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
run() {
  case $1 in
    plait-run) "$BIN/plait-run" -n 2 -- "$BIN/${COLL}_perf" "${SWEEP[@]}" ;;
    mpirun) mpirun --allow-run-as-root -np 2 "$BIN/${COLL}_perf" "${SWEEP[@]}" 2> /dev/null ;;
    threads) "$BIN/${COLL}_perf" -t 2 "${SWEEP[@]}" ;;
    threads-unbound) "$BIN/${COLL}_perf" -t 2 --bind_threads 0 "${SWEEP[@]}" ;;
    group) "$BIN/${COLL}_perf" -g 2 "${SWEEP[@]}" ;;
  esac
}
MODES="plait-run mpirun threads threads-unbound group"
command -v mpirun > /dev/null || MODES=${MODES/mpirun /}
for ((r = 1; r <= RUNS; r++)); do
  for m in $MODES; do run "$m" > "$OUT/$m.$r" 2>&1 || true; done
done
python3 - "$OUT" "$RUNS" $MODES << 'PY'
import os, statistics, sys
out, runs, modes = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
def times(path):
    rows = {}
    for line in open(path):
        f = line.split()
        if len(f) >= 6 and f[0].isdigit():
            rows[int(f[0])] = float(f[5])  # out-of-place time (us)
    return rows
data = {m: [times(os.path.join(out, f"{m}.{r}")) for r in range(1, runs + 1)] for m in modes}
sizes = sorted({s for m in modes for run in data[m] for s in run})
print(f"# {runs} runs per mode, interleaved; time per call in us (out of place): median [min-max] slow runs")
print("| size | " + " | ".join(modes) + " |")
print("|---:|" + "---:|" * len(modes))
for s in sizes:
    meds = {m: statistics.median([run[s] for run in data[m] if s in run]) for m in modes if any(s in run for run in data[m])}
    ref = statistics.median(meds.values())
    cells = []
    for m in modes:
        v = [run[s] for run in data[m] if s in run]
        if not v:
            cells.append("-")
            continue
        slow = sum(1 for x in v if x > 2 * ref)
        cells.append(f"{meds[m]:.2f} [{min(v):.2f}-{max(v):.2f}] {slow}/{len(v)}")
    print(f"| {s} | " + " | ".join(cells) + " |")
PY
