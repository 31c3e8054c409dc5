#!/usr/bin/env bash
# perf/host/windows_rtt.sh [BIN] [SECONDS] — whether this VM's slow windows
# are the cache-line round trip between its two vCPUs. Every 15 s for SECONDS
# (2400): the round trip of one cache line between CPUs 0 and 1
# (cacheline_rtt) and Plait's 2-rank 1 MiB AllReduce through the FIFOs
# (PLAIT_DIRECT_CMA=0). When that AllReduce takes over 150 us, at once:
#   nt0        the same with non-temporal stores at every size
#   fifo2      the same again, and rtt2 the round trip again
#   a2a_fifo   4-rank 1 MiB AlltoAll through the FIFOs (PLAIT_ALLTOALL_CMA=0)
#   a2a_cma    the same by cross-memory attach (PLAIT_ALLTOALL_CMA=1, no measuring)
#   a2a_adapt  the same as the library chooses it (PLAIT_ALLTOALL_CMA=-1, measured)
#   cma        the 2-rank AllReduce by cross-memory attach
#   ompi, ompi_nosc, memcpy2   Open MPI's 1 MiB AllReduce with and without CMA,
#              and memcpy_perf -t 2 at 1 MiB (also after one sample in four)
# Times in us per call (out of place), round trips in ns; one line per sample.
# Needs nothing else running: a busy core lengthens the round trip too.
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build/bin}
SECS=${2:-2400}
# The time of the 1 MiB row of a *_perf table on stdin (column 6), or NA when
# the program failed or printed none: a run may time out inside a window.
us() { awk '$1==1048576{print $6; found=1} END{if (!found) print "NA"}'; }
ar() {
  { env PLAIT_DIRECT_CMA=0 "$@" "$B/plait-run" -n 2 "$B/all_reduce_perf" -b 1M -e 1M -n 50 -w 5 -c 0 || true; } | us
}
a2a() {
  { env "$@" "$B/plait-run" -n 4 "$B/alltoall_perf" --host_alloc malloc -b 1M -e 1M -n 50 -w 5 -c 0 || true; } | us
}
om() {
  { mpirun --oversubscribe --allow-run-as-root --bind-to core -np 2 "$@" "$B/mpi_coll_perf" -c allreduce -b 1M \
    -e 1M -n 50 -w 5 -k 0 2>/dev/null || true; } | us
}
rtt() { "$B/cacheline_rtt" || echo NA; }
end=$((SECONDS + SECS))
while ((SECONDS < end)); do
  rtt=$(rtt)
  t=$(ar)
  line="$(date +%T) rtt=$rtt fifo=$t"
  slow=0
  if [[ $t != NA ]] && awk -v t="$t" 'BEGIN{exit !(t > 150)}'; then slow=1; fi
  if ((slow)); then
    line+=" SLOW nt0=$(ar PLAIT_NT_STORE_THRESHOLD=0) fifo2=$(ar) rtt2=$(rtt)"
    line+=" a2a_fifo=$(a2a PLAIT_DIRECT_CMA_ADAPT=0 PLAIT_ALLTOALL_CMA=0)"
    line+=" a2a_cma=$(a2a PLAIT_DIRECT_CMA_ADAPT=0 PLAIT_ALLTOALL_CMA=1)"
    line+=" a2a_adapt=$(a2a PLAIT_ALLTOALL_CMA=-1)"
    line+=" cma=$({ PLAIT_DIRECT_CMA_REDUCE_MIN_BYTES=0 PLAIT_DIRECT_CMA_ADAPT=0 "$B/plait-run" -n 2 \
      "$B/all_reduce_perf" -b 1M -e 1M -n 50 -w 5 -c 0 || true; } | us)"
  fi
  if ((slow || RANDOM % 4 == 0)); then
    line+=" ompi=$(om) ompi_nosc=$(om --mca btl_vader_single_copy_mechanism none)"
    line+=" memcpy2=$({ "$B/memcpy_perf" -t 2 -b 1M -e 1M -n 50 -w 5 || true; } | us)"
  fi
  echo "$line"
  sleep 15
done
