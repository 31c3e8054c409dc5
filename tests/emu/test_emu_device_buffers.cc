// Plait's C API in a process that runs the (emulated) CUDA runtime. Until
// the CUDA executor exists, a device buffer must be an ncclInvalidArgument
// naming it, never a CPU dereference (on a GPU machine: a crash); pinned and
// registered host memory keeps working. Communicators know their device as
// NCCL's do: the caller's current device, or devlist[i] for ncclCommInitAll.
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

TEST_CASE("ncclCommCuDevice: the creating thread's device; ncclCommInitAll follows devlist", "[emu]") {
  REQUIRE(cudaSetDevice(5) == cudaSuccess);
  ncclComm_t comm = soloComm();
  int dev = -1;
  CHECK(ncclCommCuDevice(comm, &dev) == ncclSuccess);
  CHECK(dev == 5);
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);

  ncclComm_t comms[4];
  const int devlist[4] = {3, 1, 2, 0};
  REQUIRE(ncclCommInitAll(comms, 4, devlist) == ncclSuccess);
  for (int i = 0; i < 4; ++i) {
    CHECK(ncclCommCuDevice(comms[i], &dev) == ncclSuccess);
    CHECK(dev == devlist[i]);
    CHECK(ncclCommDestroy(comms[i]) == ncclSuccess);
  }
  REQUIRE(ncclCommInitAll(comms, 3, nullptr) == ncclSuccess);  // the first 3 devices
  for (int i = 0; i < 3; ++i) {
    CHECK(ncclCommCuDevice(comms[i], &dev) == ncclSuccess);
    CHECK(dev == i);
    CHECK(ncclCommDestroy(comms[i]) == ncclSuccess);
  }
  const int bad[2] = {0, 99};
  CHECK(ncclCommInitAll(comms, 2, bad) == ncclInvalidArgument);
  CHECK(lastErrorSays("devlist[1] = 99 is not a CUDA device"));
  CHECK(cudaGetLastError() == cudaSuccess);
}
