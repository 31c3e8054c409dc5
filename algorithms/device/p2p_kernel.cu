// p2p_kernel.cu — point-to-point on device buffers (Send/Recv, and so
// AlltoAll, Gather and Scatter): one thread block per lane runs its sends,
// receives or local copies in order over the same DevicePrimitives the ring
// collectives use, counted in bytes (one kernel for every type).
//
// Run under the device emulator in CI, and through device_conformance's
// Send/Recv, AlltoAll, Gather and Scatter on one H100 (scripts/gpu_check.sh).
#include <cuda_runtime.h>

#include "algorithms/device/device_launch.h"
#include "algorithms/device/device_primitives.cuh"
#include "algorithms/device/device_work.h"
#include "algorithms/device/reduce_copy.cuh"

namespace plait {
namespace device {
namespace {

// Operation i of block `lane`; false on failure (already reported).
__device__ bool runP2pOp(const DeviceP2pWork& work, int i, DevicePrimitivesShared* shared) {
  const DeviceP2pOp& op = work.ops[i];
  if (op.bytes == 0 || op.kind == DeviceP2pKind::kCopyDst) return true;
  if (op.kind == DeviceP2pKind::kCopy) {
    ReduceCopyPtrs p;
    p.src0 = op.buff;
    p.dst0 = work.ops[i + 1].buff;
    p.count = op.bytes;
    blockReduceCopy(FuncCopyBytes(), p);
    return true;
  }
  const bool send = op.kind == DeviceP2pKind::kSend;
  DevicePrimitivesConfig pc;
  if (send) pc.send = work.sendFifos[op.peer];
  else pc.recv = work.recvFifos[op.peer];
  pc.sliceBytes = work.sliceBytes;
  pc.abortFlag = work.abortFlag;
  pc.timeoutCycles = work.timeoutCycles;
  DevicePrimitives<FuncCopyBytes> prims(pc, shared);
  const bool ok = send ? prims.send(op.buff, op.bytes) : prims.recv(op.buff, op.bytes);
  if (!ok && threadIdx.x == 0 && work.laneStatus != nullptr)
    AtomicRef<uint32_t>(work.laneStatus[op.lane % kMaxDeviceChannels])
        .store(static_cast<uint32_t>(prims.status()), mo::relaxed);
  return ok;
}

__global__ void __launch_bounds__(kDeviceThreads) p2pKernel(const __grid_constant__ DeviceP2pWork work) {
  __shared__ DevicePrimitivesShared shared;
  const int lane = static_cast<int>(blockIdx.x);
  for (int i = 0; i < work.nOps; ++i) {
    if (work.ops[i].lane != lane) continue;  // uniform across the block
    if (!runP2pOp(work, i, &shared)) return;  // the lane's later operations would wait on a broken FIFO
    __syncthreads();  // the next operation's primitives read the FIFO counters this one published
  }
}

}  // namespace
}  // namespace device

// Checks the plain data; the FIFO tables are device memory and not read here.
const char* validateDeviceP2pWork(const DeviceP2pWork& work) {
  if (work.nOps < 0 || work.nOps > kMaxDeviceP2pOps) return "too many operations";
  if (work.nLanes < 1 || work.nLanes > kMaxDeviceP2pOps) return "nLanes out of range";
  for (int i = 0; i < work.nOps; ++i) {
    const DeviceP2pOp& op = work.ops[i];
    if (op.lane >= work.nLanes) return "an operation's lane is out of range";
    switch (op.kind) {
      case DeviceP2pKind::kCopy:
        if (i + 1 >= work.nOps || work.ops[i + 1].kind != DeviceP2pKind::kCopyDst || work.ops[i + 1].lane != op.lane ||
            work.ops[i + 1].bytes != op.bytes)
          return "a copy is not followed by its destination";
        break;
      case DeviceP2pKind::kCopyDst:
        if (i == 0 || work.ops[i - 1].kind != DeviceP2pKind::kCopy) return "a copy destination without its copy";
        break;
      case DeviceP2pKind::kSend:
      case DeviceP2pKind::kRecv:
        if (op.bytes == 0) break;
        if (op.peer < 0 || op.peer >= work.nranks) return "a send or receive names a peer out of range";
        if (work.sendFifos == nullptr || work.recvFifos == nullptr) return "no FIFO tables";
        if (work.sliceBytes == 0) return "sliceBytes is 0";
        break;
      default: return "invalid operation kind";
    }
    if (op.bytes > 0 && op.buff == nullptr) return "an operation has a null buffer";
  }
  return nullptr;
}

cudaError_t launchP2p(const DeviceP2pWork& work, cudaStream_t stream) {
  if (validateDeviceP2pWork(work) != nullptr) return cudaErrorInvalidValue;
  bool any = false;
  for (int i = 0; i < work.nOps; ++i) any = any || work.ops[i].bytes > 0;
  if (!any) return cudaSuccess;
  void* args[] = {const_cast<DeviceP2pWork*>(&work)};
  return cudaLaunchKernel(PLAIT_KERNEL_HANDLE(device::p2pKernel), dim3(static_cast<unsigned>(work.nLanes)),
                          dim3(kDeviceThreads), args, 0, stream);
}

}  // namespace plait
