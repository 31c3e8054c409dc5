// How the device kernels reach each peer (transport/p2p/): FIFOs in GPU
// memory (P2P) between devices that can reach each other, shared host memory
// (SHM) where they cannot or may not — cudaDeviceCanAccessPeer,
// NCCL_P2P_DISABLE, NCCL_P2P_LEVEL over NCCL_TOPO_FILE's paths — and rings
// that mix both. Four ranks as threads of this process (ncclCommInitAll on
// emulated devices 0-3: P2P by address); the forked-process form (P2P over
// CUDA IPC) is device_conformance's.
//
// Each case runs under its own ctest entry, which sets the environment it
// needs (tests/emu/CMakeLists.txt) and NCCL_DEBUG_FILE, whose INFO lines
// "rank a -> rank b: device FIFOs via ..." the case reads back.
#include <cuda_runtime_api.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "nccl.h"

namespace {

constexpr int kRanks = 4;

std::string logText() {
  const char* path = std::getenv("NCCL_DEBUG_FILE");
  REQUIRE(path != nullptr);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// The path rank a's kernels take to rank b, as the INFO line gives it.
std::string pathOf(const std::string& log, int a, int b) {
  const std::string key = "rank " + std::to_string(a) + " -> rank " + std::to_string(b) + ": device FIFOs via ";
  const size_t at = log.rfind(key);  // the file is appended to: this run's lines are the last
  if (at == std::string::npos) return "(no line)";
  const size_t end = log.find('\n', at);
  return log.substr(at + key.size(), end - at - key.size());
}

struct Comms {
  std::vector<ncclComm_t> comms = std::vector<ncclComm_t>(kRanks, nullptr);
  std::vector<cudaStream_t> streams = std::vector<cudaStream_t>(kRanks, nullptr);
  Comms() {
    int devs[kRanks] = {0, 1, 2, 3};
    REQUIRE(ncclCommInitAll(comms.data(), kRanks, devs) == ncclSuccess);
    for (int r = 0; r < kRanks; ++r) {
      REQUIRE(cudaSetDevice(r) == cudaSuccess);
      REQUIRE(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking) == cudaSuccess);
    }
  }
  ~Comms() {
    for (int r = 0; r < kRanks; ++r) {
      (void)cudaSetDevice(r);
      (void)cudaStreamDestroy(streams[r]);
      (void)ncclCommDestroy(comms[r]);
    }
  }
};

// An AllReduce large enough to cross several FIFO steps on every edge, and
// an AlltoAll (the point-to-point FIFOs), checked element by element.
void runCollectives(Comms& c) {
  const size_t count = (size_t(1) << 20) + 5;  // 4 MiB of floats, not a multiple of anything
  std::vector<float*> in(kRanks), out(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    REQUIRE(cudaSetDevice(r) == cudaSuccess);
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&in[r]), count * sizeof(float)) == cudaSuccess);
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&out[r]), count * sizeof(float)) == cudaSuccess);
    std::vector<float> host(count);
    for (size_t i = 0; i < count; ++i) host[i] = static_cast<float>((r + 1) * (i % 1000));
    REQUIRE(cudaMemcpy(in[r], host.data(), count * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int r = 0; r < kRanks; ++r)
    REQUIRE(ncclAllReduce(in[r], out[r], count, ncclFloat, ncclSum, c.comms[r], c.streams[r]) == ncclSuccess);
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  for (int r = 0; r < kRanks; ++r) {
    REQUIRE(cudaStreamSynchronize(c.streams[r]) == cudaSuccess);
    std::vector<float> host(count);
    REQUIRE(cudaMemcpy(host.data(), out[r], count * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
    size_t wrong = 0;
    for (size_t i = 0; i < count; ++i) wrong += host[i] != static_cast<float>(10 * (i % 1000));
    INFO("rank " << r);
    CHECK(wrong == 0);
  }

  const size_t block = 70001;  // AlltoAll: rank r sends block value 1000*r + p to rank p
  for (int r = 0; r < kRanks; ++r) {
    std::vector<float> host(block * kRanks);
    for (int p = 0; p < kRanks; ++p)
      for (size_t i = 0; i < block; ++i) host[p * block + i] = static_cast<float>(1000 * r + p) + static_cast<float>(i % 7);
    REQUIRE(cudaSetDevice(r) == cudaSuccess);
    REQUIRE(cudaMemcpy(in[r], host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int r = 0; r < kRanks; ++r)
    for (int p = 0; p < kRanks; ++p) {
      REQUIRE(ncclSend(in[r] + p * block, block, ncclFloat, p, c.comms[r], c.streams[r]) == ncclSuccess);
      REQUIRE(ncclRecv(out[r] + p * block, block, ncclFloat, p, c.comms[r], c.streams[r]) == ncclSuccess);
    }
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  for (int r = 0; r < kRanks; ++r) {
    REQUIRE(cudaStreamSynchronize(c.streams[r]) == cudaSuccess);
    std::vector<float> host(block * kRanks);
    REQUIRE(cudaMemcpy(host.data(), out[r], host.size() * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
    size_t wrong = 0;
    for (int p = 0; p < kRanks; ++p)
      for (size_t i = 0; i < block; ++i)
        wrong += host[p * block + i] != static_cast<float>(1000 * p + r) + static_cast<float>(i % 7);
    INFO("rank " << r);
    CHECK(wrong == 0);
  }
  for (int r = 0; r < kRanks; ++r) {
    REQUIRE(cudaSetDevice(r) == cudaSuccess);
    REQUIRE(cudaFree(in[r]) == cudaSuccess);
    REQUIRE(cudaFree(out[r]) == cudaSuccess);
  }
}

// Checks every pair's path: `expected(a, b)` is the start of what the log says.
template <class Expected>
void checkPaths(Expected expected) {
  const std::string log = logText();
  for (int a = 0; a < kRanks; ++a)
    for (int b = 0; b < kRanks; ++b) {
      if (a == b) continue;
      const std::string want = expected(a, b);
      const std::string got = pathOf(log, a, b);
      INFO("rank " << a << " -> rank " << b << ": " << got);
      CHECK(got.rfind(want, 0) == 0);
    }
}

}  // namespace

TEST_CASE("Devices that reach each other exchange FIFOs in GPU memory", "[p2p]") {
  Comms c;
  checkPaths([](int, int) { return std::string("P2P/direct pointer"); });
  runCollectives(c);
}

// PLAIT_EMU_NO_PEER_ACCESS=0-2,1-3: each ring and the AlltoAll mix P2P and SHM edges.
TEST_CASE("Pairs without peer access fall back to shared host memory", "[nopeer]") {
  Comms c;
  checkPaths([](int a, int b) {
    if ((a % 2) == (b % 2))
      return "SHM (CUDA device " + std::to_string(a) + " cannot access device " + std::to_string(b) +
             " (cudaDeviceCanAccessPeer))";
    return std::string("P2P/direct pointer");
  });
  runCollectives(c);
}

TEST_CASE("NCCL_P2P_DISABLE=1 keeps every device FIFO in host memory", "[disable]") {
  Comms c;
  checkPaths([](int, int) { return std::string("SHM (NCCL_P2P_DISABLE=1)"); });
  runCollectives(c);
}

// NCCL_TOPO_FILE=data/emu_4gpu_2socket.xml: devices 0,1 under one PCIe switch
// of socket 0 (PIX), 2,3 under one of socket 1; Intel CPUs, so the default
// level is PXB and pairs across the sockets (SYS) may not use P2P.
TEST_CASE("NCCL_P2P_LEVEL is judged on the topology's path between the GPUs", "[level]") {
  const char* level = std::getenv("NCCL_P2P_LEVEL");
  Comms c;
  checkPaths([&](int a, int b) {
    const bool sameSocket = a / 2 == b / 2;
    if (sameSocket || (level != nullptr && std::string(level) == "SYS")) return std::string("P2P/direct pointer");
    return std::string("SHM (the path between the GPUs is SYS, beyond NCCL_P2P_LEVEL PXB)");
  });
  runCollectives(c);
}

// A rank that aborts while no kernel of its own runs: the kernel of a peer
// waiting on it must fail at once, not at PLAIT_TIMEOUT (120 s here) — through
// the SHM FIFO's abort word, or the P2P FIFO's, which ncclCommAbort writes in
// the peer's GPU memory (P2pTransport::markAborted). Ranks 0 and 1 of a
// 2-rank communicator; run with and without NCCL_P2P_DISABLE.
TEST_CASE("A peer's ncclCommAbort ends a kernel waiting on it", "[abort]") {
  std::vector<ncclComm_t> comms(2, nullptr);
  int devs[2] = {0, 1};
  REQUIRE(ncclCommInitAll(comms.data(), 2, devs) == ncclSuccess);
  const bool p2p = std::getenv("NCCL_P2P_DISABLE") == nullptr;
  CHECK(pathOf(logText(), 0, 1).rfind(p2p ? "P2P/" : "SHM (", 0) == 0);
  REQUIRE(cudaSetDevice(0) == cudaSuccess);
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);
  float* buf = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&buf), (1 << 16) * sizeof(float)) == cudaSuccess);
  REQUIRE(ncclAllReduce(buf, buf, 1 << 16, ncclFloat, ncclSum, comms[0], stream) == ncclSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK(cudaStreamQuery(stream) == cudaErrorNotReady);  // rank 1 never called: rank 0's kernel waits
  const auto start = std::chrono::steady_clock::now();
  CHECK(ncclCommAbort(comms[1]) == ncclSuccess);
  cudaError_t q = cudaErrorNotReady;
  while ((q = cudaStreamQuery(stream)) == cudaErrorNotReady &&
         std::chrono::steady_clock::now() - start < std::chrono::seconds(60))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK(q == cudaSuccess);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO("peer abort to drained stream: " << seconds << " s");
  CHECK(seconds < 10.0);
  ncclResult_t async = ncclSuccess;
  CHECK(ncclCommGetAsyncError(comms[0], &async) == ncclSuccess);
  CHECK(async == ncclRemoteError);
  INFO(ncclGetLastError(comms[0]));
  CHECK(cudaStreamDestroy(stream) == cudaSuccess);
  CHECK(cudaFree(buf) == cudaSuccess);
  CHECK(ncclCommAbort(comms[0]) == ncclSuccess);
}
