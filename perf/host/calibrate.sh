#!/usr/bin/env bash
# perf/host/calibrate.sh [BUILD_DIR] [ROUNDS] — the host cost calibration
# (PLAIT_HOST_COSTS, issue 13 item 2) on this machine:
#   1. plait-calibrate at 2 ranks, 3 runs (a run can land in a slow mode of
#      this VM as a whole): each cost is the median of the runs';
#   2. all_reduce_perf 8 B - 1 MiB at 2 and 4 ranks with the earlier
#      estimates (the built-in costs before 2026-11-27, as a file) and with the
#      measured file, interleaved, ROUNDS (5) rounds: what the tuner's choices
#      give;
#   3. plait-sim --host-ranks 2 with each set of costs beside the measured times
#      (how far the host model is from this machine before and after).
# The built-in costs (kHostCosts) are this script's result of 2026-11-27.
# Writes perf/results/host/calibration.md (and the costs file beside it).
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build-host}
ROUNDS=${2:-5}
BIN=$B/bin
S=$B/tools/sim/plait-sim
for p in "$BIN/plait-calibrate" "$BIN/all_reduce_perf" "$BIN/plait-run" "$S"; do
  [ -x "$p" ] || { echo "calibrate.sh: $p not built" >&2; exit 2; }
done
OUT=$(mktemp -d /tmp/plait-calibrate.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
mkdir -p perf/results/host
COSTS=perf/results/host/host_costs_2ranks.txt
for run in 1 2 3; do
  "$BIN/plait-run" -n 2 -- "$BIN/plait-calibrate" -o "$OUT/costs.$run" > "$OUT/calibrate.$run"
  grep "fitted:" "$OUT/calibrate.$run"
done
python3 - "$OUT" > "$COSTS" <<'PY'
import statistics, sys
runs = []
for run in (1, 2, 3):
    with open(f"{sys.argv[1]}/costs.{run}") as f:
        runs.append({k: float(v) for k, v in (l.split() for l in f if l.strip() and not l.startswith("#"))})
first = open(f"{sys.argv[1]}/costs.1").readline().strip("# \n")
print(f"# {first}; each cost the median of 3 runs (perf/host/calibrate.sh)")
print("# PLAIT_HOST_COSTS=<this file> makes the tuner plan with them (plait-sim --host-costs too)")
for key in runs[0]:
    print(key, repr(statistics.median(r[key] for r in runs)))
PY
ESTIMATES=$OUT/estimates.txt
printf 'call_us 0.05\nhop_us 0.25\nring_bytes_per_us 12000\none_shot_us 0.30\none_shot_bytes_per_us 8000\n' > "$ESTIMATES"
for ((r = 1; r <= ROUNDS; r++)); do
  for n in 2 4; do
    for tag in estimates calibrated; do
      file=$ESTIMATES
      [ $tag = calibrated ] && file=$COSTS
      PLAIT_HOST_COSTS=$file "$BIN/plait-run" -n $n -- "$BIN/all_reduce_perf" -b 8 -e 1M -f 2 -n 400 -w 40 -c 0 \
        > "$OUT/$tag$n.$r" 2>&1
    done
  done
done
"$S" --host-ranks 2 --cores "$(nproc)" -b 8 -e 1M -f 2 --host-costs "$ESTIMATES" > "$OUT/sim.estimates"
"$S" --host-ranks 2 --cores "$(nproc)" -b 8 -e 1M -f 2 --host-costs "$COSTS" > "$OUT/sim.calibrated"

python3 - "$OUT" "$ROUNDS" "$COSTS" > perf/results/host/calibration.md <<'PY'
import glob, os, statistics, sys
out, rounds, costs = sys.argv[1], int(sys.argv[2]), sys.argv[3]

def times(path):
    got = {}
    for line in open(path):
        f = line.split()
        if f and f[0].isdigit() and len(f) >= 8:
            try:
                got[int(f[0])] = (float(f[5]), " ".join(f[f.index("#") + 1:f.index("lat")]) if "#" in f else "")
            except ValueError:
                pass
    return got

def medians(tag):
    runs = [times(p) for p in sorted(glob.glob(os.path.join(out, tag + ".[0-9]*")))]
    return {s: statistics.median(r[s][0] for r in runs if s in r) for s in runs[0]}

print("# Host cost calibration on this machine (issue 13, item 2)\n")
print(f"Command: `perf/host/calibrate.sh` ({rounds} interleaved rounds, medians). `plait-calibrate` at 2 ranks wrote "
      f"[{os.path.basename(costs)}]({os.path.basename(costs)}) (the built-in costs, `kHostCosts`, come from this script's run of "
      "2026-11-27, rounded):\n")
print("```")
print("".join(l for l in open(costs)).strip())
print("```\n")
print("The earlier estimates were call 0.05 µs, hop 0.25 µs, ring 12000 B/µs per channel, one-shot 0.30 µs + 8000 "
      "B/µs. AllReduce, float, under `plait-run`, time per call in µs (out of place) with each set of costs (both "
      "given as `PLAIT_HOST_COSTS` files); the plan is what plait-sim says the tuner picks; model / measured is "
      "plait-sim's predicted time over the measured one for the same costs (2 ranks).\n")
sim_e, sim_c = times(os.path.join(out, "sim.estimates")), times(os.path.join(out, "sim.calibrated"))
for n in (2, 4):
    est, cal = medians(f"estimates{n}"), medians(f"calibrated{n}")
    print(f"## {n} ranks\n")
    head = "| size | earlier estimates | measured costs | measured / earlier |"
    rule = "|---:|---:|---:|---:|"
    if n == 2:
        head += " plan (earlier) | plan (measured) | model / measured, earlier | model / measured, measured costs |"
        rule += "---|---|---:|---:|"
    print(head)
    print(rule)
    for s in sorted(est):
        if s not in cal:
            continue
        e, c = est[s], cal[s]
        row = f"| {s} | {e:.2f} | {c:.2f} | {c / e:.2f} |"
        if n == 2:
            pe, pc = sim_e.get(s, (0, "")), sim_c.get(s, (0, ""))
            row += f" {pe[1]} | {pc[1]} | {pe[0] / e:.2f} | {pc[0] / c:.2f} |"
        print(row)
    print()
PY
cat perf/results/host/calibration.md
