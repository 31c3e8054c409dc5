#!/usr/bin/env bash
# netns.sh — multi-node tests on one machine (see netns_lib.sh for the
# cluster it builds). Ranks r = node * P + local run in namespace <node>;
# inside a node they use shared memory, between nodes the network transport.
#
#   netns.sh --nodes N --ranks-per-node P [--ipv6] [--loss PCT] [--net NAME]
#            [--budget SECONDS]
#            (--collectives BINDIR | --topology BINDIR | --program PATH [--args "A B"] [--kill-node K] [--expect REGEX])
#
# --collectives BINDIR  runs every nccl-tests style *_perf in BINDIR with
#                       -c 1 (results checked on every rank) over a size sweep;
#                       passes when all exit 0 with "#wrong" 0.
# --program PATH        runs PATH as every rank; passes when all exit 0.
# --args "A B"          with --program: its arguments (split on spaces).
# --expect REGEX        with --program: also every rank's output must match
#                       REGEX (grep -E), e.g. the transport NCCL_DEBUG=INFO
#                       names for its peers.
# --kill-node K         with --program (tests/net/net_kill_rank): once every
#                       rank runs, kills node K's processes; passes when every
#                       other rank exits 0 (it saw ncclRemoteError) within
#                       PLAIT_TIMEOUT + 30 s and some rank's error names
#                       node K's address.
# --topology BINDIR     runs all_reduce_perf once with NCCL_DEBUG=INFO and 2
#                       channels and checks the log: every channel's ring
#                       crosses each node boundary once (N crossings, the
#                       minimum: a node's ranks are contiguous) and every
#                       rank names the transport per peer: SHM inside a node,
#                       NET/<net>/plnet to other nodes.
# --net NAME            sets NCCL_NET (Socket, UCX, ...).
# --budget SECONDS      the whole run's limit (default 240): every job's
#                       timeout is cut to what is left, so the script ends,
#                       and deletes its namespaces, before ctest's TIMEOUT
#                       (set it above the budget) would kill it uncleanly.
# Other environment (UCX_TLS, PLAIT_*) reaches every rank as is.
# Exit: 0 pass, 1 fail, 77 skipped (not root, no `ip netns`; with
# PLAIT_REQUIRE_NETNS=1, as CI sets, these fail instead of skipping).
set -uo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=netns_lib.sh
source "$HERE/netns_lib.sh"

NODES=2 PER=1 IPV6="" LOSS="" NET="" BINDIR="" PROGRAM="" KILL="" TOPOLOGY="" BUDGET=240 EXPECT="" ARGS=""
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) NODES=$2; shift 2 ;;
    --ranks-per-node) PER=$2; shift 2 ;;
    --ipv6) IPV6=--ipv6; shift ;;
    --loss) LOSS=$2; shift 2 ;;
    --net) NET=$2; shift 2 ;;
    --collectives) BINDIR=$2; shift 2 ;;
    --topology) BINDIR=$2; TOPOLOGY=1; shift 2 ;;
    --budget) BUDGET=$2; shift 2 ;;
    --program) PROGRAM=$2; shift 2 ;;
    --kill-node) KILL=$2; shift 2 ;;
    --expect) EXPECT=$2; shift 2 ;;
    --args) ARGS=$2; shift 2 ;;
    *) echo "netns.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
NRANKS=$((NODES * PER))
SKIP=77
[ "${PLAIT_REQUIRE_NETNS:-0}" = 1 ] && SKIP=1
netns_available || { echo "netns.sh: SKIP (needs root and ip netns)"; exit $SKIP; }
if [ -n "$LOSS" ] && ! command -v nft >/dev/null; then echo "netns.sh: SKIP (--loss needs nft)"; exit $SKIP; fi
WORK=$(mktemp -d /tmp/plait-netns.XXXXXX)
netns_create "$NODES" $IPV6
trap 'netns_destroy; [ -n "${KEEP_LOGS:-}" ] || rm -rf "$WORK"' EXIT
[ -n "$LOSS" ] && { netns_loss "$LOSS" || { echo "netns.sh: nft failed"; exit 1; }; }
export PLAIT_TIMEOUT=${PLAIT_TIMEOUT:-60}
[ -n "$NET" ] && export NCCL_NET=$NET
echo "netns.sh: $NODES node(s) x $PER rank(s)${IPV6:+, IPv6}${LOSS:+, ${LOSS}% TCP loss}${NET:+, NCCL_NET=$NET}${UCX_TLS:+, UCX_TLS=$UCX_TLS}"
END=$((SECONDS + BUDGET))

PIDS=()
PORT=$((20000 + RANDOM % 10000))
# Starts every rank of one job in the background; logs in $WORK/<tag>.<rank>.
# The job's time limit is cut to what is left of the budget (at least 5 s).
# Each job's rendezvous port is new, below the ephemeral range (32768-):
# a port the previous job's root or connections left in TIME_WAIT, or one
# handed out as an ephemeral port meanwhile, cannot be bound again.
start_job() {
  local tag=$1 limit=$2 port=$((PORT++)) i j r
  shift 2
  PIDS=()
  [ $((END - SECONDS)) -lt "$limit" ] && limit=$((END - SECONDS))
  [ "$limit" -lt 5 ] && limit=5
  for ((i = 0; i < NODES; i++)); do
    for ((j = 0; j < PER; j++)); do
      r=$((i * PER + j))
      # shellcheck disable=SC2046
      timeout -k 5 "$limit" ip netns exec "$(netns_node "$i")" env $(netns_rank_env "$i") \
        NCCL_COMM_ID="$(netns_comm_id "$port")" PLAIT_RANK=$r PLAIT_NRANKS=$NRANKS \
        PLAIT_LOCAL_RANK=$j PLAIT_LOCAL_NRANKS=$PER "$@" >"$WORK/$tag.$r" 2>&1 &
      PIDS+=($!)
    done
  done
}

# Waits for every rank of the job; 0 when all exited 0. Once one rank has
# failed, the others get 5 s to fail too (their own messages) and are then
# stopped: a job whose root never started must not wait out the budget.
wait_job() {
  local tag=$1 rc=0 r p killer="" failed=()
  local -A rankOf=()
  for r in "${!PIDS[@]}"; do rankOf[${PIDS[$r]}]=$r; done
  local left=("${PIDS[@]}") rest
  while [ ${#left[@]} -gt 0 ]; do
    rest=()
    for p in "${left[@]}"; do
      if kill -0 "$p" 2>/dev/null; then rest+=("$p"); continue; fi
      wait "$p" && continue
      rc=1
      failed+=("${rankOf[$p]}")
    done
    left=("${rest[@]}")
    if [ $rc != 0 ] && [ -z "$killer" ] && [ ${#left[@]} -gt 0 ]; then
      (sleep 5; kill "${left[@]}" 2>/dev/null) &
      killer=$!
    fi
    [ ${#left[@]} -gt 0 ] && sleep 0.1
  done
  [ -n "$killer" ] && kill "$killer" 2>/dev/null
  for r in "${failed[@]}"; do
    echo "--- $tag rank $r failed:"; tail -n 15 "$WORK/$tag.$r"
  done
  return $rc
}

run_collectives() {
  local failed=0 b name
  for name in all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv gather scatter; do
    [ $SECONDS -lt $END ] || { echo "FAIL the budget of $BUDGET s is spent before ${name}_perf"; return 1; }
    b="$BINDIR/${name}_perf"
    [ -x "$b" ] || { echo "netns.sh: missing $b"; failed=1; continue; }
    start_job "$name" 300 "$b" -b 4 -e 8M -f 8 -c 1 -n 2 -w 1
    if wait_job "$name" && grep -q "# Out of bounds values : 0 OK" "$WORK/$name.0"; then
      echo "ok   ${name}_perf: $(grep 'Avg bus bandwidth' "$WORK/$name.0")"
    else
      echo "FAIL ${name}_perf"; failed=1
    fi
  done
  # Every type and op once, at a size that is not a multiple of the ranks.
  start_job all_types 300 "$BINDIR/all_reduce_perf" -b 1000003 -e 1000003 -c 1 -n 1 -w 0 -d all -o all
  if wait_job all_types; then echo "ok   all_reduce_perf -d all -o all"; else echo "FAIL all types/ops"; failed=1; fi
  return $failed
}

run_topology() {
  start_job topology 120 env NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET NCCL_NCHANNELS=2 \
    "$BINDIR/all_reduce_perf" -b 1M -e 1M -n 1 -w 0 -c 1
  wait_job topology || return 1
  python3 "$HERE/check_topology.py" "$WORK" topology "$NODES" "$PER" "${NET:-Socket}"
}

run_kill() {
  local killed_addr survivors=0 named=0 r node rc=0 t0 deadline i
  export PLAIT_TIMEOUT=${PLAIT_KILL_TIMEOUT:-20}
  # shellcheck disable=SC2086
  start_job kill $((PLAIT_TIMEOUT + 60)) "$PROGRAM" $ARGS
  deadline=$((SECONDS + 60))
  for ((r = 0; r < NRANKS; r++)); do
    until grep -q running "$WORK/kill.$r" 2>/dev/null; do
      [ $SECONDS -gt $deadline ] && { echo "netns.sh: rank $r never started"; tail "$WORK/kill.$r"; return 1; }
      sleep 0.2
    done
  done
  sleep 2
  killed_addr=$(netns_addr "$KILL")
  t0=$SECONDS
  for i in $(ip netns pids "$(netns_node "$KILL")"); do kill -9 "$i"; done
  echo "netns.sh: killed node $KILL ($killed_addr)"
  for r in "${!PIDS[@]}"; do
    node=$((r / PER))
    if [ "$node" = "$KILL" ]; then wait "${PIDS[$r]}" 2>/dev/null; continue; fi
    survivors=$((survivors + 1))
    if wait "${PIDS[$r]}"; then
      echo "  $(grep net_kill_rank: "$WORK/kill.$r" | tail -n 1)"
      grep -q "$killed_addr" "$WORK/kill.$r" && named=$((named + 1))
    else
      rc=1; echo "--- rank $r did not end with ncclRemoteError:"; tail -n 15 "$WORK/kill.$r"
    fi
  done
  echo "netns.sh: $survivors survivor(s) returned in $((SECONDS - t0)) s; $named named $killed_addr"
  [ $named -gt 0 ] || rc=1
  return $rc
}

if [ -n "$TOPOLOGY" ]; then run_topology; status=$?
elif [ -n "$BINDIR" ]; then run_collectives; status=$?
elif [ -n "$KILL" ]; then run_kill; status=$?
else
  # shellcheck disable=SC2086
  start_job program 300 "$PROGRAM" $ARGS; wait_job program; status=$?
fi
if [ $status = 0 ] && [ -n "$EXPECT" ]; then
  for ((r = 0; r < NRANKS; r++)); do
    grep -Eq "$EXPECT" "$WORK/program.$r" && continue
    echo "--- rank $r's output does not match '$EXPECT':"; tail -n 15 "$WORK/program.$r"; status=1
  done
fi
[ $status = 0 ] && echo "netns.sh: PASS" || echo "netns.sh: FAIL"
exit $status
