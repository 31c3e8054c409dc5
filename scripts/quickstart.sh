#!/usr/bin/env bash
# The main job: set up, build, and run an all-reduce benchmark across local
# ranks (nccl-tests' all_reduce_perf under plait-run). Usage:
#   scripts/quickstart.sh [NRANKS] [all_reduce_perf flags...]
# e.g. scripts/quickstart.sh 2 -b 8 -e 256M -f 2
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NRANKS="${1:-2}"
shift || true
FLAGS=("$@")
((${#FLAGS[@]})) || FLAGS=(-b 8 -e 256M -f 4 -n 20 -w 5)
"$ROOT/scripts/setup.sh"
TARGETS="plait plait-run all_reduce_perf" "$ROOT/scripts/build.sh"
exec "$ROOT/build/bin/plait-run" -n "$NRANKS" -- "$ROOT/build/bin/all_reduce_perf" "${FLAGS[@]}"
