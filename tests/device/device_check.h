// device_check.h — what the device_compile_check sources share: the CHECK
// macros and their failure count, the list of types, a device buffer.
#pragma once

#include <cstddef>
#include <cstdio>

#include <cuda_runtime_api.h>

#include "nccl.h"

namespace plait::device_check {

inline int gFailures = 0;

#define CHECK(cond)                                                                 \
  do {                                                                              \
    if (!(cond)) {                                                                  \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
      ++::plait::device_check::gFailures;                                           \
    }                                                                               \
  } while (0)

// In a function returning void: a failed CUDA call counts and returns.
#define CHECK_CUDA(expr)                                                                            \
  do {                                                                                              \
    const cudaError_t err_ = (expr);                                                                \
    if (err_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(err_)); \
      ++::plait::device_check::gFailures;                                                           \
      return;                                                                                       \
    }                                                                                               \
  } while (0)

constexpr ncclDataType_t kAllTypes[] = {ncclInt8,    ncclUint8,    ncclInt32,      ncclUint32,
                                        ncclInt64,   ncclUint64,   ncclFloat16,    ncclFloat32,
                                        ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};

// n elements of T in device memory (plus 64 bytes of slack); ptr is null if
// the allocation failed.
template <class T>
struct DeviceBuffer {
  T* ptr = nullptr;
  explicit DeviceBuffer(size_t n) {
    if (cudaMalloc(&ptr, n * sizeof(T) + 64) != cudaSuccess) ptr = nullptr;
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// device_collectives_check.cc: AllGather, ReduceScatter, Broadcast, Reduce.
void runCollectiveHostChecks();  // always
void runCollectiveGpuChecks();   // only with a GPU

}  // namespace plait::device_check
