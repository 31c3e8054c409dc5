// socket_dmabuf.h — the socket transport's stand-in for a NIC that reads and
// writes GPU memory (GPUDirect RDMA), for testing the device path's GPU step
// buffers without RDMA hardware. With PLAIT_NET_SOCKET_DMABUF=1 the socket
// plugin reports dmabuf support and registers a dmabuf by mapping it: its
// sends and receives on that registration then move bytes through the
// mapping, never through the device address the caller passes (the way a
// NIC reaches the pages, not the GPU's virtual address). A real dmabuf of
// GPU memory cannot be mapped by the CPU; the emulator's (a memfd) can.
#pragma once

#include <cstddef>
#include <cstdint>

#include "plait/status.hpp"

namespace plait::socket_dmabuf {

// PLAIT_NET_SOCKET_DMABUF=1.
bool enabled();
// Maps bytes [offset, offset + size) of dmabuf `fd` for the device range
// starting at `data`; *mhandle gets the registration (freed by deregister()).
Status registerDmaBuf(void* data, size_t size, uint64_t offset, int fd, void** mhandle);
void deregister(void* mhandle);
// Where [data, data + bytes) of the registered device range is mapped here,
// or null when it is not inside that range.
char* translate(void* mhandle, void* data, size_t bytes);

}  // namespace plait::socket_dmabuf
