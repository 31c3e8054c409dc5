// vmm.h — CUDA virtual memory management (the driver's cuMem calls) behind
// ncclMemAlloc: device memory created with a POSIX file-descriptor handle, so
// a peer process can import it and map it at an address of its choosing (the
// device API's windows place every LSA peer's memory at fixed offsets of one
// range, which legacy CUDA IPC cannot do). NCCL allocates the same way when
// NCCL_CUMEM_ENABLE is on (its default).
//
// The driver's functions are fetched once through the runtime
// (cudaGetDriverEntryPointByVersion), so libnccl still needs no libcuda at
// load time. Thread-safe. Runs on the emulator (emu/runtime/vmm.cc) in CI;
// on a GPU, unverified (perf/device/vmm_probe.c is the hardware check).
#pragma once

#include <cstddef>
#include <string>

namespace plait::device::vmm {

// The values are cuda_probe.h's codes (RuntimeEntryPoints::vmmAllocate).
enum class Outcome { kOk = 0, kUnavailable = 1, kFailed = 2 };

// kOk when the driver has VMM with POSIX fd handles for `device`; else
// kUnavailable (or kFailed when the query itself failed), *why naming it.
Outcome supported(int device, std::string* why);

// `bytes` (> 0, rounded up to the allocation granularity) of memory on the
// calling thread's current device, mapped read-write for it, with a
// shareable POSIX fd. kUnavailable (the caller falls back to cudaMalloc) when
// the driver lacks VMM or POSIX handles for this device; kFailed when an
// allocation that should work did not. *why names the call and its error.
Outcome allocate(void** ptr, size_t bytes, std::string* why);

// Unmaps and releases an allocation of allocate() by its base. kFailed (and
// *why) when ptr is not one.
Outcome release(void* ptr, std::string* why);

}  // namespace plait::device::vmm
