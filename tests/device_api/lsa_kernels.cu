// lsa_kernels.cu — kernels written against nccl_device.h, as a user of the
// device API writes them (nccl-tests' LSA AllReduce in particular); compiled
// as emulated device code for test_device_api_lsa and _windows, and by nvcc
// for test_device_api_windows_gpu (scripts/gpu_check.sh).
#include <cuda_runtime.h>

#include "lsa_kernels.h"

namespace plait_device_api_test {
namespace {

// Element i of rank r's send window in launch `seed`.
__device__ int64_t sendValue(int rank, size_t i, int64_t seed) {
  return (rank + 1) * 1000003LL + static_cast<int64_t>(i) * seed;
}

// Block b of every rank owns the elements i with (i / blockDim) % gridDim == b:
// it writes its rank's send values for them, syncs barrier b with the peers'
// block b, reduces its rank's share of them (every n-th round) from every
// peer's window into every peer's receive window, and syncs again before
// anyone may overwrite a send window.
__global__ void lsaAllReduce(ncclWindow_t sendwin, ncclWindow_t recvwin, size_t count, int64_t seed,
                             ncclDevComm devComm) {
  ncclLsaBarrierSession<ncclCoopCta> bar{ncclCoopCta(), devComm, ncclTeamLsa(devComm), devComm.lsaBarrier,
                                         blockIdx.x};
  const int n = ncclTeamLsa(devComm).nRanks;
  const size_t span = static_cast<size_t>(gridDim.x) * blockDim.x;
  const size_t mine = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  auto* local = static_cast<int64_t*>(ncclGetLocalPointer(sendwin, 0));
  for (size_t i = mine; i < count; i += span) local[i] = sendValue(devComm.rank, i, seed);
  bar.sync(ncclCoopCta(), cuda::memory_order_acquire);
  for (size_t i = devComm.lsaRank * span + mine; i < count; i += n * span) {
    int64_t sum = 0;
    for (int peer = 0; peer < n; ++peer) sum += static_cast<const int64_t*>(ncclGetLsaPointer(sendwin, 0, peer))[i];
    for (int peer = 0; peer < n; ++peer) static_cast<int64_t*>(ncclGetLsaPointer(recvwin, 0, peer))[i] = sum;
  }
  bar.sync(ncclCoopCta(), cuda::memory_order_release);
}

__global__ void pointers(ncclWindow_t w, size_t offset, int lsaPeer, int worldPeer, ncclDevComm devComm,
                         ncclDevResourceHandle handle, void** out) {
  out[0] = ncclGetLocalPointer(w, offset);
  out[1] = ncclGetLsaPointer(w, offset, lsaPeer);
  out[2] = ncclGetPeerPointer(w, offset, worldPeer);
  out[3] = ncclGetResourceBufferLocalPointer(devComm, handle);
  out[4] = ncclGetResourceBufferLsaPointer(devComm, handle, lsaPeer);
}

// The launch handle of a kernel: the function itself under nvcc, the
// emulator's registered handle otherwise.
template <class Kernel>
const void* handleOf(Kernel* kernel) {
#if defined(PLAIT_EMU_DEVICE_CODE)
  return ::plait_emu::kernelHandle(kernel);
#else
  return reinterpret_cast<const void*>(kernel);
#endif
}

}  // namespace

cudaError_t launchLsaAllReduce(ncclWindow_t send, ncclWindow_t recv, size_t count, int64_t seed,
                               const ncclDevComm& comm, int blocks, int threads, cudaStream_t stream) {
  ncclDevComm dc = comm;
  void* args[] = {&send, &recv, &count, &seed, &dc};
  return cudaLaunchKernel(handleOf(&lsaAllReduce), dim3(blocks), dim3(threads), args, 0, stream);
}

cudaError_t launchPointers(ncclWindow_t w, size_t offset, int lsaPeer, int worldPeer, const ncclDevComm& comm,
                           ncclDevResourceHandle handle, void** out, cudaStream_t stream) {
  ncclDevComm dc = comm;
  void* args[] = {&w, &offset, &lsaPeer, &worldPeer, &dc, &handle, &out};
  return cudaLaunchKernel(handleOf(&pointers), dim3(1), dim3(1), args, 0, stream);
}

}  // namespace plait_device_api_test
