#!/usr/bin/env bash
# perf/host/small_p2p.sh [BIN] [ROUNDS] [CONFIGS] — AlltoAll, Gather and
# Scatter with small blocks between local processes: through the line FIFOs
# (each block one message of 64-byte lines, data and flag in the same line)
# up to PLAIT_P2P_LINE_MAX_BYTES per block, else through the point-to-point
# FIFOs (a step per block: counter line, then size and payload). CONFIGS:
# space-separated "label=ENV[,ENV...]" (default "fifo=PLAIT_P2P_LINE_MAX_BYTES=0
# lines1k=PLAIT_P2P_LINE_MAX_BYTES=1024 lines3k=PLAIT_P2P_LINE_MAX_BYTES=3072";
# LD_LIBRARY_PATH=DIR in a configuration runs another build's library). 2
# and 4 ranks, 256 B - 16 KiB in all (per block: a half or a quarter of it),
# 200 calls per size, ROUNDS (3) interleaved rounds; prints the medians of
# the time per call (us, out of place) and each configuration's ratio to the
# first. TOOLS: the programs (default AlltoAll, Gather, Scatter).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-build-host/bin}
ROUNDS=${2:-3}
CONFIGS=${3:-"fifo=PLAIT_P2P_LINE_MAX_BYTES=0 lines1k=PLAIT_P2P_LINE_MAX_BYTES=1024 lines3k=PLAIT_P2P_LINE_MAX_BYTES=3072"}
TOOLS=${TOOLS:-"alltoall_perf gather_perf scatter_perf"}
exec "$(dirname "$0")/interleave.sh" "$BIN" "$ROUNDS" "$CONFIGS" "$TOOLS" "-b 256 -e 16K -f 2 -n 200 -w 20" \
  "perf/host/small_p2p.sh"
