#!/usr/bin/env bash
# perf/host/direct_cma.sh [BIN] [ROUNDS] [CONFIGS] — the data movers
# (AllGather, Broadcast, Gather, Scatter, AlltoAll) between local processes on
# unregistered buffers, with and without the direct path's cross-memory
# attach (core/direct.h): without it AllGather and Broadcast go round the
# ring through the FIFOs (two copies) and Gather, Scatter and AlltoAll by
# point-to-point (one copy by rendezvous from PLAIT_P2P_CMA_MIN_BYTES); with
# it every rank copies straight out of (or into) its peers' buffers after one
# agreement round. CONFIGS: space-separated "label=ENV[,ENV...]" (default
# "ring=PLAIT_DIRECT_CMA=0 cma=PLAIT_DIRECT_CMA=1
# cma64k=PLAIT_DIRECT_CMA=1,PLAIT_DIRECT_UNSYNCED_MIN_BYTES=65536"). 2 and 4
# ranks, 4 KiB - 64 MiB, ROUNDS (3) interleaved rounds; prints the medians of
# the time per call (us, out of place) and each configuration's ratio to the
# first. TOOLS: the programs (default all five).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-build-host/bin}
ROUNDS=${2:-3}
CONFIGS=${3:-"ring=PLAIT_DIRECT_CMA=0 cma=PLAIT_DIRECT_CMA=1 cma64k=PLAIT_DIRECT_CMA=1,PLAIT_DIRECT_UNSYNCED_MIN_BYTES=65536"}
TOOLS=${TOOLS:-"all_gather_perf broadcast_perf gather_perf scatter_perf alltoall_perf"}
OUT=$(mktemp -d /tmp/plait-directcma.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
for ((r = 1; r <= ROUNDS; r++)); do
  for n in 2 4; do
    for tool in $TOOLS; do
      # Odd rounds in the order given, even rounds reversed: a configuration
      # is not always the one that runs right after another program.
      order=$CONFIGS
      ((r % 2 == 0)) && order=$(tr ' ' '\n' <<< "$CONFIGS" | tac | tr '\n' ' ')
      for cfg in $order; do
        label=${cfg%%=*}
        IFS=, read -r -a envs <<< "${cfg#*=}"
        env "${envs[@]}" "$BIN/plait-run" -n $n -- "$BIN/$tool" -b 4K -e 64M -f 4 -n 20 -w 5 -c 0 \
          > "$OUT/$tool.$n.$label.$r" 2>&1 || true
      done
    done
  done
done
python3 "$(dirname "$0")/medians.py" "$OUT" "$ROUNDS" "$CONFIGS" "$TOOLS" "perf/host/direct_cma.sh"
