// The direct path's agreement skipped where it cannot pay (PLAIT_DIRECT_AGREE
// = 0, the default; core/direct.h, Communicator::directWorthAgreeing): calls
// on unregistered buffers that cross-memory attach does not serve (ranks as
// threads, or reductions) take the FIFO path without the agreement's round
// until some rank registers a buffer; a first registration counts from the
// second collective after it, on every rank alike; a rank that ran ahead
// waits for its peers to reach the previous collective, up to the
// timeout. The TRACE lines tell which calls agreed: the agreement logs
// "direct" or "FIFO path", a skipped one nothing.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "direct_test_env.h"
#include "harness.h"

using namespace plait_test;

namespace {

constexpr size_t kCount = 8192;  // 32 KiB of floats: above PLAIT_DIRECT_MIN_BYTES (here 1)

// The default (DirectTestEnv agrees on every call, as the other tests count).
class LagEnv : public DirectTestEnv {
 public:
  LagEnv() {
    setenv("PLAIT_DIRECT_AGREE", "0", 1);
    resetLibrarySettings();
  }
};

// One AllReduce of kCount floats (rank r contributes r + 1 + i % 5); "" or what went wrong.
std::string allReduce(ncclComm_t comm, int nranks, int rank, float* in, float* out) {
  for (size_t i = 0; i < kCount; ++i) in[i] = static_cast<float>(rank + 1 + static_cast<int>(i % 5));
  if (ncclAllReduce(in, out, kCount, ncclFloat32, ncclSum, comm, nullptr) != ncclSuccess)
    return ncclGetLastError(comm);
  for (size_t i = 0; i < kCount; ++i) {
    const float want = static_cast<float>(nranks * (nranks + 1) / 2 + nranks * static_cast<int>(i % 5));
    if (out[i] != want)
      return "rank " + std::to_string(rank) + ": element " + std::to_string(i) + " is " + std::to_string(out[i]) +
             ", want " + std::to_string(want);
  }
  return "";
}

}  // namespace

TEST_CASE("Unregistered calls skip the agreement until a registration, which counts from the second call after",
          "[registration]") {
  LagEnv env;
  const int nranks = 3;
  auto failures = runThreads(nranks, [&](int rank, ncclComm_t comm) -> std::string {
    std::vector<float> in(kCount), out(kCount);
    for (int i = 0; i < 4; ++i)  // nothing registered anywhere: no agreement
      if (std::string e = allReduce(comm, nranks, rank, in.data(), out.data()); !e.empty()) return e;
    void *send = nullptr, *recv = nullptr, *hs = nullptr, *hr = nullptr;
    if (ncclMemAlloc(&send, kCount * 4) != ncclSuccess || ncclMemAlloc(&recv, kCount * 4) != ncclSuccess ||
        ncclCommRegister(comm, send, kCount * 4, &hs) != ncclSuccess ||
        ncclCommRegister(comm, recv, kCount * 4, &hr) != ncclSuccess)
      return ncclGetLastError(comm);
    std::string err;
    for (int i = 0; i < 3 && err.empty(); ++i)  // the first is too soon; the next two go direct
      err = allReduce(comm, nranks, rank, static_cast<float*>(send), static_cast<float*>(recv));
    // Registered elsewhere now: unregistered buffers agree and fall back.
    if (err.empty()) err = allReduce(comm, nranks, rank, in.data(), out.data());
    ncclCommDeregister(comm, hs);
    ncclCommDeregister(comm, hr);
    ncclMemFree(send);
    ncclMemFree(recv);
    return err;
  });
  for (auto& f : failures) FAIL_CHECK(f);
  CHECK(env.count("AllReduce", true) == 2 * nranks);
  CHECK(env.count("AllReduce", false) == nranks);
}

TEST_CASE("A registration on one rank makes every rank agree, from the same call", "[registration]") {
  LagEnv env;
  const int nranks = 3;
  auto failures = runThreads(nranks, [&](int rank, ncclComm_t comm) -> std::string {
    std::vector<float> in(kCount), out(kCount);
    void *buf = nullptr, *handle = nullptr;
    std::string err;
    for (int i = 0; i < 6 && err.empty(); ++i) {
      // Rank 2 registers a buffer it never uses after call 2 (collective
      // number 2): from call 4 on, every rank agrees (and falls back).
      if (rank == 2 && i == 2 &&
          (ncclMemAlloc(&buf, 4096) != ncclSuccess || ncclCommRegister(comm, buf, 4096, &handle) != ncclSuccess))
        return ncclGetLastError(comm);
      err = allReduce(comm, nranks, rank, in.data(), out.data());
    }
    if (handle != nullptr) ncclCommDeregister(comm, handle);
    if (buf != nullptr) ncclMemFree(buf);
    return err;
  });
  for (auto& f : failures) FAIL_CHECK(f);
  CHECK(env.count("AllReduce", true) == 0);
  CHECK(env.count("AllReduce", false) == 3 * nranks);
}

TEST_CASE("A rank that ran ahead waits for its peers to reach the previous call, up to the timeout", "[registration]") {
  LagEnv env;
  const int nranks = 3;
  SECTION("the peers come") {
    auto failures = runThreads(nranks, [&](int rank, ncclComm_t comm) -> std::string {
      std::vector<float> in(kCount), out(kCount);
      // Rank 0 roots two small Broadcasts and is at the second long before
      // the others have started: it waits there for them to reach the first
      // (PLAIT_DIRECT_UNSYNCED_MIN_BYTES is 1 here), and at the AllReduce
      // for the second.
      if (rank != 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
      for (int i = 0; i < 2; ++i) {
        int value = rank == 0 ? 40 + i : -1;
        if (ncclBroadcast(&value, &value, 1, ncclInt32, 0, comm, nullptr) != ncclSuccess)
          return ncclGetLastError(comm);
        if (value != 40 + i) return "broadcast " + std::to_string(i) + " gave " + std::to_string(value);
      }
      return allReduce(comm, nranks, rank, in.data(), out.data());
    });
    for (auto& f : failures) FAIL_CHECK(f);
  }
  SECTION("the wait ends at the timeout when they never come") {
    setenv("PLAIT_TIMEOUT", "8", 1);  // bounds init too: room for a loaded machine
    resetLibrarySettings();
    std::atomic<bool> done{false};
    auto failures = runThreads(nranks, [&](int rank, ncclComm_t comm) -> std::string {
      if (rank != 0) {  // never come: wait until rank 0's call has ended
        while (!done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        return "";
      }
      std::vector<float> in(kCount), out(kCount);
      std::string err;
      int value = 7;  // collective #1 never waits for the previous one: #2 is the first that does
      if (ncclBroadcast(&value, &value, 1, ncclInt32, 0, comm, nullptr) != ncclSuccess) err = ncclGetLastError(comm);
      const auto start = std::chrono::steady_clock::now();
      const ncclResult_t r = ncclAllReduce(in.data(), out.data(), kCount, ncclFloat32, ncclSum, comm, nullptr);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const std::string why = ncclGetLastError(comm);
      done = true;
      if (!err.empty()) return err;
      if (r == ncclSuccess) return "the AllReduce succeeded without its peers";
      if (s > 30) return "the AllReduce ended after " + std::to_string(s) + " s, not at the timeout";
      if (why.find("reach the previous collective") == std::string::npos) return "unexpected error: " + why;
      return "";
    });
    unsetenv("PLAIT_TIMEOUT");
    resetLibrarySettings();
    for (auto& f : failures) FAIL_CHECK(f);
  }
}

TEST_CASE("A peer's abort ends the wait for it to reach the previous call", "[registration]") {
  LagEnv env;
  setenv("PLAIT_TIMEOUT", "60", 1);
  resetLibrarySettings();
  ncclComm_t comms[2] = {nullptr, nullptr};
  REQUIRE(ncclCommInitAll(comms, 2, nullptr) == ncclSuccess);
  ncclResult_t result = ncclSuccess;
  std::string why;
  std::thread rank0([&] {
    int value = 7;  // collective #1: the root sends and returns
    if (ncclBroadcast(&value, &value, 1, ncclInt32, 0, comms[0], nullptr) != ncclSuccess) {
      result = ncclInternalError;
      why = "broadcast: " + std::string(ncclGetLastError(comms[0]));
      return;
    }
    std::vector<float> in(kCount, 1.0f), out(kCount);  // #2 waits for rank 1 to reach #1: it never does
    result = ncclAllReduce(in.data(), out.data(), kCount, ncclFloat32, ncclSum, comms[0], nullptr);
    why = ncclGetLastError(comms[0]);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto abortAt = std::chrono::steady_clock::now();
  CHECK(ncclCommAbort(comms[1]) == ncclSuccess);
  rank0.join();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - abortAt).count();
  unsetenv("PLAIT_TIMEOUT");
  resetLibrarySettings();
  INFO(why);
  CHECK(result == ncclRemoteError);
  CHECK(why.find("rank 1 aborted or destroyed its communicator") != std::string::npos);
  CHECK(s < 10);
  ncclCommDestroy(comms[0]);
}
