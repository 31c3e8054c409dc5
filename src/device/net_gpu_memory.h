// net_gpu_memory.h — GPU memory for the device path's network step buffers
// (GPUDirect RDMA): the CUDA side of transport/net/net_transport.h's
// NetGpuMemory, registered with the core (core/device_backend.h).
#pragma once

#include <memory>
#include <string>

#include "transport/net/net_transport.h"

namespace plait::device {

// On `cudaDev`, or null with *why set when the device or driver cannot
// export dmabufs.
std::shared_ptr<NetGpuMemory> makeNetGpuMemory(int cudaDev, std::string* why);

}  // namespace plait::device
