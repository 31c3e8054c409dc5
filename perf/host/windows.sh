#!/usr/bin/env bash
# perf/host/windows.sh [BIN] [SECONDS] — this VM's slow windows: stretches of
# seconds in which copies between the two cores through shared memory run at a
# tenth of their usual rate. Runs Plait's 2-rank Reduce at 1 MiB (200 calls)
# over and over for SECONDS (240); after each run slower than 10 GB/s busbw it
# runs, twice, within the same second or two: Plait again, Open MPI's Reduce
# with its single copy by CMA (default) and without it (shared-memory copy in
# and out, as Plait's FIFOs), memcpy_perf (2 threads, each its own buffer),
# both libraries' 8-byte AllReduce latency, and the round trip of one cache
# line between CPUs 0 and 1 (cacheline_rtt). Prints one line per such round.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-build-host/bin}
SECS=${2:-240}
bw() { "$@" 2>&1 | awk '/^ +[0-9]/{print $8}'; }
us() { "$@" 2>&1 | awk '/^ +[0-9]/{print $6}'; }
mpi=(mpirun --allow-run-as-root --bind-to core -np 2)
plait() { bw "$BIN/plait-run" -n 2 -- "$BIN/reduce_perf" -b 1M -e 1M -n 200 -w 20 -c 0; }
end=$((SECONDS + SECS))
while ((SECONDS < end)); do
  first=$(plait)
  awk "BEGIN{exit !($first < 10)}" || continue
  for _ in 1 2; do
    p=$(plait)
    m=$(bw "${mpi[@]}" "$BIN/mpi_coll_perf" -c reduce -b 1M -e 1M -n 200 -w 20 -k 0)
    n=$(bw mpirun --allow-run-as-root --bind-to core --mca btl_vader_single_copy_mechanism none -np 2 \
      "$BIN/mpi_coll_perf" -c reduce -b 1M -e 1M -n 200 -w 20 -k 0)
    c=$("$BIN/memcpy_perf" -t 2 -b 1M -e 1M -n 200 -w 20 2>&1 | awk '/Avg bus/{print $NF}')
    ml=$(us "${mpi[@]}" "$BIN/mpi_coll_perf" -c allreduce -b 8 -e 8 -n 2000 -w 100 -k 0)
    pl=$(us "$BIN/plait-run" -n 2 -- "$BIN/all_reduce_perf" -b 8 -e 8 -n 2000 -w 100 -c 0)
    rtt=$("$BIN/cacheline_rtt")
    echo "$(date +%T) first $first | GB/s: plait $p  openmpi $m  openmpi-nocma $n  memcpy $c | 8 B: openmpi ${ml} us  plait ${pl} us | line round trip ${rtt} ns"
  done
done
