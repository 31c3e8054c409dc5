// lsa_kernels.h — host entry points of lsa_kernels.cu (device API kernels
// for the emulator's test of nccl_device.h's inline code).
#pragma once

#include <cuda_runtime_api.h>

#include "nccl.h"
#include "nccl_device.h"

namespace plait_device_api_test {

// Writes this rank's int64 send window in the kernel ((rank + 1) * 1000003
// + i * seed), then sums the LSA team's send windows into every member's
// `recv` window, each rank its share of the elements, with an LSA barrier
// sync (barrier index = block index) between the writes and the reads, and
// another at the end. Wrong sums mean a barrier let a block read early.
cudaError_t launchLsaAllReduce(ncclWindow_t send, ncclWindow_t recv, size_t count, int64_t seed,
                               const ncclDevComm& comm, int blocks, int threads, cudaStream_t stream);
// Writes what the pointer functions return for window w: local(offset),
// lsa(offset, lsaPeer), peer(offset, worldPeer), and the resource buffer
// `handle`'s local and LSA-peer addresses, into out[0..4].
cudaError_t launchPointers(ncclWindow_t w, size_t offset, int lsaPeer, int worldPeer, const ncclDevComm& comm,
                           ncclDevResourceHandle handle, void** out, cudaStream_t stream);

}  // namespace plait_device_api_test
