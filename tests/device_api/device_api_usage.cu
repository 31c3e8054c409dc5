// device_api_usage.cu — kernels that use nccl_device.h the way nccl-tests'
// device implementations do (LSA AllReduce and AlltoAll, the multimem and
// GIN variants), compiled by nvcc against Plait's headers only: a build
// check that the device API compiles (tests/device_api/CMakeLists.txt).
// Nothing launches them here.
#include "nccl.h"
#include "nccl_device.h"

__global__ void lsaAllReduceSum(ncclWindow_t sendwin, size_t sendoffset, ncclWindow_t recvwin, size_t recvoffset,
                                size_t count, ncclDevComm devComm) {
  ncclLsaBarrierSession<ncclCoopCta> bar{ncclCoopCta(), devComm, ncclTeamLsa(devComm), devComm.lsaBarrier,
                                         blockIdx.x};
  bar.sync(ncclCoopCta(), cuda::memory_order_acquire);
  const int nPeers = ncclTeamLsa(devComm).nRanks;
  for (size_t i = threadIdx.x + blockIdx.x * blockDim.x; i < count; i += blockDim.x * gridDim.x) {
    float sum = 0;
    for (int peer = 0; peer < nPeers; ++peer)
      sum += static_cast<float*>(ncclGetLsaPointer(sendwin, sendoffset, peer))[i];
    for (int peer = 0; peer < nPeers; ++peer) static_cast<float*>(ncclGetLsaPointer(recvwin, recvoffset, peer))[i] = sum;
  }
  bar.sync(ncclCoopCta(), cuda::memory_order_release);
}

__global__ void multimemBarrier(ncclWindow_t win, size_t offset, ncclDevComm devComm) {
  ncclLsaBarrierSession<ncclCoopCta> bar{ncclCoopCta(), devComm, ncclTeamTagLsa(), blockIdx.x, true};
  bar.sync(ncclCoopCta(), cuda::memory_order_acquire);
  float* p = static_cast<float*>(ncclGetLsaMultimemPointer(win, offset, devComm));
  if (threadIdx.x == 0) p[0] = 1;
  bar.sync(ncclCoopCta(), cuda::memory_order_release);
}

__global__ void ginAlltoAll(ncclWindow_t sendwin, size_t sendoffset, ncclWindow_t recvwin, size_t recvoffset,
                            size_t bytes, ncclDevComm devComm) {
  ncclGin gin{devComm, 0};
  const uint64_t signal = gin.readSignal(blockIdx.x);
  ncclBarrierSession<ncclCoopCta> bar{ncclCoopCta(), ncclTeamTagWorld(), gin, blockIdx.x};
  bar.sync(ncclCoopCta(), cuda::memory_order_acquire, ncclGinFenceLevel::Relaxed);
  for (int r = threadIdx.x; r < devComm.nRanks; r += blockDim.x)
    gin.put(ncclTeamWorld(devComm), r, recvwin, recvoffset + devComm.rank * bytes, sendwin, sendoffset + r * bytes,
            bytes, ncclGin_SignalInc{blockIdx.x});
  gin.waitSignal(ncclCoopCta(), blockIdx.x, signal + devComm.nRanks);
  gin.flush(ncclCoopCta());
  char* local = static_cast<char*>(ncclGetLocalPointer(recvwin, recvoffset));
  if (threadIdx.x == 0) local[0] = static_cast<char*>(ncclGetPeerPointer(sendwin, sendoffset, devComm.rank))[0];
  bar.sync(ncclCoopCta(), cuda::memory_order_release, ncclGinFenceLevel::Relaxed);
}
