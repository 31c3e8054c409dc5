#!/usr/bin/env bash
# perf/host/path_choice.sh [BIN] [ROUNDS] [CONFIGS] — every collective
# between local processes on unregistered buffers, with the FIFOs /
# cross-memory-attach choice made by measurement (core/path_choice.h, the
# default) against the static thresholds alone (PLAIT_DIRECT_CMA_ADAPT=0).
# CONFIGS: space-separated "label=ENV[,ENV...]" (default "static=
# PLAIT_DIRECT_CMA_ADAPT=0 adapt=PLAIT_DIRECT_CMA_ADAPT=1"). 2 and 4 ranks
# (INTERLEAVE_RANKS), 64 KiB - 64 MiB (SWEEP), ROUNDS (5) interleaved rounds;
# prints the medians of the time per call (us, out of place) and each
# configuration's ratio to the first. TOOLS: the programs (default all eight).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-build/bin}
ROUNDS=${2:-5}
CONFIGS=${3:-"static=PLAIT_DIRECT_CMA_ADAPT=0 adapt=PLAIT_DIRECT_CMA_ADAPT=1"}
TOOLS=${TOOLS:-"all_reduce_perf reduce_perf reduce_scatter_perf all_gather_perf broadcast_perf gather_perf scatter_perf alltoall_perf"}
exec "$(dirname "$0")/interleave.sh" "$BIN" "$ROUNDS" "$CONFIGS" "$TOOLS" \
  "${SWEEP:--b 64K -e 64M -f 4 -n 50 -w 5 -c 0 --host_alloc malloc}" "perf/host/path_choice.sh"
