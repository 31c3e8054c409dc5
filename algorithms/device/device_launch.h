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
#include "nccl.h"

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
// Returns cudaErrorInvalidValue when validateDeviceWork() rejects `work`
// (without touching the driver), cudaSuccess without launching for count 0,
// else the launch's own error. Does not wait for the kernel; a channel that
// fails reports through work.channelStatus and aborts its FIFO ends.
// Thread-safe (as cudaLaunchKernel is).
cudaError_t launchAllReduce(const DeviceWork& work, int nChannels, cudaStream_t stream);

// The AllReduce kernel for `type` (the host-side handle cudaFuncGetAttributes
// and cudaLaunchKernel take), or nullptr for an invalid type. One kernel per
// type serves every RedOpKind.
const void* allReduceKernelFor(ncclDataType_t type);

// Stores in *cycles about `ms` milliseconds of clock64() on `device` (its peak
// clock rate; the SM clock may run slower, which only lengthens the time-out).
// Returns the error of the attribute query.
cudaError_t deviceCyclesForMs(int device, int64_t ms, uint64_t* cycles);

}  // namespace plait
