#!/usr/bin/env bash
# Sets up, builds and runs every test: the full suite (unit, multi-rank,
# multi-process, tools), then the unit and multi-process tests again under
# AddressSanitizer + UndefinedBehaviorSanitizer.
#   scripts/test.sh            everything
#   SKIP_SANITIZE=1 scripts/test.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/setup.sh"
# PLAIT_WITH_CUDA is automatic: where nvcc exists the kernels are compiled
# (not run: no GPU here) and device_compile_check links them.
"$ROOT/scripts/build.sh"
(cd "$ROOT/build" && ctest --output-on-failure --timeout 900 -j "${CTEST_JOBS:-1}")
if [[ "${SKIP_SANITIZE:-0}" != 1 ]]; then
  BUILD_DIR="$ROOT/build-asan" BUILD_TYPE=Debug "$ROOT/scripts/build.sh" -DPLAIT_WITH_CUDA=OFF -DPLAIT_SANITIZE=ON \
    -DPLAIT_BUILD_PERF=OFF
  (cd "$ROOT/build-asan" && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:handle_segv=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --output-on-failure --timeout 900 -LE "tools|forks")  # forks: see tests/api/CMakeLists.txt
fi
