# netns_lib.sh — fake multi-node clusters on one machine, for tests and
# benchmarks (sourced by tests/net/netns.sh and perf/net/net_perf.sh).
#
# netns_create N [--ipv6]   makes N "node" namespaces <prefix>n0..n<N-1>, each
#                           with lo and one interface "plnet" (10.77.0.<i+1>/24,
#                           and fd77::<i+1>/64 with --ipv6), all joined by a
#                           bridge in a switch namespace <prefix>sw, so the
#                           host's own network is never touched.
# netns_loss PCT            drops PCT% of every node's outgoing TCP packets (nft).
# netns_rank_env I          the environment of a rank on node I: NCCL_HOSTID
#                           (one host per namespace), NCCL_SOCKET_IFNAME==plnet.
# netns_destroy             kills every process left in the namespaces and
#                           deletes them (idempotent; installed as an EXIT trap
#                           by netns_create, so it runs even on failure).
# netns_sweep_stale         deletes namespaces (and their processes) left by
#                           a run that was killed before its trap could run
#                           (SIGKILL, e.g. a ctest timeout): pl<pid>* whose
#                           <pid> no longer exists. netns_create calls it.
# Requires root and iproute2 (`ip netns`); nft for netns_loss.

NETNS_PREFIX="pl$$"
NETNS_NODES=0
NETNS_IPV6=0

netns_available() {
  [ "$(id -u)" = 0 ] || { echo "netns: not root" >&2; return 1; }
  command -v ip >/dev/null || { echo "netns: no ip(8)" >&2; return 1; }
  ip netns add "${NETNS_PREFIX}probe" 2>/dev/null || { echo "netns: ip netns add failed" >&2; return 1; }
  ip netns del "${NETNS_PREFIX}probe"
}

netns_node() { echo "${NETNS_PREFIX}n$1"; }
netns_addr() {  # address of node I (IPv6 with --ipv6)
  if [ "$NETNS_IPV6" = 1 ]; then echo "fd77::$(($1 + 1))"; else echo "10.77.0.$(($1 + 1))"; fi
}

netns_destroy() {
  local ns pid
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${NETNS_PREFIX}" || true); do
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
}

netns_sweep_stale() {
  local ns owner pid
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^pl[0-9]+(sw|n[0-9]+|probe)$' || true); do
    owner=${ns#pl}
    owner=${owner%%[a-z]*}
    [ "$owner" = "$$" ] && continue
    kill -0 "$owner" 2>/dev/null && continue
    echo "netns: removing $ns, left by a run (pid $owner) that no longer exists" >&2
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
}

netns_create() {
  netns_sweep_stale
  NETNS_NODES=$1
  [ "${2:-}" = "--ipv6" ] && NETNS_IPV6=1
  trap netns_destroy EXIT
  trap 'exit 130' INT TERM
  local sw="${NETNS_PREFIX}sw" i ns
  ip netns add "$sw"
  ip -n "$sw" link add br0 type bridge
  ip -n "$sw" link set br0 up
  for ((i = 0; i < NETNS_NODES; i++)); do
    ns=$(netns_node "$i")
    ip netns add "$ns"
    ip -n "$ns" link set lo up
    ip link add plnet netns "$ns" type veth peer name "n$i" netns "$sw"
    ip -n "$sw" link set "n$i" master br0 up
    ip -n "$ns" addr add "10.77.0.$((i + 1))/24" dev plnet
    if [ "$NETNS_IPV6" = 1 ]; then
      ip -n "$ns" addr add "fd77::$((i + 1))/64" dev plnet nodad
    fi
    ip -n "$ns" link set plnet up
  done
}

netns_loss() {
  local pct=$1 i
  for ((i = 0; i < NETNS_NODES; i++)); do
    ip netns exec "$(netns_node "$i")" nft -f - <<EOF
table inet plaitloss {
  chain out {
    type filter hook output priority 0; policy accept;
    meta l4proto tcp numgen random mod 100 < $pct drop
  }
}
EOF
  done
}

netns_rank_env() {
  local env="NCCL_HOSTID=plait-netns-node$1 NCCL_SOCKET_IFNAME==plnet"
  [ "$NETNS_IPV6" = 1 ] && env="$env NCCL_SOCKET_FAMILY=AF_INET6"
  echo "$env"
}

netns_comm_id() {  # rank 0's rendezvous address, on node 0
  if [ "$NETNS_IPV6" = 1 ]; then echo "[$(netns_addr 0)]:$1"; else echo "$(netns_addr 0):$1"; fi
}
