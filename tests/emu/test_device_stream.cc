// The CUDA executor's stream semantics and failure handling, through the
// public API with the emulated runtime: ordering against other work on the
// stream, CUDA graph capture and replay, a PreMulSum scalar read from device
// memory when the kernel runs, two communicators on two streams, the
// kernel-side deadline surfacing through ncclCommGetAsyncError, and
// ncclCommAbort ending a kernel that waits on a killed peer.
#include <cuda_runtime_api.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "device_ranks.h"
#include "nccl.h"

namespace {

using Clock = std::chrono::steady_clock;

using plait_test::deviceAlloc;
using plait_test::mismatch;
using plait_test::runDeviceRanks;

}  // namespace

TEST_CASE("Device collectives are ordered with the stream's other work", "[device][stream]") {
  const size_t n = 4099;
  auto failed = runDeviceRanks(3, [&](int rank, ncclComm_t comm, cudaStream_t stream) -> std::string {
    uint8_t* buf = deviceAlloc<uint8_t>(n);
    uint8_t* gathered = deviceAlloc<uint8_t>(3 * n);
    if (buf == nullptr || gathered == nullptr) return "cudaMalloc failed";
    std::vector<uint8_t> back(3 * n, 0);
    // memset -> AllReduce -> AllReduce -> AllGather -> copy, with no host wait in between.
    if (cudaMemsetAsync(buf, rank + 1, n, stream) != cudaSuccess) return "cudaMemsetAsync failed";
    if (ncclAllReduce(buf, buf, n, ncclUint8, ncclSum, comm, stream) != ncclSuccess) return ncclGetLastError(comm);
    if (ncclAllReduce(buf, buf, n, ncclUint8, ncclSum, comm, stream) != ncclSuccess) return ncclGetLastError(comm);
    if (cudaMemsetAsync(buf, 10 * (rank + 1), 1, stream) != cudaSuccess) return "cudaMemsetAsync failed";
    if (ncclAllGather(buf, gathered, n, ncclUint8, comm, stream) != ncclSuccess) return ncclGetLastError(comm);
    if (cudaMemcpyAsync(back.data(), gathered, 3 * n, cudaMemcpyDeviceToHost, stream) != cudaSuccess)
      return "cudaMemcpyAsync failed";
    if (cudaStreamSynchronize(stream) != cudaSuccess) return "cudaStreamSynchronize failed";
    for (int r = 0; r < 3; ++r)
      for (size_t i = 0; i < n; ++i) {
        const double want = i == 0 ? 10 * (r + 1) : 3 * 6;  // (1+2+3) summed by 3 ranks
        if (back[r * n + i] != want) return mismatch("gathered", r * n + i, back[r * n + i], want);
      }
    cudaFree(buf);
    cudaFree(gathered);
    return "";
  });
  for (auto& f : failed) FAIL_CHECK(f);
}

TEST_CASE("A device AllReduce captured into a CUDA graph replays", "[device][graph]") {
  const size_t n = 1000;
  auto failed = runDeviceRanks(2, [&](int rank, ncclComm_t comm, cudaStream_t stream) -> std::string {
    float* buf = deviceAlloc<float>(n);
    if (buf == nullptr) return "cudaMalloc failed";
    std::vector<float> host(n, 1.0f + rank);
    if (cudaMemcpy(buf, host.data(), n * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess) return "cudaMemcpy";
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) return "BeginCapture failed";
    if (ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm, stream) != ncclSuccess) return ncclGetLastError(comm);
    if (cudaStreamEndCapture(stream, &graph) != cudaSuccess) return "EndCapture failed";
    // Capturing ran nothing.
    if (cudaMemcpy(host.data(), buf, n * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) return "cudaMemcpy";
    if (host[5] != 1.0f + rank) return mismatch("after capture", 5, host[5], 1.0f + rank);
    if (cudaGraphInstantiate(&exec, graph, 0) != cudaSuccess) return "cudaGraphInstantiate failed";
    for (int replay = 0; replay < 3; ++replay)
      if (cudaGraphLaunch(exec, stream) != cudaSuccess) return "cudaGraphLaunch failed";
    if (cudaStreamSynchronize(stream) != cudaSuccess) return "cudaStreamSynchronize failed";
    if (cudaMemcpy(host.data(), buf, n * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) return "cudaMemcpy";
    // 1 and 2 summed: 3, then 6, then 12 on both ranks.
    for (size_t i = 0; i < n; ++i)
      if (host[i] != 12.0f) return mismatch("after 3 replays", i, host[i], 12.0);
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaFree(buf);
    return "";
  });
  for (auto& f : failed) FAIL_CHECK(f);
}

TEST_CASE("PreMulSum reads a device-resident scalar when the kernel runs", "[device][premulsum]") {
  const size_t n = 777;
  auto failed = runDeviceRanks(2, [&](int rank, ncclComm_t comm, cudaStream_t stream) -> std::string {
    float* buf = deviceAlloc<float>(n);
    float* scalar = deviceAlloc<float>(1);
    if (buf == nullptr || scalar == nullptr) return "cudaMalloc failed";
    std::vector<float> host(n, 1.0f);
    const float first = 100.0f;
    if (cudaMemcpy(buf, host.data(), n * sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemcpy(scalar, &first, sizeof(float), cudaMemcpyHostToDevice) != cudaSuccess)
      return "cudaMemcpy failed";
    ncclRedOp_t op;
    if (ncclRedOpCreatePreMulSum(&op, scalar, ncclFloat, ncclScalarDevice, comm) != ncclSuccess)
      return ncclGetLastError(comm);
    // The scalar changes after the op was created and before the kernel runs.
    const float mine = static_cast<float>(rank + 1);
    if (cudaMemcpyAsync(scalar, &mine, sizeof(float), cudaMemcpyHostToDevice, stream) != cudaSuccess)
      return "cudaMemcpyAsync failed";
    if (ncclAllReduce(buf, buf, n, ncclFloat, op, comm, stream) != ncclSuccess) return ncclGetLastError(comm);
    if (cudaMemcpyAsync(host.data(), buf, n * sizeof(float), cudaMemcpyDeviceToHost, stream) != cudaSuccess)
      return "cudaMemcpyAsync failed";
    if (cudaStreamSynchronize(stream) != cudaSuccess) return "cudaStreamSynchronize failed";
    for (size_t i = 0; i < n; ++i)
      if (host[i] != 3.0f) return mismatch("PreMulSum", i, host[i], 3.0);  // 1*1 + 1*2
    ncclRedOpDestroy(op, comm);
    cudaFree(buf);
    cudaFree(scalar);
    return "";
  });
  for (auto& f : failed) FAIL_CHECK(f);
}

TEST_CASE("Two communicators on two streams run at once", "[device][stream]") {
  const size_t n = 20000;
  ncclUniqueId ids[2];
  REQUIRE(ncclGetUniqueId(&ids[0]) == ncclSuccess);
  REQUIRE(ncclGetUniqueId(&ids[1]) == ncclSuccess);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      std::string& err = errors[r];
      ncclComm_t comms[2] = {};
      cudaStream_t streams[2] = {};
      int32_t* bufs[2] = {};
      cudaSetDevice(r);
      for (int c = 0; c < 2; ++c) {
        if (cudaStreamCreate(&streams[c]) != cudaSuccess || (bufs[c] = deviceAlloc<int32_t>(n)) == nullptr) {
          err = "CUDA setup failed";
          return;
        }
        if (ncclCommInitRank(&comms[c], 2, ids[c], r) != ncclSuccess) {
          err = std::string("init: ") + ncclGetLastError(nullptr);
          return;
        }
      }
      std::vector<int32_t> host(n);
      for (int c = 0; c < 2; ++c) {
        for (size_t i = 0; i < n; ++i) host[i] = static_cast<int32_t>((c + 1) * 1000 + r * 7 + i % 13);
        cudaMemcpy(bufs[c], host.data(), n * sizeof(int32_t), cudaMemcpyHostToDevice);
      }
      // Both launched before either stream is waited for.
      for (int c = 0; c < 2 && err.empty(); ++c)
        if (ncclAllReduce(bufs[c], bufs[c], n, ncclInt32, c == 0 ? ncclSum : ncclMax, comms[c], streams[c]) !=
            ncclSuccess)
          err = ncclGetLastError(comms[c]);
      for (int c = 0; c < 2 && err.empty(); ++c) {
        cudaStreamSynchronize(streams[c]);
        cudaMemcpy(host.data(), bufs[c], n * sizeof(int32_t), cudaMemcpyDeviceToHost);
        for (size_t i = 0; i < n && err.empty(); ++i) {
          const int32_t want = c == 0 ? 2 * 1000 + 7 + 2 * static_cast<int32_t>(i % 13)
                                      : 2 * 1000 + 7 + static_cast<int32_t>(i % 13);
          if (host[i] != want) err = mismatch(c == 0 ? "comm 0 (sum)" : "comm 1 (max)", i, host[i], want);
        }
      }
      for (int c = 0; c < 2; ++c) {
        if (comms[c]) ncclCommDestroy(comms[c]);
        cudaStreamDestroy(streams[c]);
        cudaFree(bufs[c]);
      }
    });
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r)
    if (!errors[r].empty()) FAIL_CHECK("rank " << r << ": " << errors[r]);
}

// Run with PLAIT_TIMEOUT=2 (its own ctest entry): rank 1 never joins the
// collective, so rank 0's kernel gives up at its deadline.
TEST_CASE("A kernel past its deadline surfaces through ncclCommGetAsyncError", "[device][deadline]") {
  std::atomic<bool> rank0Done{false};
  auto failed = runDeviceRanks(2, [&](int rank, ncclComm_t comm, cudaStream_t stream) -> std::string {
    if (rank == 1) {  // stays away until rank 0 has seen its error
      while (!rank0Done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      return "";
    }
    float* buf = deviceAlloc<float>(4096);
    if (buf == nullptr) return "cudaMalloc failed";
    const auto start = Clock::now();
    std::string err;
    if (ncclAllReduce(buf, buf, 4096, ncclFloat, ncclSum, comm, stream) != ncclSuccess) err = ncclGetLastError(comm);
    ncclResult_t async = ncclSuccess;
    while (err.empty() && async == ncclSuccess && Clock::now() - start < std::chrono::seconds(60)) {
      if (ncclCommGetAsyncError(comm, &async) != ncclSuccess) err = "ncclCommGetAsyncError failed";
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (err.empty() && async != ncclRemoteError)
      err = "async error is " + std::to_string(async) + " after " + std::to_string(waited) + " s, expected ncclRemoteError";
    if (err.empty() && std::strstr(ncclGetLastError(comm), "timed out") == nullptr)
      err = std::string("the async error does not say the kernel timed out: ") + ncclGetLastError(comm);
    if (err.empty() && waited < 1.5) err = "the kernel gave up after " + std::to_string(waited) + " s, before its 2 s deadline";
    if (err.empty() && cudaStreamSynchronize(stream) != cudaSuccess) err = "cudaStreamSynchronize failed";
    // A broken communicator refuses later work.
    if (err.empty() && ncclAllReduce(buf, buf, 4096, ncclFloat, ncclSum, comm, stream) == ncclSuccess)
      err = "a collective on the broken communicator was accepted";
    rank0Done = true;
    cudaFree(buf);
    return err;
  });
  for (auto& f : failed) FAIL_CHECK(f);
}

// Forked ranks: rank 1 dies (SIGKILL) after init; rank 0's kernel waits on it
// until ncclCommAbort, which must end the kernel (the stream drains).
TEST_CASE("ncclCommAbort ends a kernel waiting on a killed peer", "[device][abort][process]") {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ncclComm_t comm = nullptr;
    if (cudaSetDevice(1) != cudaSuccess || ncclCommInitRank(&comm, 2, id, 1) != ncclSuccess) _exit(2);
    raise(SIGKILL);
    _exit(3);
  }
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  ncclComm_t comm = nullptr;
  REQUIRE(ncclCommInitRank(&comm, 2, id, 0) == ncclSuccess);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK(WIFSIGNALED(status));
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
  float* buf = deviceAlloc<float>(1 << 16);
  REQUIRE(buf != nullptr);
  REQUIRE(ncclAllReduce(buf, buf, 1 << 16, ncclFloat, ncclSum, comm, stream) == ncclSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK(cudaStreamQuery(stream) == cudaErrorNotReady);  // still waiting on the dead peer (PLAIT_TIMEOUT is long)
  const auto start = Clock::now();
  CHECK(ncclCommAbort(comm) == ncclSuccess);
  // The stream drains: the kernel saw the abort flag.
  cudaError_t q = cudaErrorNotReady;
  while ((q = cudaStreamQuery(stream)) == cudaErrorNotReady && Clock::now() - start < std::chrono::seconds(30))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(q == cudaSuccess);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  INFO("abort to drained stream: " << seconds << " s");
  CHECK(seconds < 5.0);
  CHECK(cudaStreamDestroy(stream) == cudaSuccess);
  CHECK(cudaFree(buf) == cudaSuccess);
}
