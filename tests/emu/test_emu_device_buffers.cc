// Plait's C API in a process that runs the (emulated) CUDA runtime: where an
// operation runs is decided by its buffers. Device buffers go to the CUDA
// executor on a CUDA stream; a call mixing host and device buffers, device
// buffers of another device than the communicator's, host buffers on a CUDA
// stream and device buffers on a Plait host stream are ncclInvalidArgument
// naming what is wrong, never a CPU dereference (on a GPU machine: a crash);
// pinned and registered host memory stay on the host executor.
// Communicators know their device as NCCL's do: the caller's current device,
// or devlist[i] for ncclCommInitAll.
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "nccl.h"
#include "plait/memory.hpp"
#include "plait/stream.hpp"
#include "scoped_env.h"

namespace {

ncclComm_t soloComm() {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t comm = nullptr;
  REQUIRE(ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess);
  return comm;
}

bool lastErrorSays(const char* text) {
  const bool found = std::strstr(ncclGetLastError(nullptr), text) != nullptr;
  if (!found) UNSCOPED_INFO("last error: " << ncclGetLastError(nullptr));
  return found;
}

}  // namespace

TEST_CASE("Mixed, foreign-device and wrongly-streamed buffers are refused by name", "[emu]") {
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  ncclComm_t comm = soloComm();
  float* dev = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&dev), 1024 * sizeof(float)) == cudaSuccess);
  std::vector<float> host(1024, 2.0f);

  CHECK(ncclAllReduce(dev, host.data(), 1024, ncclFloat, ncclSum, comm, nullptr) == ncclInvalidArgument);
  CHECK(lastErrorSays("sendbuff is CUDA device memory but recvbuff is host memory"));
  CHECK(ncclAllReduce(host.data(), dev, 1024, ncclFloat, ncclSum, comm, nullptr) == ncclInvalidArgument);
  CHECK(lastErrorSays("recvbuff is CUDA device memory but sendbuff is host memory"));
  CHECK(cudaGetLastError() == cudaSuccess);  // the probe leaves the runtime's error alone

  // Device memory of another device than the communicator's.
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  float* other = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&other), 64 * sizeof(float)) == cudaSuccess);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  CHECK(ncclAllReduce(dev, other, 64, ncclFloat, ncclSum, comm, nullptr) == ncclInvalidArgument);
  CHECK(lastErrorSays("recvbuff is memory of CUDA device 1 but the communicator belongs to device 0"));

  // Streams of the wrong kind.
  cudaStream_t cs = nullptr;
  REQUIRE(cudaStreamCreate(&cs) == cudaSuccess);
  CHECK(ncclAllReduce(host.data(), host.data(), 1024, ncclFloat, ncclSum, comm, cs) == ncclInvalidArgument);
  CHECK(lastErrorSays("sendbuff is host memory but stream is not a Plait host stream"));
  {
    plait::HostStream hs;
    CHECK(ncclAllReduce(dev, dev, 1024, ncclFloat, ncclSum, comm, hs.handle()) == ncclInvalidArgument);
    CHECK(lastErrorSays("sendbuff is CUDA device memory but stream is a Plait host stream"));
  }
  // A send to this rank itself with no matching receive is refused (it could never complete).
  CHECK(ncclSend(dev + 10, 5, ncclFloat, 0, comm, cs) == ncclInvalidUsage);
  CHECK(lastErrorSays("sends 1 message(s) to this rank itself but receives 0 from itself"));

  // Device buffers on a CUDA stream run (one rank: the kernel's copy).
  std::vector<float> back(1024, 0.0f);
  REQUIRE(cudaMemcpy(dev, host.data(), 1024 * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  float* devOut = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&devOut), 1024 * sizeof(float)) == cudaSuccess);
  CHECK(ncclAllReduce(dev, devOut, 1024, ncclFloat, ncclAvg, comm, cs) == ncclSuccess);
  REQUIRE(cudaMemcpyAsync(back.data(), devOut, 1024 * sizeof(float), cudaMemcpyDeviceToHost, cs) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(cs) == cudaSuccess);
  CHECK(back[0] == 2.0f);
  CHECK(back[1023] == 2.0f);

  // Host, pinned and registered memory: the host executor.
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
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
  CHECK(cudaStreamDestroy(cs) == cudaSuccess);
  CHECK(cudaFree(dev) == cudaSuccess);
  CHECK(cudaFree(devOut) == cudaSuccess);
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  CHECK(cudaFree(other) == cudaSuccess);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
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

// As NCCL: ncclMemAlloc gives memory of the calling thread's current device,
// which collectives (and the program's own kernels) use as device memory;
// plait::hostMemAlloc still gives host memory; ncclMemFree frees both and
// refuses what it did not hand out and what is still registered.
TEST_CASE("ncclMemAlloc returns device memory of the current device", "[emu]") {
  REQUIRE(cudaSetDevice(2) == cudaSuccess);
  ncclComm_t comm = soloComm();
  const size_t n = 4099;
  void* buf = nullptr;
  REQUIRE(ncclMemAlloc(&buf, n * sizeof(float)) == ncclSuccess);
  cudaPointerAttributes attr{};
  REQUIRE(cudaPointerGetAttributes(&attr, buf) == cudaSuccess);
  CHECK(attr.type == cudaMemoryTypeDevice);
  CHECK(attr.device == 2);

  std::vector<float> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<float>(i % 97);
  REQUIRE(cudaMemcpy(buf, host.data(), n * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
  void* handle = nullptr;  // registering device memory is accepted (and changes nothing for the kernels)
  CHECK(ncclCommRegister(comm, buf, n * sizeof(float), &handle) == ncclSuccess);
  CHECK(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm, stream) == ncclSuccess);
  CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
  // Registered (also by a range inside it): ncclMemFree refuses until every
  // registration is gone, as for host memory.
  void* inner = nullptr;
  CHECK(ncclCommRegister(comm, static_cast<char*>(buf) + 256, 1024, &inner) == ncclSuccess);
  CHECK(ncclMemFree(buf) == ncclInvalidArgument);
  CHECK(lastErrorSays("still registered with a communicator (2 registration(s))"));
  CHECK(ncclCommDeregister(comm, handle) == ncclSuccess);
  CHECK(ncclMemFree(buf) == ncclInvalidArgument);
  CHECK(lastErrorSays("(1 registration(s))"));
  CHECK(ncclCommDeregister(comm, inner) == ncclSuccess);
  std::vector<float> out(n, -1.0f);
  REQUIRE(cudaMemcpy(out.data(), buf, n * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  CHECK(out == host);  // one rank: the sum is the input

  void* hostBuf = nullptr;
  plait::Result<void*> h = plait::hostMemAlloc(4096);
  REQUIRE(h.isOk());
  hostBuf = *h;
  REQUIRE(cudaPointerGetAttributes(&attr, hostBuf) == cudaSuccess);
  CHECK(attr.type != cudaMemoryTypeDevice);
  static_cast<char*>(hostBuf)[4095] = 1;  // host-writable
  CHECK(ncclMemFree(hostBuf) == ncclSuccess);

  CHECK(ncclMemFree(static_cast<char*>(buf) + 64) == ncclInvalidArgument);  // not a base
  CHECK(lastErrorSays("ptr points inside a device allocation of ncclMemAlloc, not at its start"));
  CHECK(ncclMemFree(buf) == ncclSuccess);
  CHECK(ncclMemFree(buf) == ncclInvalidArgument);  // twice
  CHECK(cudaStreamDestroy(stream) == cudaSuccess);
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
}

// ncclMemAlloc's device memory is CUDA VMM memory (cuMem) with a POSIX fd
// handle, as NCCL's with NCCL_CUMEM_ENABLE: the driver finds its allocation
// handle, and another process that imports the exported fd and maps it sees
// (and writes) the same bytes. NCCL_CUMEM_ENABLE=0 gives cudaMalloc memory,
// which has no such handle. Collectives and ncclMemFree work on both.
TEST_CASE("ncclMemAlloc's device memory is cuMem memory a peer process can map", "[emu][process]") {
  REQUIRE(cudaSetDevice(1) == cudaSuccess);
  ncclComm_t comm = soloComm();
  const size_t n = 3 * 1024 * 1024 + 5;  // not a multiple of the 2 MiB granularity
  void* buf = nullptr;
  REQUIRE(ncclMemAlloc(&buf, n * sizeof(int)) == ncclSuccess);
  CUmemGenericAllocationHandle handle = 0;
  REQUIRE(cuMemRetainAllocationHandle(&handle, buf) == CUDA_SUCCESS);
  CUdeviceptr base = 0;
  size_t mapped = 0;
  REQUIRE(cuMemGetAddressRange(&base, &mapped, reinterpret_cast<CUdeviceptr>(buf) + 4096) == CUDA_SUCCESS);
  CHECK(base == reinterpret_cast<CUdeviceptr>(buf));
  CHECK(mapped == size_t(14) << 20);  // rounded up to the granularity
  cudaPointerAttributes attr{};
  REQUIRE(cudaPointerGetAttributes(&attr, buf) == cudaSuccess);
  CHECK(attr.type == cudaMemoryTypeDevice);
  CHECK(attr.device == 1);

  std::vector<int> host(n);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<int>(i * 7 + 1);
  REQUIRE(cudaMemcpy(buf, host.data(), n * sizeof(int), cudaMemcpyHostToDevice) == cudaSuccess);
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
  CHECK(ncclAllReduce(buf, buf, n, ncclInt32, ncclSum, comm, stream) == ncclSuccess);
  CHECK(cudaStreamSynchronize(stream) == cudaSuccess);

  int fd = -1;
  REQUIRE(cuMemExportToShareableHandle(&fd, handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) == CUDA_SUCCESS);
  CHECK(cuMemRelease(handle) == CUDA_SUCCESS);
  // The peer: imports, maps at its own address, checks every element and
  // negates it. Exit code 0 only when all of that worked.
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    CUmemGenericAllocationHandle imported = 0;
    CUdeviceptr at = 0;
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = 1;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    std::vector<int> seen(n);
    if (cuMemImportFromShareableHandle(&imported, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                       CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != CUDA_SUCCESS ||
        cuMemAddressReserve(&at, mapped, 0, 0, 0) != CUDA_SUCCESS || cuMemMap(at, mapped, 0, imported, 0) != CUDA_SUCCESS ||
        cuMemSetAccess(at, mapped, &access, 1) != CUDA_SUCCESS ||
        cuMemcpyDtoH(seen.data(), at, n * sizeof(int)) != CUDA_SUCCESS)
      _exit(2);
    if (at == base) _exit(3);  // a fresh reservation, not the owner's address
    for (size_t i = 0; i < n; ++i) {
      if (seen[i] != static_cast<int>(i * 7 + 1)) _exit(4);
      seen[i] = -seen[i];
    }
    _exit(cuMemcpyHtoD(at, seen.data(), n * sizeof(int)) == CUDA_SUCCESS ? 0 : 5);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  ::close(fd);
  std::vector<int> out(n);
  REQUIRE(cudaMemcpy(out.data(), buf, n * sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess);
  size_t wrong = 0;
  for (size_t i = 0; i < n; ++i) wrong += out[i] != -host[i];
  CHECK(wrong == 0);
  CHECK(ncclMemFree(buf) == ncclSuccess);
  CHECK(cuMemGetAddressRange(&base, &mapped, reinterpret_cast<CUdeviceptr>(buf)) == CUDA_ERROR_NOT_FOUND);
  CHECK(ncclMemFree(buf) == ncclInvalidArgument);

  {  // NCCL_CUMEM_ENABLE=0: cudaMalloc memory, without an allocation handle
    plait::test::ScopedEnv off("NCCL_CUMEM_ENABLE", "0");
    REQUIRE(ncclMemAlloc(&buf, n * sizeof(int)) == ncclSuccess);
    CHECK(cuMemRetainAllocationHandle(&handle, buf) == CUDA_ERROR_INVALID_VALUE);
    REQUIRE(cudaPointerGetAttributes(&attr, buf) == cudaSuccess);
    CHECK(attr.type == cudaMemoryTypeDevice);
    CHECK(ncclAllReduce(buf, buf, 16, ncclInt32, ncclSum, comm, stream) == ncclSuccess);
    CHECK(cudaStreamSynchronize(stream) == cudaSuccess);
    CHECK(ncclMemFree(buf) == ncclSuccess);
  }
  CHECK(cudaStreamDestroy(stream) == cudaSuccess);
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
}
