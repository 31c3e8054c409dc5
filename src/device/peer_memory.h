// peer_memory.h — a rank's device buffer opened by another process of the
// host: the owner describes the allocation holding the buffer (exportRange),
// a peer maps that allocation into its own address space (importRange) and
// its kernels load and store there. The base of the single-copy device paths
// and of the device API's windows (which place each LSA peer's memory at
// NCCL's flat layout: importRange's `at`).
//
// Two kinds of memory: CUDA VMM (cuMem, as ncclMemAlloc gives: a POSIX fd
// travels beside the description, by transport/fdpass) and cudaMalloc'd
// memory (a CUDA IPC handle inside the description; it cannot be placed).
// Ranks that are threads of one process need none of this: they use the
// owner's pointer. Runs on the emulator in CI; on GPUs, unverified.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/device_backend.h"
#include "plait/status.hpp"

namespace plait::device::peer_memory {

enum Kind : uint32_t { kVmm = 1, kIpc = 2 };

// Plain bytes, sent to the peer as they are (core/device_backend.h).
using Exported = DeviceRangeExport;
using Imported = DeviceMapping;

// Describes [ptr, ptr + size) of this process's device memory. For VMM
// memory *fd receives a new POSIX fd for it (the caller sends it and closes
// it), else -1. kInvalidArgument when the range is not inside one device
// allocation.
Result<Exported> exportRange(const void* ptr, size_t size, int* fd);

// Maps the allocation `e` describes into this process for its current
// device. VMM memory takes the peer's `fd` (not closed here) and goes at
// `at` when it is not null (granularity-aligned, inside address space the
// caller reserved), else anywhere; CUDA IPC memory takes no fd and cannot be
// placed (`at` must be null).
Result<Imported> importRange(const Exported& e, int fd, void* at);

// Unmaps what importRange mapped.
Status closeImported(const Imported& imported);

}  // namespace plait::device::peer_memory
