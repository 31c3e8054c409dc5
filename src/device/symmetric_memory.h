// symmetric_memory.h — core/device_backend.h's SymmetricMemory on CUDA:
// address space and VMM memory (vmm.h), peers' memory (peer_memory.h), and
// the small structures kernels read, all on the communicator's device.
#pragma once

#include <memory>

#include "core/device_backend.h"

namespace plait::device {

std::shared_ptr<SymmetricMemory> makeSymmetricMemory(int cudaDev);

}  // namespace plait::device
