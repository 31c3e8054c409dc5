// Plait's collectives given CUDA device buffers, in a process that runs the
// (emulated) CUDA runtime. Until the CUDA executor exists, a device buffer
// must be an ncclInvalidArgument naming it, never a CPU dereference (on a GPU
// machine: a crash); pinned and registered host memory keeps working.
#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "nccl.h"

namespace {

ncclComm_t soloComm() {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t comm = nullptr;
  REQUIRE(ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess);
  return comm;
}

bool lastErrorSays(const char* text) { return std::strstr(ncclGetLastError(nullptr), text) != nullptr; }

}  // namespace

TEST_CASE("Device buffers are refused by name; host, pinned and registered memory work", "[emu]") {
  ncclComm_t comm = soloComm();
  float* dev = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&dev), 1024 * sizeof(float)) == cudaSuccess);
  std::vector<float> host(1024, 2.0f);

  CHECK(ncclAllReduce(dev, host.data(), 1024, ncclFloat, ncclSum, comm, nullptr) == ncclInvalidArgument);
  CHECK(lastErrorSays("sendbuff is CUDA device memory"));
  CHECK(ncclAllReduce(host.data(), dev, 1024, ncclFloat, ncclSum, comm, nullptr) == ncclInvalidArgument);
  CHECK(lastErrorSays("recvbuff is CUDA device memory"));
  CHECK(ncclSend(dev + 10, 5, ncclFloat, 0, comm, nullptr) == ncclInvalidArgument);
  CHECK(lastErrorSays("CUDA device memory"));
  CHECK(cudaGetLastError() == cudaSuccess);  // the probe leaves the runtime's error alone

  std::vector<float> out(1024, 0.0f);
  CHECK(ncclAllReduce(host.data(), out.data(), 1024, ncclFloat, ncclSum, comm, nullptr) == ncclSuccess);
  CHECK(out[1023] == 2.0f);
  float* pinned = nullptr;
  REQUIRE(cudaHostAlloc(reinterpret_cast<void**>(&pinned), 1024 * sizeof(float), cudaHostAllocDefault) == cudaSuccess);
  REQUIRE(cudaHostRegister(out.data(), out.size() * sizeof(float), cudaHostRegisterDefault) == cudaSuccess);
  CHECK(ncclAllReduce(host.data(), pinned, 1024, ncclFloat, ncclSum, comm, nullptr) == ncclSuccess);
  CHECK(pinned[7] == 2.0f);
  CHECK(ncclAllReduce(pinned, out.data(), 1024, ncclFloat, ncclSum, comm, nullptr) == ncclSuccess);
  CHECK(out[7] == 2.0f);
  CHECK(cudaHostUnregister(out.data()) == cudaSuccess);
  CHECK(cudaFreeHost(pinned) == cudaSuccess);
  CHECK(cudaFree(dev) == cudaSuccess);
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
}
