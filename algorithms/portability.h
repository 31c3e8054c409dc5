// portability.h — what lets one piece of algorithm code compile for the host
// (g++) and the device (nvcc): function qualifiers, atomics with explicit
// memory order, and a pause hint. Schedules, primitives, protocols and
// reduction functors include only this (and types.h), never OS headers.
#pragma once

#include <cstddef>
#include <cstdint>

#if defined(__CUDACC__)
#define PLAIT_HOST_DEVICE __host__ __device__
#define PLAIT_DEVICE __device__
#define PLAIT_INLINE __forceinline__
#include <cuda/atomic>
#else
#define PLAIT_HOST_DEVICE
#define PLAIT_DEVICE
#define PLAIT_INLINE inline __attribute__((always_inline))
#include <atomic>
#endif

#if defined(__CUDA_ARCH__)
#define PLAIT_ON_DEVICE 1
#else
#define PLAIT_ON_DEVICE 0
#endif

namespace plait {

// Atomic access to plain words in shared memory (host) or global memory
// (device). The memory order is always explicit at the call site.
#if defined(__CUDACC__)
template <typename T>
using AtomicRef = cuda::atomic_ref<T, cuda::thread_scope_system>;
namespace mo {
constexpr auto relaxed = cuda::std::memory_order_relaxed;
constexpr auto acquire = cuda::std::memory_order_acquire;
constexpr auto release = cuda::std::memory_order_release;
constexpr auto acqRel = cuda::std::memory_order_acq_rel;
constexpr auto seqCst = cuda::std::memory_order_seq_cst;
}  // namespace mo
#else
template <typename T>
using AtomicRef = std::atomic_ref<T>;
namespace mo {
constexpr auto relaxed = std::memory_order_relaxed;
constexpr auto acquire = std::memory_order_acquire;
constexpr auto release = std::memory_order_release;
constexpr auto acqRel = std::memory_order_acq_rel;
constexpr auto seqCst = std::memory_order_seq_cst;
}  // namespace mo
#endif

// A hint to the core that this thread is spinning.
PLAIT_HOST_DEVICE PLAIT_INLINE void cpuPause() {
#if PLAIT_ON_DEVICE
  __nanosleep(32);
#elif defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

}  // namespace plait
