#!/usr/bin/env bash
# Sets up, builds and runs every test: the full suite (unit, multi-rank,
# multi-process, tools); the PyTorch backend against Gloo (bindings/torch);
# the CUDA kernels on the device emulator (emu/); the host tests whose ranks
# are threads under ThreadSanitizer; the libFuzzer targets over their
# corpora; last, the unit and multi-process tests again under
# AddressSanitizer + UndefinedBehaviorSanitizer. The builds after the first
# run in the background while the tests before them run (see step below).
#   scripts/test.sh            everything CI runs (budget: 45 minutes on 2 cores)
#   PLAIT_NIGHTLY=1 scripts/test.sh   also the heavy parts: the collective
#                              sweeps over all 12 types on the emulator,
#                              under ASan and in the plain pass's repeats
#                              (label heavy), and the emulator's tests again
#                              under ThreadSanitizer, and each fuzz target
#                              for 120 s instead of 10
#   SKIP_EMULATION=1 SKIP_SANITIZE=1 SKIP_TSAN=1 SKIP_FUZZ=1 SKIP_TORCH=1 scripts/test.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# Each phase says how long it took (CI keeps the whole run under 45 minutes).
phase() { echo "test.sh: phase '$1' done at ${SECONDS} s"; }
"$ROOT/scripts/setup.sh"
phase setup
# PLAIT_WITH_CUDA is automatic: where nvcc exists the kernels are compiled
# (not run: no GPU here) and device_compile_check links them. The test build
# compiles them for one architecture (sm_90; the library's default is 80 and
# 90): nvcc spends about 70 s per kernel file and architecture, and a second
# architecture checks nothing more on a machine without a GPU.
# PLAIT_TEST_CUDA_ARCHITECTURES: what they are compiled for (CI: 90-virtual,
# PTX only, see .ci/run). PLAIT_TEST_CUDA_FLAGS: extra nvcc flags.
# PLAIT_TEST_NO_DEBUG_INFO=1: the main and emulator builds without -g (CI:
# it costs 20-50% of each file's compile time; see .ci/run).
opt_flags=(-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g -DNDEBUG" -DCMAKE_CUDA_FLAGS_RELWITHDEBINFO="-O2 -g -DNDEBUG")
if [[ "${PLAIT_TEST_NO_DEBUG_INFO:-0}" == 1 ]]; then
  opt_flags=(-DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -DNDEBUG" -DCMAKE_CUDA_FLAGS_RELWITHDEBINFO="-O2 -DNDEBUG")
fi
# ccache (scripts/setup.sh installs it) for the main and emulator builds:
# the emulator's build compiles most of the host library, Catch2's runner and
# some tests with exactly the main build's commands (184 of its 240), and
# gets those objects from the cache instead of compiling them again. Depend
# mode: no preprocessor run on a miss. The cache is build-ccache/ (a fresh
# clone starts empty), or $CCACHE_DIR where one is set. The sloppiness lets
# ccache cache the test files that use Catch2's precompiled header
# (PLAIT_TEST_PCH; no __DATE__ or __TIME__ anywhere) instead of passing them by.
launcher=()
if command -v ccache >/dev/null; then
  export CCACHE_DIR="${CCACHE_DIR:-$ROOT/build-ccache}" CCACHE_DEPEND=1 CCACHE_NOHASHDIR=1 \
    CCACHE_SLOPPINESS=pch_defines,time_macros
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
# Builds after the first run in the background, one after another, at nice
# 19, while the tests of the builds before them run: a test pass leaves a
# third of the two cores idle (ranks waiting on each other; the plain pass:
# 342 CPU-seconds in 266 s), and a niced build takes only what the tests
# leave (a waking test preempts it at once). Each step leaves its log and
# exit status in build-logs/; a phase waits for the build it needs
# (await_build) and prints that build's log if it failed. PyTorch's wheel
# (about 3 GB to fetch and unpack) starts downloading before the main build.
logs="$ROOT/build-logs"
rm -rf "$logs" && mkdir -p "$logs"
# step NAME CMD...: runs CMD into build-logs/NAME.log, its status into NAME.rc.
step() {
  local name="$1"
  shift
  set +e
  "$@" >"$logs/$name.log" 2>&1
  echo $? >"$logs/$name.rc"
  set -e
  echo "test.sh: background '$name' done at ${SECONDS} s (status $(cat "$logs/$name.rc"))"
}
# await_build NAME: waits for NAME's status (the background chain is bounded
# by its builds; a chain that died without one fails here, not hangs).
await_build() {
  local name="$1"
  while [[ ! -f "$logs/$name.rc" ]]; do
    if [[ -n "${chain_pid:-}" ]] && ! kill -0 "$chain_pid" 2>/dev/null && [[ ! -f "$logs/$name.rc" ]]; then
      echo "test.sh: the background builds stopped before '$name'" >&2
      exit 1
    fi
    sleep 1
  done
  if [[ "$(cat "$logs/$name.rc")" != 0 ]]; then
    tail -n 200 "$logs/$name.log" >&2
    echo "test.sh: '$name' failed (log: $logs/$name.log)" >&2
    exit 1
  fi
}
if [[ "${SKIP_TORCH:-0}" != 1 ]]; then
  mkdir -p "$ROOT/build-torch"
  step torch-install env PLAIT_SKIP_SETUP=1 "$ROOT/scripts/setup_torch.sh" --install-only &
  torch_install_pid=$!
fi
"$ROOT/scripts/build.sh" "${opt_flags[@]}" "${launcher[@]}" \
  -DCMAKE_CUDA_ARCHITECTURES="${PLAIT_TEST_CUDA_ARCHITECTURES:-90}" -DCMAKE_CUDA_FLAGS="${PLAIT_TEST_CUDA_FLAGS:-}"
phase build

# What each later build is.
# The PyTorch backend's extension against build/'s library, once the wheel is in.
torch_ext() {
  while [[ ! -f "$logs/torch-install.rc" ]]; do
    kill -0 "$torch_install_pid" 2>/dev/null || [[ -f "$logs/torch-install.rc" ]] || { echo "the torch install died"; return 1; }
    sleep 1
  done
  [[ "$(cat "$logs/torch-install.rc")" == 0 ]] || { echo "installing torch failed (SKIP_TORCH=1 skips the PyTorch backend)"; return 1; }
  PLAIT_SKIP_SETUP=1 "$ROOT/scripts/setup_torch.sh" | tail -1 >"$logs/torch-python"
}
emulation=0
if [[ "${SKIP_EMULATION:-0}" != 1 ]]; then
  if [[ -f /usr/local/cuda/include/cuda_runtime_api.h ]] || command -v nvcc >/dev/null; then
    emulation=1
  else
    echo "test.sh: device emulation skipped: no CUDA toolkit headers (/usr/local/cuda or nvcc in PATH)"
  fi
fi
# The kernels compiled as C++ by the host compiler run on the emulated CUDA
# runtime: only the targets the emulation tests need are built. It needs
# the CUDA toolkit's headers (not a GPU, not libcudart).
TSAN_TARGETS="device_compile_check test_emu_runtime emu_fault_check test_emu_device_buffers test_device_stream test_device_transports
  test_device_suspend"
# The collective matrix on device buffers (tests/emu/device_staging.h),
# the drop-in program against NVIDIA's headers, and nccl_device.h's device
# code (test_device_api_lsa: not under TSan, it reserves 16 GiB of
# address space for NCCL's flat window layout), and CUDA VMM between
# forked ranks (vmm_probe_emu, the probe gpu_check runs on a GPU).
EMU_TARGETS="$TSAN_TARGETS test_device_allreduce test_device_collectives test_device_p2p_groups device_conformance
  test_device_api_lsa test_device_api_windows test_symmetric_collectives vmm_probe_emu test_peer_memory
  test_net_gpu_memory test_device_reproducible"
emu_build() {
  BUILD_DIR="$ROOT/build-emu" TARGETS="$EMU_TARGETS" \
    "$ROOT/scripts/build.sh" "${opt_flags[@]}" "${launcher[@]}" -DPLAIT_DEVICE_EMULATION=ON -DPLAIT_BUILD_PERF=OFF
}
# The test programs and the tools they run, not the *_perf tools and other
# tools (tests/CMakeLists.txt: plait-test-programs). Line tables only (-g1):
# the reports keep file:line, and the build is a fifth shorter (test files
# up to a third) than with full debug info. With clang where it is here
# (scripts/setup.sh installs it for the fuzzers): at -O0 under ASan it
# compiles in about 60% of gcc's time (820 against 1350 CPU-seconds here),
# the largest build of the run; gcc's ASan is what a plain
# -DPLAIT_SANITIZE=ON build uses.
asan_compilers=()
if command -v clang++ >/dev/null && command -v clang >/dev/null; then
  asan_compilers=(-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++)
fi
asan_build() {
  BUILD_DIR="$ROOT/build-asan" BUILD_TYPE=Debug TARGETS=plait-test-programs "$ROOT/scripts/build.sh" \
    "${asan_compilers[@]}" -DPLAIT_WITH_CUDA=OFF -DPLAIT_SANITIZE=ON -DPLAIT_BUILD_PERF=OFF \
    -DCMAKE_CXX_FLAGS_DEBUG=-g1 -DCMAKE_C_FLAGS_DEBUG=-g1
}
# ThreadSanitizer on the host: the tests labelled tsan (tests/CMakeLists.txt
# says which and why: ranks as threads, abort from another thread, host and
# background streams, the network proxy, waits and FIFOs between threads; no
# forks from a threaded process, TSan cannot start threads in such a child),
# built into build-tsan-host with only their programs, at -O1 with line
# tables only (-g1: reports keep file:line). No suppressions: TSan cannot see
# a release through a peer's segment mapped at another address than its
# owner's, so the transports name it there (src/base/tsan.h) instead.
TSAN_HOST_TARGETS="test_wait test_worker_pool test_fifo test_line_fifo test_fd_passing test_net test_net_gdr test_api_faults test_api_lifetime
  test_api_mismatch test_membership test_encryption test_rma test_op_status test_nonblocking test_allreduce
  test_p2p_groups test_registration test_registration_lag test_group_end test_timeouts"
tsan_host_build() {
  BUILD_DIR="$ROOT/build-tsan-host" TARGETS="$TSAN_HOST_TARGETS" "$ROOT/scripts/build.sh" \
    -DPLAIT_WITH_CUDA=OFF -DPLAIT_SANITIZE_THREAD=ON -DPLAIT_BUILD_PERF=OFF \
    -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -g1" -DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -g1"
}
# libFuzzer targets (tests/fuzz): built with clang into build-fuzz.
fuzz=0
if [[ "${SKIP_FUZZ:-0}" != 1 ]]; then
  if command -v clang++ >/dev/null && command -v clang >/dev/null; then
    fuzz=1
  else
    echo "test.sh: fuzzing skipped: no clang (scripts/setup.sh installs clang, libclang-rt-14-dev, llvm)"
  fi
fi
fuzz_build() { PLAIT_FUZZ_BUILD_ONLY=1 "$ROOT/scripts/fuzz.sh"; }
# In the order the phases below need them, the longest last (it has the
# TSan and fuzz phases, which leave a core idle, to overlap); in a process
# group of their own
# (set -m), which a failing phase's exit takes down with it.
set -m
(
  renice -n 19 -p "$BASHPID" >/dev/null
  [[ "${SKIP_TORCH:-0}" == 1 ]] || step torch-ext torch_ext
  ((emulation == 0)) || step emu-build emu_build
  [[ "${SKIP_TSAN:-0}" == 1 ]] || step tsan-host-build tsan_host_build
  ((fuzz == 0)) || step fuzz-build fuzz_build
  [[ "${SKIP_SANITIZE:-0}" == 1 ]] || step asan-build asan_build
) &
chain_pid=$!
set +m
trap 'kill -- -"$chain_pid" 2>/dev/null || true' EXIT

# The tests labelled heavy (repeats of a sweep with other sizes, channel
# counts or settings) cover one type of each width and kind here, as in the
# sanitizer pass; the sweeps they repeat cover all twelve. Nightly: all.
heavy_sweep=quick
[[ "${PLAIT_NIGHTLY:-0}" == 1 ]] && heavy_sweep=full
# Two tests at a time (CTEST_JOBS): one test's ranks leave a core idle much
# of the time (waits, forks, timeouts), so the plain pass takes 288 s
# instead of 436, the ASan pass 267 s instead of about 400 and the
# emulator's 255 s instead of about 320 here (all three passes use it). The
# tests that need the machine to themselves (network namespaces, the tools'
# benchmarks) are RUN_SERIAL.
jobs=${CTEST_JOBS:-2}
# The label nightly (repeats of the collective sweeps with other channel
# counts and sizes, tests/api/CMakeLists.txt) runs only nightly.
heavy_skip=(-LE nightly)
[[ "${PLAIT_NIGHTLY:-0}" == 1 ]] && heavy_skip=()
(cd "$ROOT/build" && ctest --output-on-failure --timeout 900 -j "$jobs" -LE heavy &&
  PLAIT_TEST_SWEEP=$heavy_sweep ctest --output-on-failure --timeout 900 -j "$jobs" -L heavy "${heavy_skip[@]}")
phase tests
# The PyTorch backend (bindings/torch) on build/'s library: every c10d
# collective against Gloo at 2 and 4 ranks, DDP/ZeRO/FSDP2 at 2, torchrun,
# a timeout and a killed rank (bindings/torch/tests/test_backend.py).
if [[ "${SKIP_TORCH:-0}" != 1 ]]; then
  await_build torch-ext
  py=$(cat "$logs/torch-python")
  phase torch-build
  # The whole run is bounded (it takes 1-2 minutes): a hang fails CI instead of holding it.
  timeout --kill-after=30 900 "$py" "$ROOT/bindings/torch/tests/test_backend.py" --worlds 2,4 --training-worlds 2
  phase torch-tests
fi
if ((emulation)); then
  await_build emu-build
  phase emu-build
  # The collective matrix on device buffers covers one type of each width
  # and kind in CI (PLAIT_TEST_SWEEP=quick, tests/api/values.h): each case
  # is a kernel on emulated threads; the nightly run covers all twelve.
  sweep=quick
  [[ "${PLAIT_NIGHTLY:-0}" == 1 ]] && sweep=full
  (cd "$ROOT/build-emu" && PLAIT_TEST_SWEEP=$sweep ctest --output-on-failure --timeout 900 -j "$jobs" -L emu)
  phase emu-tests
  # Nightly: again under ThreadSanitizer, each CUDA thread a TSan fiber:
  # races in the kernels' FIFO protocol and between a block's threads
  # (build 5 min, tests 2 min, device_compile_check 4 more: CI's 45-minute
  # budget cannot hold it). Loopback cases up to 1000 elements (larger ones
  # add time, not interleavings); no forks (TSan cannot start threads in a
  # child of a threaded process); two device channels (each CUDA thread is
  # a TSan fiber, and TSan holds at most 8128 threads and fibers: 4 ranks x
  # 16 blocks x 256 threads is more).
  if [[ "${PLAIT_NIGHTLY:-0}" == 1 ]]; then
    BUILD_DIR="$ROOT/build-emu-tsan" TARGETS="$TSAN_TARGETS" \
      "$ROOT/scripts/build.sh" -DPLAIT_DEVICE_EMULATION=ON -DPLAIT_SANITIZE_THREAD=ON -DPLAIT_BUILD_PERF=OFF
    phase tsan-build
    (cd "$ROOT/build-emu-tsan" && PLAIT_DEVICE_CHECK_MAX_COUNT=1000 PLAIT_DEVICE_NCHANNELS=2 \
      TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure --timeout 900 -L emu -LE "process|notsan")
    phase tsan-tests
  fi
fi
if [[ "${SKIP_TSAN:-0}" != 1 ]]; then
  await_build tsan-host-build
  phase tsan-host-build
  # A report fails the test (halt_on_error).
  (cd "$ROOT/build-tsan-host" && TSAN_OPTIONS=halt_on_error=1 ctest --output-on-failure --timeout 900 -j 2 -L tsan)
  phase tsan-host-tests
fi
# Each fuzz target over its committed corpus for PLAIT_FUZZ_SECONDS (10 s; nightly 120 s).
if ((fuzz)); then
  await_build fuzz-build
  SKIP_FUZZ_BUILD=1 "$ROOT/scripts/fuzz.sh"
  phase fuzz
fi
if [[ "${SKIP_SANITIZE:-0}" != 1 ]]; then
  # The collective sweeps cover one type of each width and kind here too
  # (each case under ASan costs 2-3 times its plain run; the plain pass
  # above covers all twelve), and the "heavy" repeats of a sweep (other
  # sizes, channel counts or settings, 5 and 8 ranks) are left to the plain
  # pass: all of them nightly.
  sweep=quick
  skip="tools|forks|heavy"
  if [[ "${PLAIT_NIGHTLY:-0}" == 1 ]]; then sweep=full; skip="tools|forks"; fi
  await_build asan-build
  phase asan-build
  (cd "$ROOT/build-asan" && PLAIT_TEST_SWEEP=$sweep ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:handle_segv=0 \
    UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    ctest --output-on-failure --timeout 900 -j "$jobs" -LE "$skip")  # forks: see tests/api/CMakeLists.txt
  phase asan-tests
fi
wait "$chain_pid"
trap - EXIT
