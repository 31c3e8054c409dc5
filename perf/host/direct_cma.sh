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
exec "$(dirname "$0")/interleave.sh" "$BIN" "$ROUNDS" "$CONFIGS" "$TOOLS" "-b 4K -e 64M -f 4 -n 20 -w 5 -c 0" \
  "perf/host/direct_cma.sh"
