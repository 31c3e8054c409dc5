#!/usr/bin/env bash
# perf/host/interleave.sh BIN ROUNDS CONFIGS TOOLS SWEEP NAME — runs every
# nccl-tests-format program of TOOLS at 2 and 4 ranks under each
# configuration of CONFIGS (space-separated "label=ENV[,ENV...]"; an
# LD_LIBRARY_PATH=DIR there runs another build's libplait.so.0), ROUNDS
# interleaved rounds (odd rounds in the order given, even rounds reversed,
# so no configuration always runs right after another), each with the
# program arguments SWEEP; prints medians.py's table under NAME. The
# benchmarks of perf/host call it with their own configurations.
# GATE_RTT_NS=N (default 0: off) keeps runs out of this VM's slow windows
# (perf/results/host/windows.md): before each run it waits until
# cacheline_rtt reads below N ns, and a run after which it reads N or more
# is run again (up to 3 times); the number of reruns is printed at the end.
# INTERLEAVE_IN_PLACE=1 tabulates the in-place times instead (perf/host/medians.py).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=$1 ROUNDS=$2 CONFIGS=$3 TOOLS=$4 SWEEP=$5 NAME=$6
GATE=${GATE_RTT_NS:-0}
OUT=$(mktemp -d /tmp/plait-interleave.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
quiet() {  # succeeds when the cache-line round trip is below the gate (or there is none)
  ((GATE > 0)) || return 0
  local rtt
  rtt=$("$BIN/cacheline_rtt" -n 20000 -r 3 2> /dev/null || true)
  if ! [[ $rtt =~ ^[0-9]+ ]]; then
    echo "interleave: cacheline_rtt gave no reading; runs are not gated" >&2
    return 0
  fi
  ((${rtt%.*} < GATE))
}
wait_quiet() {
  local waited=0
  until quiet; do
    sleep 2
    waited=$((waited + 2))
    if ((waited >= 600)); then
      echo "interleave: no quiet window in 600 s; running anyway" >&2
      return 0
    fi
  done
}
RERUNS=0
for ((r = 1; r <= ROUNDS; r++)); do
  for n in ${INTERLEAVE_RANKS:-2 4}; do
    for tool in $TOOLS; do
      order=$CONFIGS
      ((r % 2 == 0)) && order=$(tr ' ' '\n' <<< "$CONFIGS" | tac | tr '\n' ' ')
      for cfg in $order; do
        label=${cfg%%=*}
        IFS=, read -r -a envs <<< "${cfg#*=}"
        for try in 1 2 3 4; do
          wait_quiet
          # shellcheck disable=SC2086
          env "${envs[@]}" "$BIN/plait-run" -n $n -- "$BIN/$tool" $SWEEP > "$OUT/$tool.$n.$label.$r" 2>&1 || true
          if quiet || ((try == 4)); then break; fi
          RERUNS=$((RERUNS + 1))
        done
      done
    done
  done
done
python3 "$(dirname "$0")/medians.py" "$OUT" "$ROUNDS" "$CONFIGS" "$TOOLS" "$NAME"
((GATE > 0)) && echo "runs repeated after a slow window (cache-line round trip >= $GATE ns): $RERUNS"
exit 0
