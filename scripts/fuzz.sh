#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz, README.md there) into build-fuzz
# with clang, then runs each over its committed corpus for a bounded time.
#   scripts/fuzz.sh                     every target, PLAIT_FUZZ_SECONDS each
#                                       (default 10; 120 with PLAIT_NIGHTLY=1)
#   scripts/fuzz.sh env graph_xml       only these targets
#   PLAIT_FUZZ_SECONDS=600 scripts/fuzz.sh topology_xml
#   SKIP_FUZZ_BUILD=1 scripts/fuzz.sh   run what build-fuzz holds
#   PLAIT_FUZZ_BUILD_ONLY=1 scripts/fuzz.sh   build, run nothing (scripts/test.sh)
# New inputs the fuzzer finds go to a temporary directory, never into the
# committed corpus. Any crash, leak, UB, per-input timeout or memory blow-up
# fails the script; the input that did it is kept (its path is printed) for
# tests/fuzz/corpus/<target>/regression-<what> once the bug is fixed.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${FUZZ_BUILD_DIR:-$ROOT/build-fuzz}"
JOBS="${JOBS:-$(nproc)}"
seconds="${PLAIT_FUZZ_SECONDS:-}"
if [[ -z "$seconds" ]]; then
  seconds=10
  [[ "${PLAIT_NIGHTLY:-0}" == 1 ]] && seconds=120
fi
if ! command -v clang++ >/dev/null || ! command -v clang >/dev/null; then
  echo "fuzz.sh: clang not found (scripts/setup.sh installs clang and libclang-rt-14-dev)" >&2
  exit 2
fi
runtime="$(clang -print-resource-dir)/lib/linux/libclang_rt.fuzzer-$(uname -m).a"
if [[ ! -f "$runtime" ]]; then
  echo "fuzz.sh: libFuzzer's runtime $runtime is missing (Debian: libclang-rt-14-dev)" >&2
  exit 2
fi

ALL_TARGETS=(unique_id bootstrap_wire greeting_gate env topology_xml graph_xml net_plugin)
targets=("$@")
((${#targets[@]})) || targets=("${ALL_TARGETS[@]}")

if [[ "${SKIP_FUZZ_BUILD:-0}" != 1 ]]; then
  generator=()
  if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]] && command -v ninja >/dev/null; then generator=(-G Ninja); fi
  # -O1 and line tables only: the build is most of this script's time on two
  # cores, and a fuzzer's stack traces need lines, not variables. Asserts stay on.
  cmake -S "$ROOT" -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
    -DPLAIT_BUILD_FUZZERS=ON -DPLAIT_WITH_CUDA=OFF -DPLAIT_BUILD_PERF=OFF -DPLAIT_BUILD_TESTS=OFF >/dev/null
  cmake --build "$BUILD_DIR" -j "$JOBS" --target plait-fuzzers
fi
[[ "${PLAIT_FUZZ_BUILD_ONLY:-0}" == 1 ]] && exit 0

# Per target: the longest input worth trying, and a dictionary.
options_for() {
  local fuzz="$ROOT/tests/fuzz"
  case "$1" in
    unique_id) echo "-max_len=128 -dict=$fuzz/bootstrap.dict" ;;
    bootstrap_wire) echo "-max_len=4096 -dict=$fuzz/bootstrap.dict" ;;
    greeting_gate) echo "-max_len=512" ;;
    env) echo "-max_len=512 -dict=$fuzz/env.dict" ;;
    topology_xml) echo "-max_len=16384 -dict=$fuzz/xml.dict" ;;
    graph_xml) echo "-max_len=8192 -dict=$fuzz/xml.dict" ;;
    net_plugin) echo "-max_len=1024" ;;
    *) echo "fuzz.sh: no target '$1' (have: ${ALL_TARGETS[*]})" >&2; return 1 ;;
  esac
}

work="$(mktemp -d "${TMPDIR:-/tmp}/plait-fuzz.XXXXXX")"
export ASAN_OPTIONS="detect_leaks=1:${ASAN_OPTIONS:-}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}"
if symbolizer="$(command -v llvm-symbolizer)"; then export ASAN_SYMBOLIZER_PATH="$symbolizer"; fi
# A run of `seconds` over corpus/<t> (read) with new inputs in $work/<t>;
# one input may take 10 s and 2 GiB at most. Its verdict goes to $work/<t>.verdict.
run_target() {
  local t="$1" opts
  opts="$(options_for "$t")" || { echo "FAILED" >"$work/$t.verdict"; return; }
  mkdir -p "$work/$t"
  # shellcheck disable=SC2086
  if "$BUILD_DIR/tests/fuzz/fuzz_$t" $opts -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -malloc_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$work/$t-" \
      "$work/$t" "$ROOT/tests/fuzz/corpus/$t" >"$work/$t.log" 2>&1; then
    echo "ok" >"$work/$t.verdict"
  else
    echo "FAILED" >"$work/$t.verdict"
  fi
}
# One target per core at a time: each still gets its `seconds`, and the
# phase takes a core count's share of their sum.
running=0
for t in "${targets[@]}"; do
  if ((running >= JOBS)); then
    wait -n || true
    running=$((running - 1))
  fi
  run_target "$t" &
  running=$((running + 1))
done
wait || true
failed=()
for t in "${targets[@]}"; do
  if [[ "$(cat "$work/$t.verdict" 2>/dev/null)" == ok ]]; then
    echo "fuzz.sh: $t: $(grep -E '^stat::number_of_executed_units' "$work/$t.log" | awk '{print $2}') runs" \
         "in ${seconds} s, $(ls "$work/$t" | wc -l) new input(s), no failure"
  else
    failed+=("$t")
    echo "fuzz.sh: $t FAILED; log $work/$t.log, input(s): $(ls "$work/$t"-* 2>/dev/null | tr '\n' ' ')" >&2
    grep -E "ERROR|SUMMARY|runtime error|==[0-9]+==" "$work/$t.log" 2>/dev/null | head -20 >&2 || true
  fi
done
if ((${#failed[@]})); then
  echo "fuzz.sh: failed: ${failed[*]} (work directory $work kept)" >&2
  exit 1
fi
rm -rf "$work"
echo "fuzz.sh: ${#targets[@]} target(s), ${seconds} s each: no failure"
