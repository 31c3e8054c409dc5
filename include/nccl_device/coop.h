/* nccl_device/coop.h — cooperative groups of threads that act together in
 * device API calls: the whole thread block (ncclCoopCta) or one thread
 * (ncclCoopThread). Each has thread_rank(), size() and sync(). */
#ifndef PLAIT_NCCL_DEVICE_COOP_H_
#define PLAIT_NCCL_DEVICE_COOP_H_

#include "core.h"

#if defined(PLAIT_NCCL_DEVICE_CODE)
struct ncclCoopCta {
  PLAIT_NCCL_DEVICE_FN int thread_rank() const {
    return static_cast<int>(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
  }
  PLAIT_NCCL_DEVICE_FN int size() const { return static_cast<int>(blockDim.x * blockDim.y * blockDim.z); }
  PLAIT_NCCL_DEVICE_FN int num_threads() const { return size(); }
  PLAIT_NCCL_DEVICE_FN void sync() { __syncthreads(); }
};

struct ncclCoopThread {
  PLAIT_NCCL_DEVICE_FN int thread_rank() const { return 0; }
  PLAIT_NCCL_DEVICE_FN int size() const { return 1; }
  PLAIT_NCCL_DEVICE_FN int num_threads() const { return 1; }
  PLAIT_NCCL_DEVICE_FN void sync() {}
};
#endif

#endif
