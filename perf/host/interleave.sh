#!/usr/bin/env bash
# perf/host/interleave.sh BIN ROUNDS CONFIGS TOOLS SWEEP NAME — runs every
# nccl-tests-format program of TOOLS at 2 and 4 ranks under each
# configuration of CONFIGS (space-separated "label=ENV[,ENV...]"; an
# LD_LIBRARY_PATH=DIR there runs another build's libplait.so.0), ROUNDS
# interleaved rounds (odd rounds in the order given, even rounds reversed,
# so no configuration always runs right after another), each with the
# program arguments SWEEP; prints medians.py's table under NAME. The
# benchmarks of perf/host call it with their own configurations.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=$1 ROUNDS=$2 CONFIGS=$3 TOOLS=$4 SWEEP=$5 NAME=$6
OUT=$(mktemp -d /tmp/plait-interleave.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
for ((r = 1; r <= ROUNDS; r++)); do
  for n in ${INTERLEAVE_RANKS:-2 4}; do
    for tool in $TOOLS; do
      order=$CONFIGS
      ((r % 2 == 0)) && order=$(tr ' ' '\n' <<< "$CONFIGS" | tac | tr '\n' ' ')
      for cfg in $order; do
        label=${cfg%%=*}
        IFS=, read -r -a envs <<< "${cfg#*=}"
        # shellcheck disable=SC2086
        env "${envs[@]}" "$BIN/plait-run" -n $n -- "$BIN/$tool" $SWEEP > "$OUT/$tool.$n.$label.$r" 2>&1 || true
      done
    done
  done
done
python3 "$(dirname "$0")/medians.py" "$OUT" "$ROUNDS" "$CONFIGS" "$TOOLS" "$NAME"
