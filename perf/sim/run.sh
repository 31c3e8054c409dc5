#!/usr/bin/env bash
# perf/sim/run.sh [BUILD_DIR] — plait-sim's figures: its predictions beside the
# published nccl-tests results, one training step on 64 x 8 H100 under several
# placements, the pictures the README shows, and how the simulator's own cost
# grows with the cluster (wall time of a 31-size AllReduce sweep, median of 3).
# Writes perf/results/sim/ and docs/img/sim_*.svg. Build first:
#   cmake --build build-host --target plait-sim
set -euo pipefail
cd "$(dirname "$0")/../.."
B=${1:-build-host}
S=$B/tools/sim/plait-sim
D=tests/topology/data
OUT=perf/results/sim
mkdir -p "$OUT" docs/img
[ -x "$S" ] || { echo "run.sh: $S not built (cmake --build $B --target plait-sim)" >&2; exit 2; }

row() {  # machine nodes size published [what [plait-sim flags]]
  local line
  line=$("$S" --topo-file "$D/$1" --nodes "$2" -b "$3" -e "$3" ${6:-} | grep -E '^ +[0-9]')
  echo "$line" | awk -v m="$1" -v n="$2" -v p="$4" -v w="${5:-busbw}" '{
    if (w == "busbw") printf "| %s x %s | %s B | %s GB/s | %.1f GB/s | %+.1f%% | %s %s |\n", n, m, $1, p, $8, 100*($8-p)/p, $15, $16;
    else printf "| %s x %s | %s B | %s us | %.1f us | %.2fx | %s %s |\n", n, m, $1, p, $6, $6/p, $15, $16 }'
}

{
  echo "# plait-sim against published nccl-tests AllReduce results"
  echo
  echo "Command: \`perf/sim/run.sh\` ($(date -u +%Y-%m-%d)). Predicted busbw (or time) beside the published figure."
  echo
  echo "| system | size | published | plait-sim | error | plan |"
  echo "|---|---|---|---|---|---|"
  row dgx_a100.xml 1 1073741824 231.5
  row dgx_a100.xml 1 1024 16.96 time
  row dgx_a100.xml 2 1073741824 183.8
  row dgx_a100.xml 2 4294967296 188.2
  row dgx_a100.xml 2 1024 35.85 time
  row a100_single.xml 2 1073741824 18.65
  row a100_single.xml 2 1024 21.27 time
  row hgx_h100.xml 1 8589934592 370 busbw "--algo ring"
  row hgx_h100.xml 1 8589934592 480
  row hgx_h100.xml 2 8589934592 396
  row hgx_h100.xml 248 536870912 350
  row hgx_b200.xml 1 8589934592 695 busbw "--algo ring"
  row hgx_b200.xml 1 8589934592 845
  row gb200_nvl72.xml 1 8589934592 834.6 busbw "--algo ring"
  row gb200_nvl72.xml 1 8589934592 834.6
  echo
  echo "8 x H100, NCCL_ALGO=NVLS on the first n GPUs (NVIDIA/nccl issue #1455, 2-4 GiB), 4 GiB:"
  echo
  echo "| GPUs | published busbw | plait-sim | error | plan |"
  echo "|---|---|---|---|---|"
  for n in 4 5 6 7 8; do
    pub=$(echo "4 367 5 420 6 440 7 460 8 480" | tr ' ' '\n' | paste - - | awk -v n=$n '$1 == n {print $2}')
    "$S" --topo-file "$D/hgx_h100.xml" --gpus "$n" --algo nvls -b 4G -e 4G | grep -E '^ +[0-9]' |
      awk -v n="$n" -v p="$pub" '{printf "| %s | %s GB/s | %.1f GB/s | %+.1f%% | %s %s |\n", n, p, $8, 100*($8-p)/p, $15, $16}'
  done
} > "$OUT/published.md"
cat "$OUT/published.md"

"$S" --topo-file "$D/dgx_a100.xml" --nodes 2 -b 1K -e 4G --svg docs/img/sim_a100_2x8_allreduce.svg \
  --reference 1G=183.8 --reference 4G=188.2 > /dev/null

{
  echo "# One training step on 64 x 8 H100 (hgx_h100.xml, 8 x 400 Gb/s rails, 32 hosts per leaf)"
  echo
  echo "d_model 8192, 64 blocks, seq 4096, 8 micro-batches, tp 8, pp 4, dp 16 (MoE: 16 experts, top-2, ep 8)."
  echo "PXN (point-to-point through the NVLink peer on the receiver's rail) is on unless --no-pxn."
  for args in "" "--tp-across-hosts" "--pp-rail-shift 1 --oversubscription 4" \
              "--pp-rail-shift 1 --oversubscription 4 --no-pxn" "--experts 16 --ep 8" \
              "--experts 16 --ep 8 --oversubscription 4 --no-pxn"; do
    echo
    echo "## \`${args:-default placement}\`"
    echo
    echo '```'
    "$S" --topo-file "$D/hgx_h100.xml" --nodes 64 --train --tp 8 --pp 4 $args
    echo '```'
  done
} > "$OUT/training_64x8.md"
"$S" --topo-file "$D/hgx_h100.xml" --nodes 64 --train --tp 8 --pp 4 --pp-rail-shift 1 --oversubscription 4 --no-pxn \
  --svg docs/img/sim_train_64x8_offrail.svg > /dev/null

{
  echo "# plait-sim's own cost: a 31-size AllReduce sweep (8 B .. 8 GiB), wall seconds, median of 3"
  echo
  echo "| hosts x 8 H100 | GPUs | seconds |"
  echo "|---|---|---|"
  for hosts in 16 128 512 1024; do
    times=()
    for _ in 1 2 3; do
      t0=$(date +%s.%N)
      "$S" --topo-file "$D/hgx_h100.xml" --nodes $hosts -b 8 -e 8G > /dev/null
      t1=$(date +%s.%N)
      times+=("$(echo "$t1 - $t0" | bc)")
    done
    med=$(printf "%s\n" "${times[@]}" | sort -n | sed -n 2p | xargs printf "%.3f")
    echo "| $hosts | $((hosts * 8)) | $med |"
  done
} > "$OUT/scaling.md"
cat "$OUT/scaling.md"
