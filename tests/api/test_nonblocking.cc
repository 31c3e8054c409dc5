// Non-blocking communicators (config.blocking = 0; issue 15 item 3): init,
// host collectives and finalize return ncclInProgress and progress in the
// background; ncclCommGetAsyncError reports completion (and a background
// call's error, once); ncclCommAbort ends a call that waits for a missing
// peer. Argument errors still come back from the call itself.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "nccl.h"

namespace {

using Clock = std::chrono::steady_clock;

// Polls ncclCommGetAsyncError until it stops saying ncclInProgress (or 30 s).
ncclResult_t waitDone(ncclComm_t comm) {
  const auto until = Clock::now() + std::chrono::seconds(30);
  ncclResult_t state = ncclInProgress;
  while (state == ncclInProgress && Clock::now() < until) {
    if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) return ncclInternalError;
    if (state == ncclInProgress) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return state;
}

ncclComm_t initNonBlocking(int nranks, ncclUniqueId id, int rank) {
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRankConfig(&comm, nranks, id, rank, &config);
  if (r != ncclInProgress && r != ncclSuccess) return nullptr;
  return waitDone(comm) == ncclSuccess ? comm : nullptr;
}

// Runs body(rank, comm) on two threads with non-blocking communicators.
std::vector<std::string> runPair(const std::function<std::string(int, ncclComm_t)>& body) {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      ncclComm_t comm = initNonBlocking(2, id, r);
      if (comm == nullptr) {
        errors[r] = std::string("init: ") + ncclGetLastError(nullptr);
        return;
      }
      errors[r] = body(r, comm);
      ncclCommDestroy(comm);
    });
  for (auto& t : threads) t.join();
  return errors;
}

}  // namespace

TEST_CASE("Non-blocking collectives return ncclInProgress and complete in the background", "[nonblocking]") {
  auto errors = runPair([](int rank, ncclComm_t comm) -> std::string {
    std::vector<float> buf(1 << 16, 1.0f + rank);
    if (ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr) != ncclInProgress)
      return "AllReduce did not return ncclInProgress";
    if (ncclResult_t s = waitDone(comm); s != ncclSuccess) return "AllReduce ended with " + std::to_string(s);
    if (buf.front() != 3.0f || buf.back() != 3.0f) return "AllReduce result " + std::to_string(buf.front());
    // Several queued without polling in between run in order.
    std::vector<int32_t> a(100, rank + 1), b(200);
    if (ncclBroadcast(a.data(), a.data(), a.size(), ncclInt32, 1, comm, nullptr) != ncclInProgress)
      return "Broadcast did not return ncclInProgress";
    if (ncclAllGather(a.data(), b.data(), a.size(), ncclInt32, comm, nullptr) != ncclInProgress)
      return "AllGather did not return ncclInProgress";
    if (ncclResult_t s = waitDone(comm); s != ncclSuccess) return "queue ended with " + std::to_string(s);
    if (b[0] != 2 || b[199] != 2) return "Broadcast then AllGather: " + std::to_string(b[0]);
    // A group runs at ncclGroupEnd, as with a blocking communicator.
    std::vector<float> out(buf.size());
    ncclGroupStart();
    ncclSend(buf.data(), 16, ncclFloat, 1 - rank, comm, nullptr);
    ncclRecv(out.data(), 16, ncclFloat, 1 - rank, comm, nullptr);
    if (ncclGroupEnd() != ncclSuccess) return std::string("group: ") + ncclGetLastError(comm);
    if (ncclCommFinalize(comm) != ncclSuccess) return "finalize with nothing pending";
    return out[0] == 3.0f ? "" : "group result";
  });
  for (const auto& e : errors) CHECK(e == "");
}

TEST_CASE("A non-blocking call's argument error comes back at once", "[nonblocking]") {
  auto errors = runPair([](int, ncclComm_t comm) -> std::string {
    float x = 0;
    if (ncclAllReduce(&x, &x, 1, static_cast<ncclDataType_t>(ncclNumTypes), ncclSum, comm, nullptr) !=
        ncclInvalidArgument)
      return "a bad type was not refused by the call";
    ncclResult_t state = ncclInProgress;
    ncclCommGetAsyncError(comm, &state);
    return state == ncclSuccess ? "" : "nothing was queued, yet the state is " + std::to_string(state);
  });
  for (const auto& e : errors) CHECK(e == "");
}

TEST_CASE("A background call's error is reported by ncclCommGetAsyncError", "[nonblocking]") {
  auto errors = runPair([](int rank, ncclComm_t comm) -> std::string {
    std::vector<float> buf(8192, 1.0f);
    const size_t count = rank == 0 ? buf.size() : 1024;  // ranks disagree: the op board says so
    if (ncclAllReduce(buf.data(), buf.data(), count, ncclFloat, ncclSum, comm, nullptr) != ncclInProgress)
      return "AllReduce did not return ncclInProgress";
    const ncclResult_t s = waitDone(comm);
    const std::string why = ncclGetLastError(comm);
    if (s != ncclInvalidUsage) return "state " + std::to_string(s) + ": " + why;
    return why.find("disagree") != std::string::npos ? "" : "the message does not say why: " + why;
  });
  for (const auto& e : errors) CHECK(e == "");
}

TEST_CASE("ncclCommAbort ends a non-blocking collective that waits for a missing peer", "[nonblocking]") {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  std::atomic<bool> done{false};
  std::string error0;
  double abortMs = 0;
  std::thread peer([&] {  // joins the communicator, never calls the AllReduce
    ncclComm_t comm = initNonBlocking(2, id, 1);
    while (!done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    ncclCommAbort(comm);
  });
  ncclComm_t comm = initNonBlocking(2, id, 0);
  REQUIRE(comm != nullptr);
  std::vector<float> buf(1024, 1.0f);
  CHECK(ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr) == ncclInProgress);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ncclResult_t state = ncclSuccess;
  CHECK(ncclCommGetAsyncError(comm, &state) == ncclSuccess);
  CHECK(state == ncclInProgress);  // still waiting for rank 1
  const auto t0 = Clock::now();
  CHECK(ncclCommAbort(comm) == ncclSuccess);
  abortMs = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  done.store(true);
  peer.join();
  CHECK(abortMs < 5000);
}

TEST_CASE("A non-blocking split gives a child that becomes ready", "[nonblocking]") {
  auto errors = runPair([](int rank, ncclComm_t comm) -> std::string {
    ncclComm_t child = nullptr;
    const ncclResult_t r = ncclCommSplit(comm, 0, rank, &child, nullptr);
    if (r != ncclInProgress && r != ncclSuccess) return std::string("split: ") + ncclGetLastError(comm);
    if (child == nullptr || waitDone(child) != ncclSuccess) return std::string("child: ") + ncclGetLastError(child);
    int32_t x = rank + 1, sum = 0;
    if (ncclAllReduce(&x, &sum, 1, ncclInt32, ncclSum, child, nullptr) != ncclInProgress)
      return "the child is not non-blocking";
    const ncclResult_t s = waitDone(child);
    ncclCommDestroy(child);
    return s == ncclSuccess && sum == 3 ? "" : "child AllReduce: " + std::to_string(s) + ", " + std::to_string(sum);
  });
  for (const auto& e : errors) CHECK(e == "");
}
