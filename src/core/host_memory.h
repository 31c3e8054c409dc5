// host_memory.h — the host memory behind ncclMemAlloc: pages that local
// peers can map, so collectives on them can skip the FIFO copies
// (core/direct.h).
//
// Each allocation is a memfd (memfd_create + ftruncate) mapped MAP_SHARED
// and recorded in a process-wide table with its descriptor and a generation
// number unique within the process. A peer process maps it by opening
// /proc/<pid>/fd/<fd>: no name in /dev/shm, nothing left behind when a
// process dies. Where memfd_create fails (no file descriptors left, an old
// kernel) the allocation falls back to anonymous shared memory that only
// this process can use (fd -1): ncclMemAlloc still succeeds, collectives on
// it just take the normal path.
//
// Communicators count their registrations per allocation: freeing an
// allocation that is still registered fails (NCCL requires
// ncclCommDeregister first), so no peer ever uses a mapping of memory the
// owner has handed back. Peers' mappings of a freed allocation keep its
// pages until they are dropped (a peer replaces a mapping when the same fd
// comes back with a new generation, and caps how many it keeps).
//
// Everything here is thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>

#include "plait/status.hpp"

namespace plait::host_memory {

// Allocates `bytes` (> 0; rounded up to whole pages) of zero-filled memory.
// kSystemError when even the anonymous fallback cannot be mapped.
Result<void*> allocate(size_t bytes);

// Unmaps and closes an allocation by its base pointer. kInvalidArgument when
// `base` is not the start of a live allocation, or when the allocation is
// still registered with a communicator (naming the count).
Status release(void* base);

struct Allocation {
  void* base = nullptr;
  size_t bytes = 0;         // whole pages
  int fd = -1;              // -1: not shareable with other processes
  uint32_t generation = 0;  // distinguishes allocations that reuse an fd number
};

// The allocation containing ptr, if any.
std::optional<Allocation> lookup(const void* ptr);
// The base of the live allocation with this fd and generation in this
// process, or null (for peers that are threads of this process); its size
// in *bytes where that is not null.
void* baseOf(int fd, uint32_t generation, size_t* bytes = nullptr);

// Maps `bytes` of `fd` (fd < 0: new anonymous memory) shared and read-write,
// at an address that differs from every recent mapping's by a varying
// offset rather than a multiple of a large power of two: buffers whose
// addresses agree in bits 12-27 make AMD's L1 way predictor (hashed linear
// address tags) thrash when a loop streams through them together, measured
// here as 5 GB/s instead of 35-60 GB/s for a direct AllReduce on 128 MiB
// buffers that the kernel had placed exactly 128 MiB apart. Mappings of 2 MiB
// and more stay 2 MiB-aligned (huge pages stay possible). MAP_FAILED on
// failure, errno set; unmap with munmap(p, bytes).
void* mapShared(int fd, size_t bytes);

// Registration counts (core/direct.cc). addRegistration returns false when
// `base` is not a live allocation; dropRegistration ignores unknown bases.
bool addRegistration(void* base);
void dropRegistration(void* base);

// A value that identifies this process among all processes of the host and
// changes across fork() (a child is another process even though it inherits
// this one's memory): ranks with equal identities can use each other's
// pointers.
uint64_t processIdentity();

}  // namespace plait::host_memory
