// oob.h — the out-of-band exchange that transports use to set themselves up.
//
// Transports sit below the core, so they do not know the bootstrap; the core
// hands them this small interface instead. Calls are collective over the
// communicator and block until all ranks took part or the deadline passed.
#pragma once

#include <cstddef>

#include "base/clock.h"
#include "plait/status.hpp"

namespace plait {

class OobExchange {
 public:
  virtual ~OobExchange() = default;
  virtual int rank() const = 0;
  virtual int nranks() const = 0;
  // data holds nranks slots of bytesPerRank; slot[rank] is ours on entry.
  virtual Status allGather(void* data, size_t bytesPerRank, Deadline deadline) = 0;
  virtual Status barrier(Deadline deadline) = 0;
};

}  // namespace plait
