// plait/memory.hpp — host memory that local peers can map, whatever device
// the process has.
//
// ncclMemAlloc follows NCCL: on a machine where the calling thread has a
// current CUDA device it returns device memory (PLAIT_MEM_ALLOC=host turns
// that off). Programs that run Plait's collectives on host buffers and want
// the single-copy (direct) path for them ask for host memory explicitly:
//
//   plait::Result<void*> buf = plait::hostMemAlloc(bytes);
//   ... ncclCommRegister(comm, *buf, bytes, &handle) ...
//   ncclMemFree(*buf);   // ncclMemFree frees both kinds
//
// Zero-filled, page-rounded memfd memory (see ncclMemAlloc's host case).
#pragma once

#include <cstddef>

#include "plait/status.hpp"

namespace plait {

// `bytes` (> 0) of host memory local peers can map; free with ncclMemFree.
Result<void*> hostMemAlloc(size_t bytes);

}  // namespace plait
