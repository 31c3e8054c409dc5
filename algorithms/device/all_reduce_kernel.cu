// all_reduce_kernel.cu — the ring AllReduce kernels: one thread block per
// channel runs ring_allreduce.h's schedule, the very code the host executor
// runs, over DevicePrimitives instead of HostPrimitives (DESIGN.md §3).
//
// One __global__ kernel per element type; the RedOpKind is a switch inside
// it (uniform across the grid), so the 12 types × 6 kinds are all compiled
// while nvcc builds 12 kernels rather than 72 (build time; the switch costs
// one branch per launch).
#include <cuda_runtime.h>

#include "algorithms/device/device_launch.h"
#include "algorithms/device/device_primitives.cuh"
#include "algorithms/device/device_work.h"
#include "algorithms/device/reduce_copy.cuh"
#include "algorithms/reduce_ops.h"
#include "algorithms/ring_allreduce.h"
#include "algorithms/types.h"

namespace plait {
namespace device {

// Channel blockIdx.x of `work`, with the functor Fn.
template <class Fn>
__device__ void allReduceChannel(const DeviceWork& work, DevicePrimitivesShared* shared) {
  using T = typename Fn::Elt;
  const int channel = static_cast<int>(blockIdx.x);
  size_t begin = 0, end = 0;
  channelPart(work.count, static_cast<int>(gridDim.x), channel, work.alignElems, &begin, &end);
  if (begin == end) return;  // uniform across the block
  const RedOp op = deviceRedOp(work);
  const char* input = static_cast<const char*>(work.sendbuff) + begin * sizeof(T);
  char* output = static_cast<char*>(work.recvbuff) + begin * sizeof(T);

  if (work.nranks == 1) {  // the host's kCopy: out = post(pre(in))
    ReduceCopyPtrs p;
    p.src0 = input;
    p.dst0 = output;
    p.count = end - begin;
    p.preOpSrc0 = true;
    p.postOp = true;
    blockReduceCopy(Fn(op), p);
    return;
  }

  DevicePrimitivesConfig pc;
  pc.recv = work.channels[channel].recv;
  pc.send = work.channels[channel].send;
  pc.op = op;
  pc.sliceBytes = work.sliceBytes;
  pc.abortFlag = work.abortFlag;
  pc.timeoutCycles = work.timeoutCycles;
  DevicePrimitives<Fn> prims(pc, shared);

  RingAllReduceArgs a;
  a.input = input;
  a.output = output;
  a.count = end - begin;
  a.elemSize = sizeof(T);
  a.nranks = work.nranks;
  a.position = work.channels[channel].position;
  a.chunkElems = work.chunkElems;
  a.alignElems = work.alignElems;
  if (!ringAllReduce(prims, a) && threadIdx.x == 0 && work.channelStatus != nullptr)
    AtomicRef<uint32_t>(work.channelStatus[channel]).store(static_cast<uint32_t>(prims.status()), mo::relaxed);
}

template <class T>
__global__ void __launch_bounds__(kDeviceThreads) allReduceKernel(const __grid_constant__ DeviceWork work) {
  __shared__ DevicePrimitivesShared shared;
  switch (work.op.kind) {
    case RedOpKind::kSum: allReduceChannel<FuncSum<T>>(work, &shared); break;
    case RedOpKind::kProd: allReduceChannel<FuncProd<T>>(work, &shared); break;
    case RedOpKind::kMax: allReduceChannel<FuncMax<T>>(work, &shared); break;
    case RedOpKind::kMin: allReduceChannel<FuncMin<T>>(work, &shared); break;
    case RedOpKind::kPreMulSum: allReduceChannel<FuncPreMulSum<T>>(work, &shared); break;
    case RedOpKind::kSumPostDiv: allReduceChannel<FuncSumPostDiv<T>>(work, &shared); break;
  }
}

template <ncclDataType_t kType>
const void* kernelOf() {
  return PLAIT_KERNEL_HANDLE(allReduceKernel<TypeOfT<kType>>);
}

}  // namespace device

const void* allReduceKernelFor(ncclDataType_t type) {
  switch (type) {
    case ncclInt8: return device::kernelOf<ncclInt8>();
    case ncclUint8: return device::kernelOf<ncclUint8>();
    case ncclInt32: return device::kernelOf<ncclInt32>();
    case ncclUint32: return device::kernelOf<ncclUint32>();
    case ncclInt64: return device::kernelOf<ncclInt64>();
    case ncclUint64: return device::kernelOf<ncclUint64>();
    case ncclFloat16: return device::kernelOf<ncclFloat16>();
    case ncclFloat32: return device::kernelOf<ncclFloat32>();
    case ncclFloat64: return device::kernelOf<ncclFloat64>();
    case ncclBfloat16: return device::kernelOf<ncclBfloat16>();
    case ncclFloat8e4m3: return device::kernelOf<ncclFloat8e4m3>();
    case ncclFloat8e5m2: return device::kernelOf<ncclFloat8e5m2>();
    default: return nullptr;
  }
}

cudaError_t launchAllReduce(const DeviceWork& work, int nChannels, cudaStream_t stream) {
  if (work.coll != DeviceColl::kAllReduce) return cudaErrorInvalidValue;
  if (validateDeviceWork(work, nChannels) != nullptr) return cudaErrorInvalidValue;
  if (work.count == 0) return cudaSuccess;
  const void* kernel = allReduceKernelFor(work.type);
  void* args[] = {const_cast<DeviceWork*>(&work)};
  return cudaLaunchKernel(kernel, dim3(static_cast<unsigned>(nChannels)), dim3(kDeviceThreads), args, 0, stream);
}

cudaError_t deviceCyclesForMs(int device, int64_t ms, uint64_t* cycles) {
  int kHz = 0;
  const cudaError_t err = cudaDeviceGetAttribute(&kHz, cudaDevAttrClockRate, device);
  if (err != cudaSuccess) return err;
  *cycles = static_cast<uint64_t>(ms < 0 ? 0 : ms) * static_cast<uint64_t>(kHz);
  return cudaSuccess;
}

}  // namespace plait
