// device_memory.h — the device memory behind ncclMemAlloc in a process that
// can run CUDA (NCCL's semantics: memory of the calling thread's current
// device, which the program may use in its own kernels). core/host_memory.h
// keeps serving ncclMemAlloc everywhere else, and serves Plait's own host
// users (plait/memory.hpp) always.
//
// PLAIT_MEM_ALLOC chooses: "auto" (device memory when this library has a
// CUDA executor and the thread's current device exists, else host memory),
// "host", or "device" (an error where there is no device).
//
// Allocations are recorded so ncclMemFree can tell them from host memory and
// refuse a pointer it did not hand out (or one freed already), or one still
// registered with a communicator (NCCL requires ncclCommDeregister first, and
// a peer may map a registered buffer). Thread-safe.
#pragma once

#include <cstddef>

#include "plait/status.hpp"

namespace plait::device_memory {

// Whether ncclMemAlloc should hand out device memory now (PLAIT_MEM_ALLOC and
// the current device). kInvalidUsage when PLAIT_MEM_ALLOC=device cannot be
// honoured or the knob's value is unknown.
Result<bool> wanted();

// `bytes` (> 0) of device memory on the current device: CUDA virtual memory
// management (cuMem, with a POSIX fd a peer process can import and map, as
// NCCL with NCCL_CUMEM_ENABLE) where the driver has it and PLAIT_CUMEM_ENABLE
// (alias NCCL_CUMEM_ENABLE) is 1, its default; else cudaMalloc (said once at
// INFO). kCudaError naming the size, the call and its error when it fails.
Result<void*> allocate(size_t bytes);

// True when `ptr` is the start of a live allocation of this module.
bool owns(const void* ptr);

// Frees an allocation by its base pointer (kInvalidArgument when it is not a
// live one, or is still registered, naming the count).
Status release(void* ptr);

// The base of the live allocation holding all of [ptr, ptr + bytes), or null.
void* baseOf(const void* ptr, size_t bytes);
// Counts a registration of (part of) the allocation at `base`; false when
// there is none. dropRegistration undoes one.
bool addRegistration(void* base);
void dropRegistration(void* base);

}  // namespace plait::device_memory
