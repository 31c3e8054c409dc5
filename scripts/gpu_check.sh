#!/usr/bin/env bash
# gpu_check.sh — runs Plait's device path on a real NVIDIA GPU from a bundle
# built elsewhere (this project's development machine has no GPU).
#
#   scripts/gpu_check.sh bundle   # on the development machine: build-gpu -> .gpu/
#   scripts/gpu_check.sh run      # on the GPU machine: runs what .gpu/ holds
#
# The bundle: libnccl.so.2 (PLAIT_WITH_CUDA=ON, sm_90), the libraries it needs
# beyond glibc, device_compile_check (the kernels on loopback rings in device
# memory, their deadline and abort), loopback_bench (the AllReduce kernel's
# throughput against cudaMemcpy) and device_conformance (C against NVIDIA's
# nccl.h, forked ranks on cudaMalloc'd buffers through Plait's executor; on a
# one-GPU machine the ranks share the device: PLAIT_ALLOW_SHARED_DEVICE=1),
# run with FIFOs in GPU memory (P2P, the default) and in host memory
# (NCCL_P2P_DISABLE=1), and across two "hosts" over loopback sockets
# (net-pair: the device path's NET transport; net-kill: one of them killed).
# Logs go to $OUT (or ./gpu-check-logs).
set -uo pipefail
cd "$(dirname "$0")/.."

bundle() {
  local build=${BUILD:-build-gpu}
  cmake -S . -B "$build" -G Ninja -DPLAIT_WITH_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null || return 1
  ninja -C "$build" nccl device_compile_check device_conformance loopback_bench device_coll_perf vmm_probe \
    test_device_api_windows_gpu test_symmetric_collectives_gpu test_net_gpu_memory_gpu test_device_suspend_gpu || return 1
  rm -rf .gpu && mkdir -p .gpu/lib .gpu/bin
  cp -L "$build/src/api/libnccl.so.2" .gpu/lib/
  local lib
  for lib in libpugixml.so.1 libhwloc.so.15 libudev.so.1; do cp -L "/lib/x86_64-linux-gnu/$lib" .gpu/lib/; done
  cp -L /usr/local/cuda/lib/libcudart.so.13 .gpu/lib/
  cp "$build/algorithms/device/device_compile_check" "$build/tests/process/device_conformance" \
    "$build/perf/device/loopback_bench" "$build/perf/device/device_coll_perf" "$build/perf/device/vmm_probe" \
    "$build/tests/device_api/test_device_api_windows_gpu" "$build/tests/device_api/test_symmetric_collectives_gpu" \
    "$build/tests/device_api/test_net_gpu_memory_gpu" "$build/tests/device_api/test_device_suspend_gpu" .gpu/bin/
  strip --strip-debug .gpu/lib/libnccl.so.2 .gpu/bin/*
  du -sh .gpu
}

run() {
  local logs=${OUT:-gpu-check-logs} rc=0 n
  mkdir -p "$logs"
  export LD_LIBRARY_PATH=$PWD/.gpu/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$logs/gpu.txt"
  step() {  # step NAME SECONDS COMMAND...
    local name=$1 limit=$2 start status
    shift 2
    start=$(date +%s.%N)
    timeout -k 5 "$limit" "$@" >"$logs/$name.log" 2>&1
    status=$?
    printf '%-28s exit %3d  %6.1f s\n' "$name" "$status" "$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')" | tee -a "$logs/summary.txt"
    tail -n 4 "$logs/$name.log"
    [ "$status" -eq 0 ] || rc=1
  }
  step device_compile_check 240 .gpu/bin/device_compile_check
  for n in 2 3 4 abort; do
    step "device_conformance_$n" 120 env PLAIT_ALLOW_SHARED_DEVICE=1 PLAIT_DEBUG=WARN .gpu/bin/device_conformance "$n"
  done
  step device_conformance_4_shm 120 env PLAIT_ALLOW_SHARED_DEVICE=1 NCCL_P2P_DISABLE=1 .gpu/bin/device_conformance 4
  step device_paths 60 env PLAIT_ALLOW_SHARED_DEVICE=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT \
    .gpu/bin/device_conformance 2
  grep -h "device FIFOs via" "$logs/device_paths.log" | sed 's/^[^]]*] //'
  step device_conformance_net_pair 120 "$0" net-pair
  step device_conformance_net_kill 120 "$0" net-kill
  # CUDA VMM between forked ranks at the device API's flat layout (not yet
  # run on hardware).
  for n in 2 4; do step "vmm_probe_$n" 60 .gpu/bin/vmm_probe "$n"; done
  # The device API through the library (windows at the flat layout, device
  # communicators, an LSA AllReduce kernel); the forked ranks in a process of
  # their own (CUDA does not survive fork in a process that used it).
  step device_api_windows 180 env PLAIT_ALLOW_SHARED_DEVICE=1 .gpu/bin/test_device_api_windows_gpu "~[win-off]~[process]"
  step device_api_windows_process 120 env PLAIT_ALLOW_SHARED_DEVICE=1 .gpu/bin/test_device_api_windows_gpu "[process]"
  step device_api_windows_off 60 env PLAIT_ALLOW_SHARED_DEVICE=1 NCCL_WIN_ENABLE=0 \
    .gpu/bin/test_device_api_windows_gpu "[win-off]"
  # The symmetric kernels (AllReduce, ReduceScatter, AllGather on window
  # buffers), every rank sharing the GPU; the barrier time-out case too.
  step symmetric_collectives 240 env PLAIT_ALLOW_SHARED_DEVICE=1 .gpu/bin/test_symmetric_collectives_gpu "~[deadline]"
  step symmetric_deadline 60 env PLAIT_ALLOW_SHARED_DEVICE=1 PLAIT_TIMEOUT=2 \
    .gpu/bin/test_symmetric_collectives_gpu "[deadline]"
  # GPUDirect RDMA's GPU memory: a dmabuf of cudaMalloc memory, the flush
  # (no RDMA NIC here: the registration itself stays unverified).
  step net_gpu_memory 60 .gpu/bin/test_net_gpu_memory_gpu "~[no_dmabuf]"
  # ncclCommSuspend / ncclCommResume: FIFOs freed and re-made, IPC mappings
  # closed and reopened, results right after resume; graphs refuse suspend.
  step device_suspend 120 env PLAIT_ALLOW_SHARED_DEVICE=1 .gpu/bin/test_device_suspend_gpu
  grep -h "^suspend:" "$logs/device_suspend.log"
  if [ "${SANITIZE:-1}" = 1 ] && command -v compute-sanitizer >/dev/null; then
    step memcheck_conformance_2 300 env PLAIT_ALLOW_SHARED_DEVICE=1 compute-sanitizer --tool memcheck \
      --target-processes all --error-exitcode 9 .gpu/bin/device_conformance 2
    step memcheck_suspend 200 env PLAIT_ALLOW_SHARED_DEVICE=1 compute-sanitizer --tool memcheck \
      --error-exitcode 9 .gpu/bin/test_device_suspend_gpu
    step synccheck_kernels 300 compute-sanitizer --tool synccheck --error-exitcode 9 .gpu/bin/device_compile_check
    step racecheck_kernels 300 compute-sanitizer --tool racecheck --error-exitcode 9 .gpu/bin/device_compile_check
  fi
  [ "${BENCH:-1}" = 1 ] && step loopback_bench 300 .gpu/bin/loopback_bench 256 10 && cat "$logs/loopback_bench.log"
  if [ "${BENCH:-1}" = 1 ] || [ "${COLL_BENCH:-0}" = 1 ]; then
    # The library on device buffers, FIFOs in GPU memory (P2P) against host
    # memory (SHM), interleaved; ranks are threads sharing the GPU.
    local coll n mode
    # Symmetric kernels against the FIFO rings on the same window buffers.
    for coll in allreduce allgather reducescatter; do
      for mode in 1 0; do
        step "sym_${coll}_4_sym${mode}" 120 env PLAIT_ALLOW_SHARED_DEVICE=1 DEVICE_COLL_PERF_WINDOWS=1 \
          PLAIT_SYMMETRIC_ENABLE=$mode .gpu/bin/device_coll_perf 4 "$coll" 8 "${COLL_MAX:-256M}" 20
        cat "$logs/sym_${coll}_4_sym${mode}.log"
      done
    done
    for coll in allreduce allgather; do
      for n in 2 4; do
        for mode in p2p shm; do
          step "coll_${coll}_${n}_${mode}" 120 env PLAIT_ALLOW_SHARED_DEVICE=1 \
            NCCL_P2P_DISABLE=$([ "$mode" = shm ] && echo 1 || echo 0) \
            .gpu/bin/device_coll_perf "$n" "$coll" 8 "${COLL_MAX:-256M}" 20
          cat "$logs/coll_${coll}_${n}_${mode}.log"
        done
      done
    done
  fi
  cat "$logs/summary.txt"
  return $rc
}

# Two launched ranks of device_conformance, each its own "host"
# (NCCL_HOSTID), over loopback sockets: the device path's NET transport
# (kernels writing and polling host FIFOs that the proxy moves) on one GPU.
# Extra arguments go to device_conformance ("kill": not used here). Exit 0
# when both ranks pass and both logged NET for the other.
net_pair() {
  local bin=${BIN:-.gpu/bin/device_conformance} logs=${OUT:-gpu-check-logs} port=$((20000 + RANDOM % 10000))
  local r status=0 pids=()
  mkdir -p "$logs"
  for r in 0 1; do
    env NCCL_HOSTID="gpu-check-node$r" NCCL_SOCKET_IFNAME=lo NCCL_COMM_ID="127.0.0.1:$port" PLAIT_RANK=$r \
      PLAIT_NRANKS=2 PLAIT_LOCAL_RANK=0 PLAIT_LOCAL_NRANKS=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET \
      PLAIT_DEVICE_NCHANNELS=${PLAIT_DEVICE_NCHANNELS:-4} "$bin" "$@" >"$logs/net_pair_rank$r.log" 2>&1 &
    pids+=($!)
  done
  for r in 0 1; do
    wait "${pids[$r]}" || { status=1; tail -n 5 "$logs/net_pair_rank$r.log"; }
    grep -q "device FIFOs via NET/" "$logs/net_pair_rank$r.log" || { echo "rank $r did not use NET"; status=1; }
    grep -h "device conformance:\|device FIFOs via" "$logs/net_pair_rank$r.log" | sed 's/^[^]]*] //'
  done
  return $status
}

# The same pair running device AllReduces (device_conformance kill); rank 1
# is killed once both run. Exit 0 when rank 0's kernel ended and it returned
# ncclRemoteError (its line says how long after the kill and why).
net_kill() {
  local bin=${BIN:-.gpu/bin/device_conformance} logs=${OUT:-gpu-check-logs} port=$((20000 + RANDOM % 10000))
  local r i rc pids=()
  mkdir -p "$logs"
  for r in 0 1; do
    env NCCL_HOSTID="gpu-check-node$r" NCCL_SOCKET_IFNAME=lo NCCL_COMM_ID="127.0.0.1:$port" PLAIT_RANK=$r \
      PLAIT_NRANKS=2 PLAIT_LOCAL_RANK=0 PLAIT_LOCAL_NRANKS=1 PLAIT_TIMEOUT=20 PLAIT_DEVICE_NCHANNELS=4 \
      "$bin" kill >"$logs/net_kill_rank$r.log" 2>&1 &
    pids+=($!)
  done
  for ((i = 0; i < 300; i++)); do
    grep -q running "$logs/net_kill_rank0.log" && grep -q running "$logs/net_kill_rank1.log" && break
    sleep 0.1
  done
  sleep 1
  kill -9 "${pids[1]}"
  wait "${pids[0]}"
  rc=$?
  wait "${pids[1]}" 2>/dev/null
  grep -h "net_kill_rank:" "$logs/net_kill_rank0.log"
  return $rc
}

case "${1:-}" in
  bundle) bundle ;;
  run) run ;;
  net-pair) shift; net_pair "$@" ;;
  net-kill) net_kill ;;
  *) echo "usage: $0 bundle|run|net-pair|net-kill" >&2; exit 2 ;;
esac
