#!/usr/bin/env bash
# ceiling.sh — Plait's 2-rank AllReduce across two network namespaces (one
# rank each, tests/net/netns_lib.sh) beside the plain TCP exchange of the
# same bytes (tcp_exchange: each side sends S and receives S at once over 2
# connections, nothing else), with the bytes written again before each
# exchange (as a collective's) and not (as iperf3's), and the least work a
# 2-rank AllReduce of floats does (tcp_exchange -R 1: the halves exchanged,
# one addition, the sums exchanged), in interleaved rounds.
#
#   perf/net/ceiling.sh [BINDIR] [ROUNDS]
#
# Prints the medians (busbw GB/s; a 2-rank AllReduce's busbw is S / time, as
# the exchange's) and Plait / exchange per size. Needs root and iproute2.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="${1:-$ROOT/build/bin}"
ROUNDS="${2:-3}"
SWEEP=(-b 256K -e 64M -f 4 -n 20 -w 3)
# shellcheck source=../../tests/net/netns_lib.sh
source "$ROOT/tests/net/netns_lib.sh"
netns_available || { echo "ceiling.sh: needs root and ip netns"; exit 77; }
[ -x "$BIN/tcp_exchange" ] || { echo "ceiling.sh: no $BIN/tcp_exchange (build the perf tools)"; exit 77; }
OUT=$(mktemp -d /tmp/plait-ceiling.XXXXXX)
netns_create 2
trap 'netns_destroy; rm -rf "$OUT"' EXIT

exchange() {  # tag fresh(0|1) reduce(0|1)
  local port=$((20000 + RANDOM % 30000)) i pids=()
  for i in 0 1; do
    ip netns exec "$(netns_node $i)" "$BIN/tcp_exchange" -r $i -a "$(netns_addr 0)" -p $port -k 2 -F "$2" -R "$3" \
      "${SWEEP[@]}" >"$OUT/$1.$i" 2>&1 &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i"; done
}

plait() {  # tag
  local port=$((20000 + RANDOM % 30000)) i pids=()
  for i in 0 1; do
    # shellcheck disable=SC2046
    ip netns exec "$(netns_node $i)" env $(netns_rank_env $i) NCCL_COMM_ID="$(netns_comm_id $port)" \
      PLAIT_RANK=$i PLAIT_NRANKS=2 "$BIN/all_reduce_perf" "${SWEEP[@]}" -c 0 -d float -o sum >"$OUT/$1.$i" 2>&1 &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i"; done
}

for ((r = 1; r <= ROUNDS; r++)); do
  exchange "fresh$r" 1 0
  plait "plait$r"
  exchange "same$r" 0 0
  exchange "reduce$r" 1 1
done

python3 - "$OUT" "$ROUNDS" <<'PY'
import statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def table(tag, col):  # size -> busbw, rank 0's file
    rows = {}
    for line in open(f"{out}/{tag}.0"):
        f = line.split()
        if f and f[0].isdigit():
            rows[int(f[0])] = float(f[col])
    return rows
series = {"fresh": [], "same": [], "reduce": [], "plait": []}
for r in range(1, rounds + 1):
    series["fresh"].append(table(f"fresh{r}", 2))
    series["same"].append(table(f"same{r}", 2))
    series["reduce"].append(table(f"reduce{r}", 2))
    series["plait"].append(table(f"plait{r}", 7))  # out-of-place busbw
med = {k: {s: statistics.median(t[s] for t in v) for s in v[0]} for k, v in series.items()}
print(f"# medians of {rounds} interleaved rounds, busbw GB/s")
print("| size | exchange, fresh data | exchange, same buffer | least AllReduce | Plait AllReduce | Plait / fresh "
      "| Plait / least AllReduce |")
print("|---:|---:|---:|---:|---:|---:|---:|")
for s in sorted(med["plait"]):
    f, m, a, p = med["fresh"][s], med["same"][s], med["reduce"][s], med["plait"][s]
    print(f"| {s} | {f:.2f} | {m:.2f} | {a:.2f} | {p:.2f} | {p / f:.2f} | {p / a:.2f} |")
PY
