// device_launch.h — host entry points of the collective kernels
// (algorithms/device/*.cu). Only built when PLAIT_WITH_CUDA; the caller needs
// the CUDA runtime headers (link plait_device, which brings them).
//
// Nothing here creates or owns CUDA resources: buffers, FIFO memory, the
// abort flag and the status words in DeviceWork belong to the caller and must
// outlive the kernel.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

#include "algorithms/device/device_work.h"
#include "algorithms/device/symmetric_work.h"
#include "nccl.h"

// The host-side handle of a __global__ function (what cudaLaunchKernel and
// cudaFuncGetAttributes take). Under the device emulator (emu/) taking the
// handle also registers how to call the kernel with cudaLaunchKernel's
// argument array.
#if defined(PLAIT_DEVICE_EMULATION)
#define PLAIT_KERNEL_HANDLE(kernel) (::plait_emu::kernelHandle(&kernel))
#else
#define PLAIT_KERNEL_HANDLE(kernel) (reinterpret_cast<const void*>(&kernel))
#endif

namespace plait {

// Why `work` cannot run on nChannels channels ("nChannels out of range", ...),
// or nullptr when it can. Checks the plain data only (no pointer is
// dereferenced, no CUDA call is made). Thread-safe; never blocks.
const char* validateDeviceWork(const DeviceWork& work, int nChannels);

// Enqueues one ring AllReduce on `stream`: nChannels thread blocks of
// kDeviceThreads threads, block c running ring_allreduce.h's schedule on
// channel c (channels[c]) for the part of the buffer channelPart() gives it.
// With nranks == 1 no FIFO is touched: the output is the input with the
// operator's pre- and post-op applied (the host's kCopy).
//
// Returns cudaErrorInvalidValue when work.coll is not kAllReduce or
// validateDeviceWork() rejects `work` (without touching the driver),
// cudaSuccess without launching for count 0,
// else the launch's own error. Does not wait for the kernel; a channel that
// fails reports through work.channelStatus and aborts its FIFO ends.
// Thread-safe (as cudaLaunchKernel is).
cudaError_t launchAllReduce(const DeviceWork& work, int nChannels, cudaStream_t stream);

// The AllReduce kernel for `type` (the host-side handle cudaFuncGetAttributes
// and cudaLaunchKernel take), or nullptr for an invalid type. One kernel per
// type serves every RedOpKind.
const void* allReduceKernelFor(ncclDataType_t type);

// Enqueues one ring collective of any DeviceColl on `stream`, as
// launchAllReduce does (AllReduce goes to the same kernel): nChannels thread
// blocks, block c running work.coll's schedule (ring_allreduce.h,
// ring_collectives.h) on channel c for the part channelPart() gives it, with
// the RingArgs the host executor would build (deviceRingArgs in
// device_work.h). AllGather and ReduceScatter move work.count elements of
// every rank's block (blocks blockStride apart); Broadcast and Reduce use
// work.root and each channel's ring to find the root. With nranks == 1 no
// FIFO is touched: a local copy (reduce-copy with the operator's pre- and
// post-op for ReduceScatter and Reduce).
//
// Same return values, asynchrony, status reporting and thread safety as
// launchAllReduce.
cudaError_t launchCollective(const DeviceWork& work, int nChannels, cudaStream_t stream);

// The kernel that runs `coll` for `type`, or nullptr for an invalid type or
// collective. AllGather and Broadcast share one byte-moving kernel for every
// type; ReduceScatter and Reduce have one kernel per type for every RedOpKind
// (and AllReduce its own, allReduceKernelFor's).
const void* collectiveKernelFor(DeviceColl coll, ncclDataType_t type);

// Why `work` cannot run ("too many operations", ...), or nullptr. Checks the
// plain data only.
const char* validateDeviceP2pWork(const DeviceP2pWork& work);

// Enqueues a group's point-to-point operations on `stream`: work.nLanes
// thread blocks, block l running the operations of lane l in order (a send
// streams its bytes through the FIFO in slices of work.sliceBytes; a receive
// takes them, checking each step's size; a copy is a local copy). Returns
// cudaErrorInvalidValue when validateDeviceP2pWork rejects `work`,
// cudaSuccess without launching when there is nothing to move, else the
// launch's own error. Failures stop the lane and are reported in
// work.laneStatus, as launchCollective's channels do.
cudaError_t launchP2p(const DeviceP2pWork& work, cudaStream_t stream);

// Enqueues one symmetric collective (symmetric_work.h) on `stream`: nBlocks
// thread blocks of kDeviceThreads threads, block b meeting block b of every
// LSA peer at its barriers, so every rank must launch the same nBlocks for
// the same collective, count and type. Returns cudaErrorInvalidValue when
// validateSymmetricWork rejects `work`, cudaSuccess without launching for
// count 0, else the launch's own error. Failures (abort, a barrier's
// deadline, a peer that gave up) end the block and are reported in
// work.blockStatus.
cudaError_t launchSymmetric(const SymmetricWork& work, int nBlocks, cudaStream_t stream);

// The symmetric kernel for `coll` and `type`, or nullptr (AllGather: one
// byte kernel; AllReduce and ReduceScatter: one kernel per type).
const void* symmetricKernelFor(DeviceColl coll, ncclDataType_t type);

// Stores in *cycles about `ms` milliseconds of clock64() on `device` (its peak
// clock rate; the SM clock may run slower, which only lengthens the time-out).
// Returns the error of the attribute query.
cudaError_t deviceCyclesForMs(int device, int64_t ms, uint64_t* cycles);

}  // namespace plait
