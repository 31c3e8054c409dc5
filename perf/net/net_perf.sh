#!/usr/bin/env bash
# net_perf.sh — Plait's AllReduce across two network namespaces (one rank
# each, tests/net/netns_lib.sh), beside iperf3 and Gloo's ring all-reduce
# between the same namespaces, in the same run.
#
#   perf/net/net_perf.sh [BINDIR] [-- extra all_reduce_perf arguments]
#
# Prints iperf3 (one stream, one direction; and two iperf3 processes at once,
# one per direction: a 2-rank all-reduce moves its bytes both ways at once;
# iperf3 3.12's own --bidir drives both directions from one thread, so it
# reads lower than two processes), then the Plait and Gloo tables (float32
# sum) and a ratio table: Plait busbw / iperf3 one way, Plait busbw / iperf3
# per direction both ways at once, Plait / Gloo per size. Environment:
# NCCL_NET (Socket default, or UCX), PLAIT_* tunables,
# ROUNDS (default 3: interleaved Plait/Gloo rounds, medians reported),
# PEER=encrypted (compare with Plait itself under NCCL_ENCRYPTION_PSK, TLS
# 1.3 on the bootstrap and every socket stream, instead of Gloo).
# Needs root, iproute2, iperf3.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="${1:-$ROOT/build/bin}"
shift || true
[ "${1:-}" = "--" ] && shift
EXTRA=("$@")
ROUNDS=${ROUNDS:-3}
PEER=${PEER:-gloo}
# shellcheck source=../../tests/net/netns_lib.sh
source "$ROOT/tests/net/netns_lib.sh"
netns_available || { echo "net_perf.sh: needs root and ip netns"; exit 77; }
command -v iperf3 >/dev/null || { echo "net_perf.sh: iperf3 not installed"; exit 77; }
OUT=$(mktemp -d /tmp/plait-netperf.XXXXXX)
netns_create 2
trap 'netns_destroy; rm -rf "$OUT"' EXIT
N0=$(netns_node 0) N1=$(netns_node 1)

iperf_flow() {  # server-node client-node port json: one stream, 5 s
  ip netns exec "$(netns_node "$1")" iperf3 -s -1 -p "$3" >/dev/null 2>&1 &
  local server=$!
  sleep 0.5
  ip netns exec "$(netns_node "$2")" iperf3 -c "$(netns_addr "$1")" -p "$3" -t 5 -J >"$4"
  wait $server || true
}

gbits() { python3 -c 'import json,sys; print(sum(json.load(open(f))["end"]["sum_received"]["bits_per_second"] for f in sys.argv[1:]) / 1e9)' "$@"; }

iperf() {  # "one-way Gbit/s two-way-per-direction Gbit/s"
  iperf_flow 1 0 5201 "$OUT/one.json"
  iperf_flow 1 0 5201 "$OUT/fwd.json" & local fwd=$!
  iperf_flow 0 1 5202 "$OUT/rev.json" & local rev=$!
  wait $fwd $rev
  echo "$(gbits "$OUT/one.json") $(python3 -c "print($(gbits "$OUT/fwd.json" "$OUT/rev.json") / 2)")"
}

run_pair() {  # tag program args... (rank 0 in n0, rank 1 in n1)
  local tag=$1 port=$((20000 + RANDOM % 30000)) i pids=()
  shift
  for i in 0 1; do
    # shellcheck disable=SC2046
    ip netns exec "$(netns_node $i)" env $(netns_rank_env $i) NCCL_COMM_ID="$(netns_comm_id $port)" \
      PLAIT_RANK=$i PLAIT_NRANKS=2 GLOO_SOCKET_IFNAME=plnet "$@" >"$OUT/$tag.$i" 2>&1 &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i"; done
}

read -r ONE1 TWO1 <<<"$(iperf)"
printf '# iperf3 %s <-> %s: %.2f Gbit/s one way; %.2f Gbit/s per direction both ways at once (two processes)\n' \
  "$(netns_addr 0)" "$(netns_addr 1)" "$ONE1" "$TWO1"
STORE=$OUT/gloo-store
for ((r = 1; r <= ROUNDS; r++)); do
  run_pair "plait$r" "$BIN/all_reduce_perf" -b 64K -e 256M -f 4 -n 20 -w 3 -c 0 -d float -o sum "${EXTRA[@]}"
  if [ "$PEER" = encrypted ]; then
    run_pair "peer$r" env NCCL_ENCRYPTION_PSK=net-perf-key "$BIN/all_reduce_perf" -b 64K -e 256M -f 4 -n 20 -w 3 \
      -c 0 -d float -o sum "${EXTRA[@]}"
  else
    rm -rf "$STORE" && mkdir -p "$STORE"
    run_pair "peer$r" "$BIN/gloo_perf" -a allreduce_ring -s "$STORE" -b 64K -e 256M -f 4 -n 20 -w 3 -k 0
  fi
done
read -r ONE2 TWO2 <<<"$(iperf)"
printf '# iperf3 again after the runs: %.2f Gbit/s one way; %.2f per direction both ways\n' "$ONE2" "$TWO2"
echo "# Plait all_reduce_perf (rank 0, round 1):"
grep -v "^#" "$OUT/plait1.0" | grep -E "^ +[0-9]" || cat "$OUT/plait1.0"
echo "# $PEER (rank 0, round 1):"
grep -E "^ +[0-9]" "$OUT/peer1.0" || cat "$OUT/peer1.0"
python3 - "$OUT" "$ROUNDS" "$PEER" "$ONE1" "$ONE2" "$TWO1" "$TWO2" <<'EOF'
import statistics, sys, glob
out, rounds, peer = sys.argv[1], int(sys.argv[2]), sys.argv[3]
# iperf3 in GB/s: the mean of the runs before and after
one = (float(sys.argv[4]) + float(sys.argv[5])) / 2 / 8
two = (float(sys.argv[6]) + float(sys.argv[7])) / 2 / 8
def table(prefix, col):
    rows = {}
    for r in range(1, rounds + 1):
        for line in open(f"{out}/{prefix}{r}.0"):
            f = line.split()
            if len(f) > col and f[0].isdigit():
                try: rows.setdefault(int(f[0]), []).append(float(f[col]))
                except ValueError: pass
    return {k: statistics.median(v) for k, v in rows.items()}
# busbw columns: out-of-place busbw is field 7 in the nccl-tests table; Gloo
# (in-place algorithm) reports in the in-place busbw column, field 11.
plait, gloo = table("plait", 7), table("peer", 7 if peer == "encrypted" else 11)
name = "Plait+TLS" if peer == "encrypted" else "Gloo"
print("# medians of %d rounds, busbw GB/s" % rounds)
print("# iperf3: %.2f GB/s one way, %.2f GB/s per direction both ways at once" % (one, two))
print("%12s %10s %10s %8s %9s %9s" % ("size (B)", "Plait", name, "P/peer", "P/1-way", "P/2-way"))
for size in sorted(plait):
    g = gloo.get(size)
    print("%12d %10.3f %10s %8s %9.2f %9.2f" % (size, plait[size], "%.3f" % g if g else "-",
          "%.2f" % (plait[size] / g) if g else "-", plait[size] / one, plait[size] / two))
EOF
