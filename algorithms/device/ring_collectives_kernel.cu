// ring_collectives_kernel.cu — the AllGather, ReduceScatter, Broadcast and
// Reduce kernels: one thread block per channel runs ring_collectives.h's
// schedule, the very code the host executor runs (src/core/collectives.cc),
// over DevicePrimitives instead of HostPrimitives (DESIGN.md §3). Each block
// builds its RingArgs with deviceRingArgs (device_work.h), which mirrors the
// host's runRingCollectiveChannel, so host and device split alike.
//
// The GPU part of tests/device/device_compile_check runs them (loopback rings
// on one GPU); it passed on an H100 (sm_90, scripts/gpu_check.sh), under
// compute-sanitizer's synccheck and racecheck too, and runs under the device
// emulator in CI.
//
// Build time: AllGather and Broadcast only move bytes, so one kernel serves
// every type: it runs the schedule counted in bytes (ringArgsInBytes) over a
// byte-sized copy functor, which makes the same FIFO steps as a typed run.
// ReduceScatter and Reduce need every type × operator: one kernel per type
// switches on the operator and on the collective (as all_reduce_kernel.cu
// does on the operator), so nvcc builds 12 + 1 kernels, not 2 × 72.
#include <cuda_runtime.h>

#include "algorithms/device/device_launch.h"
#include "algorithms/device/device_primitives.cuh"
#include "algorithms/device/device_work.h"
#include "algorithms/device/reduce_copy.cuh"
#include "algorithms/reduce_ops.h"
#include "algorithms/ring_collectives.h"
#include "algorithms/types.h"

namespace plait {
namespace device {
namespace {

// One rank: the collective is a copy of this channel's part (with the
// operator's pre- and post-op for the reductions), as the host's runLocalCopy.
template <class Fn>
__device__ void localCopy(const DeviceWork& work, const RingArgs& a) {
  ReduceCopyPtrs p;
  p.src0 = a.input;
  p.dst0 = a.output;
  p.count = a.count;
  p.preOpSrc0 = true;  // ignored by functors without a pre-op (FuncCopyBytes: a byte copy)
  p.postOp = true;
  blockReduceCopy(Fn(deviceRedOp(work)), p);
}

// Runs `work`'s schedule for channel blockIdx.x with the functor Fn: the
// reductions (kReduction, Fn typed) or the data movers (FuncCopyBytes, args
// in bytes). `ring` is block-shared room for kMaxDeviceRanks ints.
template <class Fn, bool kReduction>
__device__ void ringChannel(const DeviceWork& work, int* ring, DevicePrimitivesShared* shared) {
  const int channel = static_cast<int>(blockIdx.x);
  for (int p = static_cast<int>(threadIdx.x); p < work.nranks && p < kMaxDeviceRanks; p += blockDim.x)
    ring[p] = work.channels[channel].ring[p];
  __syncthreads();
  RingArgs a;
  if (!deviceRingArgs(work, static_cast<int>(gridDim.x), channel, ring, &a)) return;  // uniform
  if constexpr (!kReduction) a = ringArgsInBytes(a);
  if (work.nranks == 1) return localCopy<Fn>(work, a);

  DevicePrimitivesConfig pc;
  pc.recv = work.channels[channel].recv;
  pc.send = work.channels[channel].send;
  pc.op = kReduction ? deviceRedOp(work) : RedOp{};
  pc.sliceBytes = work.sliceBytes;
  pc.abortFlag = work.abortFlag;
  pc.timeoutCycles = work.timeoutCycles;
  DevicePrimitives<Fn> prims(pc, shared);

  bool ok = false;
  if constexpr (kReduction) {
    ok = work.coll == DeviceColl::kReduceScatter ? ringReduceScatter(prims, a) : ringReduce(prims, a);
  } else {
    ok = work.coll == DeviceColl::kAllGather ? ringAllGather(prims, a) : ringBroadcast(prims, a);
  }
  if (!ok && threadIdx.x == 0 && work.channelStatus != nullptr)
    AtomicRef<uint32_t>(work.channelStatus[channel]).store(static_cast<uint32_t>(prims.status()), mo::relaxed);
}

// AllGather and Broadcast, every type.
__global__ void __launch_bounds__(kDeviceThreads) copyCollectiveKernel(const __grid_constant__ DeviceWork work) {
  __shared__ DevicePrimitivesShared shared;
  __shared__ int ring[kMaxDeviceRanks];
  ringChannel<FuncCopyBytes, false>(work, ring, &shared);
}

// ReduceScatter and Reduce for T, every operator.
template <class T>
__global__ void __launch_bounds__(kDeviceThreads) reduceCollectiveKernel(const __grid_constant__ DeviceWork work) {
  __shared__ DevicePrimitivesShared shared;
  __shared__ int ring[kMaxDeviceRanks];
  switch (work.op.kind) {
    case RedOpKind::kSum: ringChannel<FuncSum<T>, true>(work, ring, &shared); break;
    case RedOpKind::kProd: ringChannel<FuncProd<T>, true>(work, ring, &shared); break;
    case RedOpKind::kMax: ringChannel<FuncMax<T>, true>(work, ring, &shared); break;
    case RedOpKind::kMin: ringChannel<FuncMin<T>, true>(work, ring, &shared); break;
    case RedOpKind::kPreMulSum: ringChannel<FuncPreMulSum<T>, true>(work, ring, &shared); break;
    case RedOpKind::kSumPostDiv: ringChannel<FuncSumPostDiv<T>, true>(work, ring, &shared); break;
  }
}

template <ncclDataType_t kType>
const void* reduceKernelOf() {
  return PLAIT_KERNEL_HANDLE(reduceCollectiveKernel<TypeOfT<kType>>);
}

const void* reduceKernelFor(ncclDataType_t type) {
  switch (type) {
    case ncclInt8: return reduceKernelOf<ncclInt8>();
    case ncclUint8: return reduceKernelOf<ncclUint8>();
    case ncclInt32: return reduceKernelOf<ncclInt32>();
    case ncclUint32: return reduceKernelOf<ncclUint32>();
    case ncclInt64: return reduceKernelOf<ncclInt64>();
    case ncclUint64: return reduceKernelOf<ncclUint64>();
    case ncclFloat16: return reduceKernelOf<ncclFloat16>();
    case ncclFloat32: return reduceKernelOf<ncclFloat32>();
    case ncclFloat64: return reduceKernelOf<ncclFloat64>();
    case ncclBfloat16: return reduceKernelOf<ncclBfloat16>();
    case ncclFloat8e4m3: return reduceKernelOf<ncclFloat8e4m3>();
    case ncclFloat8e5m2: return reduceKernelOf<ncclFloat8e5m2>();
    default: return nullptr;
  }
}

}  // namespace
}  // namespace device

const void* collectiveKernelFor(DeviceColl coll, ncclDataType_t type) {
  if (!isValidType(type)) return nullptr;
  switch (coll) {
    case DeviceColl::kAllReduce: return allReduceKernelFor(type);
    case DeviceColl::kAllGather:
    case DeviceColl::kBroadcast: return PLAIT_KERNEL_HANDLE(device::copyCollectiveKernel);
    case DeviceColl::kReduceScatter:
    case DeviceColl::kReduce: return device::reduceKernelFor(type);
  }
  return nullptr;
}

cudaError_t launchCollective(const DeviceWork& work, int nChannels, cudaStream_t stream) {
  if (validateDeviceWork(work, nChannels) != nullptr) return cudaErrorInvalidValue;
  if (work.count == 0) return cudaSuccess;
  const void* kernel = collectiveKernelFor(work.coll, work.type);
  void* args[] = {const_cast<DeviceWork*>(&work)};
  return cudaLaunchKernel(kernel, dim3(static_cast<unsigned>(nChannels)), dim3(kDeviceThreads), args, 0, stream);
}

}  // namespace plait
