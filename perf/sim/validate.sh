#!/usr/bin/env bash
# perf/sim/validate.sh [BUILD_DIR] [ROUNDS] — plait-sim's host-rank model
# beside what this machine measures: AllReduce at 2 and 4 local ranks
# (plait-run + all_reduce_perf) and at 2 network namespaces x 1 rank over
# the socket transport (tests/net/netns_lib.sh), medians of ROUNDS (3)
# interleaved runs. The model's inputs come from other programs, not from
# the runs it predicts: the DRAM copy rate from memcpy_perf (2 threads,
# 64 MiB), the cache size from lscpu, the link rate from iperf3 (one way),
# the cores from nproc. Writes perf/results/sim/validation.md.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build-host}
ROUNDS=${2:-3}
S=$B/tools/sim/plait-sim
BIN=$B/bin
OUT=$(mktemp -d /tmp/plait-simval.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
for p in "$S" "$BIN/all_reduce_perf" "$BIN/plait-run" "$BIN/memcpy_perf"; do
  [ -x "$p" ] || { echo "validate.sh: $p not built" >&2; exit 2; }
done
CORES=$(nproc)
MEM=$("$BIN/memcpy_perf" -t 2 -b 64M -e 64M -n 10 -w 2 | awk '/^ +[0-9]/ {print $7}')
L3=$(lscpu -B | awk -F: '/L3 cache/ {split($2, a, " "); print a[1]}')
L3=${L3:-33554432}
echo "# inputs: $CORES cores, DRAM copy ${MEM} GB/s (memcpy_perf -t 2, 64 MiB), L3 $L3 B"

measure() {  # tag nranks: all_reduce_perf under plait-run, rank 0's table
  "$BIN/plait-run" -n "$2" -- "$BIN/all_reduce_perf" -b 8 -e 16M -f 8 -n 40 -w 5 -c 0 > "$OUT/$1" 2>&1 || true
}
for ((r = 1; r <= ROUNDS; r++)); do
  measure "n2.$r" 2
  measure "n4.$r" 4
done
for n in 2 4; do
  "$S" --host-ranks $n --cores "$CORES" -b 8 -e 16M -f 8 --mem-gbps "$MEM" --cache-bytes "$L3" > "$OUT/sim$n"
done

NET_NOTE="skipped (needs root, ip netns and iperf3)"
# shellcheck source=../../tests/net/netns_lib.sh
source tests/net/netns_lib.sh
if netns_available && command -v iperf3 > /dev/null; then
  netns_create 2
  trap 'netns_destroy; rm -rf "$OUT"' EXIT
  ip netns exec "$(netns_node 1)" iperf3 -s -1 -p 5201 > /dev/null 2>&1 &
  sleep 0.5
  GBPS=$(ip netns exec "$(netns_node 0)" iperf3 -c "$(netns_addr 1)" -p 5201 -t 3 -J |
    python3 -c 'import json,sys; print("%.2f" % (json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"] / 1e9))')
  wait || true
  for ((r = 1; r <= ROUNDS; r++)); do
    port=$((20000 + RANDOM % 30000)) pids=()
    for i in 0 1; do
      # shellcheck disable=SC2046
      ip netns exec "$(netns_node $i)" env $(netns_rank_env $i) NCCL_COMM_ID="$(netns_comm_id $port)" \
        PLAIT_RANK=$i PLAIT_NRANKS=2 "$BIN/all_reduce_perf" -b 8 -e 16M -f 8 -n 20 -w 3 -c 0 > "$OUT/net.$r.$i" 2>&1 &
      pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || true; done
    cp "$OUT/net.$r.0" "$OUT/net.$r"
  done
  "$S" --host-ranks 1 --nodes 2 --cores "$CORES" --nic-gbps "$GBPS" -b 8 -e 16M -f 8 > "$OUT/simnet"
  NET_NOTE="iperf3 one way: $GBPS Gbit/s"
fi

python3 - "$OUT" "$ROUNDS" "$CORES" "$MEM" "$L3" "$NET_NOTE" > perf/results/sim/validation.md <<'PY'
import glob, os, statistics, sys
out, rounds, cores, mem, l3, net = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5], sys.argv[6]

def rows(path):
    got = {}
    if not os.path.exists(path):
        return got
    for line in open(path):
        f = line.split()
        if f and f[0].isdigit() and len(f) >= 8:
            try:
                got[int(f[0])] = (float(f[5]), float(f[7]), " ".join(f[f.index("#") + 1:f.index("lat")]) if "#" in f else "")
            except ValueError:
                pass
    return got

print("# plait-sim's host-rank model beside this machine\n")
print(f"Command: `perf/sim/validate.sh` (medians of {rounds} interleaved runs). Model inputs from other programs: "
      f"{cores} cores, DRAM copy {mem} GB/s (memcpy_perf, 2 threads, 64 MiB), cache {l3} B (lscpu L3); network: {net}.\n")
for tag, sim, title in (("n2", "sim2", "2 local ranks"), ("n4", "sim4", "4 local ranks"), ("net", "simnet", "2 namespaces x 1 rank, socket transport")):
    runs = [rows(p) for p in sorted(glob.glob(os.path.join(out, tag + ".[0-9]*"))) if os.path.basename(p).count(".") == 1]
    runs = [r for r in runs if r]
    predicted = rows(os.path.join(out, sim))
    if not runs or not predicted:
        print(f"## {title}\n\nnot run\n")
        continue
    print(f"## {title}\n")
    print("| size | measured time us | predicted time us | measured busbw GB/s | predicted busbw GB/s | predicted / measured busbw | plan |")
    print("|---|---|---|---|---|---|---|")
    for size in sorted(predicted):
        vals = [r[size] for r in runs if size in r]
        if not vals:
            continue
        t = statistics.median(v[0] for v in vals)
        b = statistics.median(v[1] for v in vals)
        pt, pb, plan = predicted[size]
        ratio = f"{pb / b:.2f}" if b > 0 else "-"
        print(f"| {size} | {t:.2f} | {pt:.2f} | {b:.2f} | {pb:.2f} | {ratio} | {plan} |")
    print()
PY
cat perf/results/sim/validation.md
