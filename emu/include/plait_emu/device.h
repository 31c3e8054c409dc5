// plait_emu/device.h — what device code sees when a .cu file is compiled as
// C++ by the host compiler for the device emulator (cmake
// -DPLAIT_DEVICE_EMULATION=ON force-includes this header).
//
// Execution model (emu/runtime/block.cc): a kernel's blocks run at the same
// time, one OS thread each; the CUDA threads of a block are fibers on that OS
// thread, switching only at __syncthreads. So:
//   - __shared__ variables are `static thread_local`: one per block (per OS
//     thread), shared by the block's fibers;
//   - threadIdx / blockIdx / blockDim / gridDim read the current fiber's;
//   - __syncthreads checks that every live thread of the block waits at the
//     same barrier (file:line) and aborts the process naming both sites if
//     not; it is also a full fence for the block (one OS thread);
//   - atomics are the host's (portability.h's std::atomic_ref path), fences
//     are seq_cst fences, clock64() counts nanoseconds (the emulated clock
//     rate is 1 GHz), __nanosleep sleeps (or yields for short waits).
//
// What emulation cannot check, and stays unverified on hardware: memory
// scopes (a system-scope and a device-scope atomic are the same thing here),
// L1 incoherence under .cg loads (__ldcg is a plain load), ordering of
// PCIe / host-mapped memory, warp-synchronous code (there are no warps: a
// fiber runs until its next barrier), and anything about performance.
#pragma once

#include <memory>  // before __noinline__ is defined: libstdc++ spells the attribute that way

#include "plait_emu/runtime_api.h"

// The host compiler sees CUDA's execution-space qualifiers as attributes it
// does not know; here they mean nothing, or what the model above says.
#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __constant__
#undef __grid_constant__
#undef __launch_bounds__
#undef __forceinline__
#undef __noinline__
#define __global__
#define __device__
#define __host__
#define __shared__ static thread_local
#define __constant__ static
#define __grid_constant__
#define __launch_bounds__(...)
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))

// Headers with device code for both compilers (Plait's nccl_device.h) test
// this to compile their device parts under emulation.
#define PLAIT_EMU_DEVICE_CODE 1

#define threadIdx (::plait_emu::currentThreadIdx())
#define blockIdx (::plait_emu::currentBlockIdx())
#define blockDim (::plait_emu::currentBlockDim())
#define gridDim (::plait_emu::currentGridDim())

#define PLAIT_EMU_STR2(x) #x
#define PLAIT_EMU_STR(x) PLAIT_EMU_STR2(x)
#define __syncthreads() ::plait_emu::syncThreads(__FILE__ ":" PLAIT_EMU_STR(__LINE__))

inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_system() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_signal_fence(std::memory_order_seq_cst); }
inline long long clock64() { return ::plait_emu::clockNs(); }
inline void __nanosleep(unsigned ns) { ::plait_emu::sleepNs(ns); }
// Stops the kernel for good: on a GPU the context is lost; here the process
// (after the kernel's own message, if it printed one).
[[noreturn]] inline void __trap() { __builtin_trap(); }

// A load that bypasses L1 on a GPU; a plain load here.
template <class T>
inline T __ldcg(const T* p) {
  T v;
  __builtin_memcpy(&v, p, sizeof(T));
  return v;
}
