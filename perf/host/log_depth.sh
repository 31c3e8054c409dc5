#!/usr/bin/env bash
# perf/host/log_depth.sh [BIN] [ROUNDS] [CONFIGS] — the log-depth schedules
# (PLAIT_ALGO=tree: halving-doubling AllReduce, recursive-doubling
# AllGather, binomial Broadcast and Reduce, core/log_depth.cc) against the ring and one-shot alone
# (PLAIT_ALGO=^tree, priced as now: with ranks sharing cores the hand-off
# price changed with the trees) and the tuner's own choice, local
# processes, out of place. CONFIGS as interleave.sh's (default
# "ring=PLAIT_ALGO=^tree tree=PLAIT_ALGO=tree tuner=PLAIT_ALGO=");
# ranks INTERLEAVE_RANKS (default "4 8"), 4 KiB - 4 MiB, 200 calls per size,
# ROUNDS (3) interleaved rounds; prints the medians of the time per call (us)
# and each configuration's ratio to the first. TOOLS: the programs (default
# all_reduce_perf all_gather_perf broadcast_perf reduce_perf).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-build/bin}
ROUNDS=${2:-3}
CONFIGS=${3:-"ring=PLAIT_ALGO=^tree tree=PLAIT_ALGO=tree tuner=PLAIT_ALGO="}
TOOLS=${TOOLS:-"all_reduce_perf all_gather_perf broadcast_perf reduce_perf"}
export INTERLEAVE_RANKS=${INTERLEAVE_RANKS:-"4 8"}
exec "$(dirname "$0")/interleave.sh" "$BIN" "$ROUNDS" "$CONFIGS" "$TOOLS" "-b 4K -e 4M -f 4 -n 200 -w 20 -c 0" \
  "perf/host/log_depth.sh"
