// device_check.h — what the device_compile_check sources share: the CHECK
// macros and their failure count, the list of types, a device buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

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

// Whether a loopback case of `count` elements runs: PLAIT_DEVICE_CHECK_MAX_COUNT
// skips larger ones (the ThreadSanitizer run of the emulator looks for races
// in the protocol, which small counts exercise; large ones only cost time).
// Says once that it skips.
inline bool countAllowed(size_t count) {
  static const size_t maxCount = [] {
    const char* text = std::getenv("PLAIT_DEVICE_CHECK_MAX_COUNT");
    return text ? static_cast<size_t>(std::strtoull(text, nullptr, 10)) : SIZE_MAX;
  }();
  static bool said = false;
  if (count <= maxCount) return true;
  if (!said) std::printf("loopback cases above %zu elements skipped (PLAIT_DEVICE_CHECK_MAX_COUNT)\n", maxCount);
  said = true;
  return false;
}

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
