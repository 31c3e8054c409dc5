// scoped_device.h — makes a communicator's CUDA device current for a scope,
// as NCCL does around its calls, and restores the caller's.
#pragma once

#include <cuda_runtime_api.h>

namespace plait {

class ScopedDevice {
 public:
  // cudaSetDevice even when the thread's device is already `device`: a
  // thread that never used the device has none of its context current
  // (cudaGetDevice says 0 all the same), and the driver's calls made in the
  // scope (cuMem*) need it: CUDA_ERROR_INVALID_CONTEXT otherwise.
  explicit ScopedDevice(int device) {
    if (cudaGetDevice(&saved_) != cudaSuccess) {
      (void)cudaGetLastError();
      saved_ = -1;
    }
    if (cudaSetDevice(device) != cudaSuccess) (void)cudaGetLastError();
  }
  ~ScopedDevice() {
    int now = -1;
    if (saved_ >= 0 && cudaGetDevice(&now) == cudaSuccess && now != saved_) (void)cudaSetDevice(saved_);
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

 private:
  int saved_ = -1;
};

}  // namespace plait
