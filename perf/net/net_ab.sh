#!/usr/bin/env bash
# net_ab.sh — two configurations of Plait's 2-rank AllReduce across two
# network namespaces (one rank each, tests/net/netns_lib.sh), in interleaved
# rounds: the A/B companion of net_perf.sh, for settings and experiments.
#
#   A="VAR=v ..." B="VAR=v ..." [ROUNDS=4] [PIN_B=1] perf/net/net_ab.sh [BINDIR]
#
# A and B are environment assignments for every rank of that configuration
# (default A: none, B: none); PIN_B=1 runs B's rank i under taskset -c i.
# Sweep: all_reduce_perf -b 256K -e 64M -f 4 -n 20 -w 3, float sum, no check
# (SWEEP overrides the arguments, BENCH the program: alltoall_perf, ...). Prints per size the median busbw of each
# configuration over the rounds, B / A, and every round's figure.
# Needs root and iproute2.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BIN="${1:-$ROOT/build/bin}"
ROUNDS=${ROUNDS:-4}
read -r -a SWEEP_ARGS <<<"${SWEEP:--b 256K -e 64M -f 4 -n 20 -w 3 -c 0 -d float -o sum}"
# shellcheck source=../../tests/net/netns_lib.sh
source "$ROOT/tests/net/netns_lib.sh"
netns_available || { echo "net_ab.sh: needs root and ip netns"; exit 77; }
OUT=$(mktemp -d /tmp/plait-netab.XXXXXX)
netns_create 2
trap 'netns_destroy; rm -rf "$OUT"' EXIT

run_pair() {  # tag pin env-assignments (rank 0 in n0, rank 1 in n1)
  local tag=$1 pin=$2 settings=$3 port=$((20000 + RANDOM % 30000)) i pids=()
  for i in 0 1; do
    local prefix=()
    [ "$pin" = 1 ] && prefix=(taskset -c "$i")
    # shellcheck disable=SC2046,SC2086
    ip netns exec "$(netns_node $i)" env $(netns_rank_env $i) NCCL_COMM_ID="$(netns_comm_id $port)" \
      PLAIT_RANK=$i PLAIT_NRANKS=2 $settings "${prefix[@]}" "$BIN/${BENCH:-all_reduce_perf}" "${SWEEP_ARGS[@]}" \
      >"$OUT/$tag.$i" 2>&1 &
    pids+=($!)
  done
  for i in "${pids[@]}"; do wait "$i"; done
}

for ((r = 1; r <= ROUNDS; r++)); do
  if ((r % 2)); then
    run_pair "a$r" 0 "${A:-}"; run_pair "b$r" "${PIN_B:-0}" "${B:-}"
  else
    run_pair "b$r" "${PIN_B:-0}" "${B:-}"; run_pair "a$r" 0 "${A:-}"
  fi
done
python3 - "$OUT" "$ROUNDS" "${A:-}" "${B:-}" <<'PY'
import statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def table(prefix):
    rows = {}
    for r in range(1, rounds + 1):
        for line in open(f"{out}/{prefix}{r}.0", errors="replace"):
            f = line.split()
            if len(f) > 7 and f[0].isdigit():
                rows.setdefault(int(f[0]), []).append(float(f[7]))
    return rows
a, b = table("a"), table("b")
print(f"# A: {sys.argv[3] or '(defaults)'}; B: {sys.argv[4] or '(defaults)'}; busbw GB/s, medians of {rounds} rounds")
print("%12s %8s %8s %6s  rounds A | rounds B" % ("size (B)", "A", "B", "B/A"))
for s in sorted(a):
    ma, mb = statistics.median(a[s]), statistics.median(b.get(s, [float("nan")]))
    print("%12d %8.2f %8.2f %6.2f  %s | %s" % (s, ma, mb, mb / ma, " ".join(map(str, a[s])), " ".join(map(str, b.get(s, [])))))
PY
