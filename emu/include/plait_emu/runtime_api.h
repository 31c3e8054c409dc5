// plait_emu/runtime_api.h — what the device emulator's runtime library
// (libplait_cudart_emu) offers device code beyond the CUDA runtime API:
// kernel registration and the builtins plait_emu/device.h maps CUDA's names
// onto. Included by the runtime itself, which must not see those macros.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <tuple>
#include <type_traits>
#include <utility>

namespace plait_emu {

// Turns cudaLaunchKernel's argument array (args[i] points at argument i)
// into a call of `kernel` with copies of the arguments, taken at launch
// time as CUDA does (the caller's array may be gone when the kernel runs).
using KernelBinder = std::function<void()> (*)(const void* kernel, void** args);

// Records how to bind `kernel` (idempotent) and returns it as the handle
// cudaLaunchKernel and cudaFuncGetAttributes take. `signature` names its
// parameter types (kernelsLaunchedTaking). Thread-safe.
const void* registerKernel(const void* kernel, KernelBinder bind, const char* signature);

template <class... A, size_t... I>
std::function<void()> bindArgs(void (*kernel)(A...), void** args, std::index_sequence<I...>) {
  std::tuple<std::decay_t<A>...> copies(*static_cast<std::decay_t<A>*>(args[I])...);
  return [kernel, copies] { std::apply(kernel, copies); };  // each CUDA thread gets its own copies
}

template <class... A>
std::function<void()> bindKernel(const void* kernel, void** args) {
  return bindArgs(reinterpret_cast<void (*)(A...)>(const_cast<void*>(kernel)), args, std::index_sequence_for<A...>{});
}

template <class... A>
const void* kernelHandle(void (*kernel)(A...)) {
  return registerKernel(reinterpret_cast<const void*>(kernel), &bindKernel<A...>, __PRETTY_FUNCTION__);
}

// Kernels cudaLaunchKernel accepted in this process so far (tests use it to
// tell a kernel launch from work done on the host). Thread-safe.
uint64_t kernelsLaunched();
// Of those, the kernels whose parameter list names `typeName` (as the
// compiler spells it: "plait::SymmetricWork"), so that a test can tell
// which kind of kernel ran. Thread-safe.
uint64_t kernelsLaunchedTaking(const char* typeName);

// The current CUDA thread's coordinates (valid inside a kernel only).
const uint3& currentThreadIdx();
const uint3& currentBlockIdx();
const dim3& currentBlockDim();
const dim3& currentGridDim();

// __syncthreads at `site` ("file:line").
void syncThreads(const char* site);
long long clockNs();
void sleepNs(unsigned ns);

}  // namespace plait_emu

