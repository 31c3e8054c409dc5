#!/usr/bin/env bash
# perf/host/p2p_cma.sh [BIN] [ROUNDS] [CONFIGS] — point-to-point collectives
# (AlltoAll, Gather, Scatter, SendRecv) between local processes with the FIFO
# pipeline (two copies) against cross-memory attach (process_vm_readv: the
# receiver reads the sender's buffer in place, one copy) from a threshold up.
# CONFIGS: space-separated "label=P2P_CMA:P2P_CMA_MIN_BYTES" (default
# "fifo=0:0 cma16k=1:16384 cma64k=1:65536 cma256k=1:262144"). 2 and 4 ranks,
# 16 KiB - 16 MiB, ROUNDS (3) interleaved rounds; prints medians of the time
# per call (us) and each configuration's ratio to the first.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${1:-build-host/bin}
ROUNDS=${2:-3}
CONFIGS=${3:-"fifo=0:0 cma16k=1:16384 cma64k=1:65536 cma256k=1:262144"}
OUT=$(mktemp -d /tmp/plait-p2pcma.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
for ((r = 1; r <= ROUNDS; r++)); do
  for n in 2 4; do
    for tool in alltoall_perf gather_perf scatter_perf sendrecv_perf; do
      for cfg in $CONFIGS; do
        label=${cfg%%=*} spec=${cfg#*=}
        PLAIT_P2P_CMA=${spec%%:*} PLAIT_P2P_CMA_MIN_BYTES=${spec#*:} "$BIN/plait-run" -n $n -- "$BIN/$tool" \
          -b 16K -e 16M -f 4 -n 40 -w 5 -c 0 > "$OUT/$tool.$n.$label.$r" 2>&1 || true
      done
    done
  done
done
python3 "$(dirname "$0")/medians.py" "$OUT" "$ROUNDS" "$CONFIGS" "alltoall_perf gather_perf scatter_perf sendrecv_perf" \
  "perf/host/p2p_cma.sh"
