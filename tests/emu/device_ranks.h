// device_ranks.h — ranks as threads on emulated CUDA devices, for the
// device path's tests through the public API.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "nccl.h"

namespace plait_test {

// Runs nranks threads, rank r on CUDA device r (modulo the devices there are:
// on a one-GPU machine every rank shares it, with PLAIT_ALLOW_SHARED_DEVICE=1)
// with its own communicator and stream; body returns "" or what went wrong.
inline std::vector<std::string> runDeviceRanks(int nranks,
                                        const std::function<std::string(int, ncclComm_t, cudaStream_t)>& body) {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return {"ncclGetUniqueId failed"};
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) return {"no CUDA device"};
  std::vector<std::string> errors(nranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r)
    threads.emplace_back([&, r] {
      cudaStream_t stream = nullptr;
      ncclComm_t comm = nullptr;
      // Non-blocking: a blocking stream makes every thread's synchronous
      // cudaMemcpy (the legacy default stream) wait for this rank's kernel,
      // which on a device shared by thread ranks waits for the peer's kernel
      // that the peer's thread, stuck in that cudaMemcpy, has not launched
      // yet (seen on an H100; NCCL warns about the same).
      if (cudaSetDevice(r % devices) != cudaSuccess ||
          cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) {
        errors[r] = "CUDA setup failed";
        return;
      }
      if (ncclCommInitRank(&comm, nranks, id, r) != ncclSuccess) {
        errors[r] = std::string("init: ") + ncclGetLastError(nullptr);
        return;
      }
      errors[r] = body(r, comm, stream);
      ncclCommDestroy(comm);
      cudaStreamDestroy(stream);
    });
  for (auto& t : threads) t.join();
  std::vector<std::string> failed;
  for (int r = 0; r < nranks; ++r)
    if (!errors[r].empty()) failed.push_back("rank " + std::to_string(r) + ": " + errors[r]);
  return failed;
}

template <class T>
T* deviceAlloc(size_t count) {
  void* p = nullptr;
  return cudaMalloc(&p, count * sizeof(T)) == cudaSuccess ? static_cast<T*>(p) : nullptr;
}

inline std::string mismatch(const char* what, size_t i, double got, double want) {
  return std::string(what) + " element " + std::to_string(i) + " is " + std::to_string(got) + ", expected " +
         std::to_string(want);
}

}  // namespace plait_test
