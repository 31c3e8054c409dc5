#!/usr/bin/env bash
# perf/host/chain_slices.sh [BIN] [ROUNDS] [CONFIGS] — Broadcast and Reduce
# (the chains: every link carries the whole buffer) between local processes
# through the ring FIFOs, with the tuner's slices against fixed ones
# (PLAIT_SLICE_BYTES). The tuner slices a chain's whole buffer, up to a FIFO
# step (128 KiB), except below 16 KiB with a core per rank, where it cuts
# one block per rank as the other ring collectives do. CONFIGS: space-separated
# "label=ENV[,ENV...]" (default "tuner=PLAIT_SLICE_BYTES=0
# s8k=PLAIT_SLICE_BYTES=8192 s32k=PLAIT_SLICE_BYTES=32768
# s128k=PLAIT_SLICE_BYTES=131072"; LD_LIBRARY_PATH=DIR in a configuration runs
# another build's library, e.g. one from before a tuner change). 2 and 4
# ranks, 4 KiB - 1 MiB, 300 calls per size, ROUNDS (5) interleaved rounds;
# prints the medians of the time per call (us, out of place) and each
# configuration's ratio to the first. TOOLS: the programs (default both).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-build-host/bin}
ROUNDS=${2:-5}
CONFIGS=${3:-"tuner=PLAIT_SLICE_BYTES=0 s8k=PLAIT_SLICE_BYTES=8192 s32k=PLAIT_SLICE_BYTES=32768 s128k=PLAIT_SLICE_BYTES=131072"}
TOOLS=${TOOLS:-"broadcast_perf reduce_perf"}
exec "$(dirname "$0")/interleave.sh" "$BIN" "$ROUNDS" "$CONFIGS" "$TOOLS" "-b 4K -e 1M -f 2 -n 300 -w 30 -c 0" \
  "perf/host/chain_slices.sh"
