#!/usr/bin/env bash
# Configures and builds Plait into $BUILD_DIR (default build/). Extra
# arguments go to cmake's configure step, e.g. -DPLAIT_SANITIZE=ON.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
JOBS="${JOBS:-$(nproc)}"
# Ninja for a new build directory (an existing one keeps its generator): it
# builds several --target's in one graph, where make's recursive rules built
# a shared library twice at once and broke the archive ("Bus error").
generator=()
if [[ ! -f "$BUILD_DIR/CMakeCache.txt" ]] && command -v ninja >/dev/null; then generator=(-G Ninja); fi
cmake -S "$ROOT" -B "$BUILD_DIR" "${generator[@]}" -DCMAKE_BUILD_TYPE="${BUILD_TYPE:-RelWithDebInfo}" "$@" >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS" ${TARGETS:+--target $TARGETS}
