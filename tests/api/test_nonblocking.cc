// Non-blocking communicators (config.blocking = 0; issue 15 item 3): init,
// host collectives, split, shrink, grow and finalize return ncclInProgress
// and progress in the background; ncclCommGetAsyncError reports completion
// (and a background call's error, once); ncclCommAbort ends a call that
// waits for a missing peer, and a child whose agreement is still pending.
// Argument errors still come back from the call itself.
#include <catch2/catch.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
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

// Runs body(rank, comm) on `nranks` threads with non-blocking communicators.
std::vector<std::string> runRanks(int nranks, const std::function<std::string(int, ncclComm_t)>& body) {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  std::vector<std::string> errors(nranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r)
    threads.emplace_back([&, r] {
      ncclComm_t comm = initNonBlocking(nranks, id, r);
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

std::vector<std::string> runPair(const std::function<std::string(int, ncclComm_t)>& body) {
  return runRanks(2, body);
}

// A flag one rank raises and another waits for, at most 20 s (then false:
// the test fails rather than hangs).
struct Signal {
  std::atomic<bool> raised{false};
  void raise() { raised.store(true); }
  bool wait() const {
    const auto until = Clock::now() + std::chrono::seconds(20);
    while (!raised.load() && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return raised.load();
  }
};

ncclResult_t asyncState(ncclComm_t comm) {
  ncclResult_t state = ncclInternalError;
  return ncclCommGetAsyncError(comm, &state) == ncclSuccess ? state : ncclInternalError;
}

// An AllReduce of rank+1 on `comm`, waited for: "" or what went wrong.
std::string sumOfRanks(ncclComm_t comm, int nranks, int rank) {
  int32_t x = rank + 1, sum = 0;
  const ncclResult_t r = ncclAllReduce(&x, &sum, 1, ncclInt32, ncclSum, comm, nullptr);
  if (r != ncclInProgress && r != ncclSuccess) return std::string("AllReduce: ") + ncclGetLastError(comm);
  if (ncclResult_t s = waitDone(comm); s != ncclSuccess) return "AllReduce ended with " + std::to_string(s);
  return sum == nranks * (nranks + 1) / 2 ? "" : "AllReduce gave " + std::to_string(sum);
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

// The agreement over the parent runs in the parent's background: rank 0's
// split returns before rank 1 has called it (a split that blocked would wait
// for rank 1, which waits for rank 0's return: the Signal's 20 s, then a
// failure). Until rank 1 joins, both the parent and the child say
// ncclInProgress, and queries of the child are refused.
TEST_CASE("A non-blocking split returns before the other ranks called it", "[nonblocking]") {
  Signal rank0Returned;
  auto errors = runPair([&](int rank, ncclComm_t comm) -> std::string {
    if (rank == 1 && !rank0Returned.wait()) return "rank 0's ncclCommSplit did not return before rank 1 called it";
    ncclComm_t child = nullptr;
    if (ncclCommSplit(comm, 0, rank, &child, nullptr) != ncclInProgress)
      return std::string("split did not return ncclInProgress: ") + ncclGetLastError(comm);
    if (child == nullptr) return "no child handle";
    if (rank == 0) {
      int count = -1;
      const ncclResult_t countResult = ncclCommCount(child, &count);
      const ncclResult_t parentState = asyncState(comm), childState = asyncState(child);
      rank0Returned.raise();
      // A query on a communicator still initialising is an error, as NCCL's
      // (never ncclInProgress, which would read as "accepted").
      if (parentState != ncclInProgress || childState != ncclInProgress || countResult != ncclInvalidArgument)
        return "before rank 1 joined: parent " + std::to_string(parentState) + ", child " +
               std::to_string(childState) + ", ncclCommCount " + std::to_string(countResult);
    }
    if (ncclResult_t s = waitDone(child); s != ncclSuccess)
      return "child: " + std::to_string(s) + " " + ncclGetLastError(child);
    if (waitDone(comm) != ncclSuccess) return std::string("parent: ") + ncclGetLastError(comm);
    int count = 0, me = -1;
    if (ncclCommCount(child, &count) != ncclSuccess || ncclCommUserRank(child, &me) != ncclSuccess || count != 2 ||
        me != rank)
      return "child of " + std::to_string(count) + " ranks, rank " + std::to_string(me);
    std::string err = sumOfRanks(child, 2, rank);
    ncclCommDestroy(child);
    return err.empty() ? sumOfRanks(comm, 2, rank) : err;
  });
  for (const auto& e : errors) CHECK(e == "");
}

TEST_CASE("A non-blocking split with NCCL_SPLIT_NOCOLOR gives no child and completes on the parent", "[nonblocking]") {
  auto errors = runPair([](int rank, ncclComm_t comm) -> std::string {
    ncclComm_t child = reinterpret_cast<ncclComm_t>(&child);  // must be overwritten
    const int color = rank == 1 ? NCCL_SPLIT_NOCOLOR : 7;
    if (ncclCommSplit(comm, color, 0, &child, nullptr) != ncclInProgress)
      return std::string("split: ") + ncclGetLastError(comm);
    if (waitDone(comm) != ncclSuccess) return std::string("parent: ") + ncclGetLastError(comm);
    if (rank == 1) return child == nullptr ? "" : "NCCL_SPLIT_NOCOLOR gave a child";
    if (child == nullptr || waitDone(child) != ncclSuccess) return std::string("child: ") + ncclGetLastError(child);
    std::string err = sumOfRanks(child, 1, 0);
    ncclCommDestroy(child);
    return err;
  });
  for (const auto& e : errors) CHECK(e == "");
}

// Aborting the child while the agreement waits for rank 1 returns at once;
// the agreement still completes on the parent (rank 1 joins later), the
// child's init is skipped, and the parent stays usable.
TEST_CASE("ncclCommAbort on a non-blocking split's child before its init ran", "[nonblocking]") {
  Signal aborted;
  auto errors = runPair([&](int rank, ncclComm_t comm) -> std::string {
    ncclComm_t child = nullptr;
    if (rank == 1) {
      if (!aborted.wait()) return "rank 0 never aborted its child";
      if (ncclCommSplit(comm, NCCL_SPLIT_NOCOLOR, 0, &child, nullptr) != ncclInProgress)
        return std::string("split: ") + ncclGetLastError(comm);
    } else {
      if (ncclCommSplit(comm, 0, 0, &child, nullptr) != ncclInProgress || child == nullptr)
        return std::string("split: ") + ncclGetLastError(comm);
      const auto t0 = Clock::now();
      const ncclResult_t r = ncclCommAbort(child);
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      aborted.raise();
      if (r != ncclSuccess || ms > 2000) return "abort: " + std::to_string(r) + " after " + std::to_string(ms) + " ms";
      if (asyncState(child) != ncclInternalError) return "the aborted child still answers";
    }
    if (waitDone(comm) != ncclSuccess) return std::string("parent after the split: ") + ncclGetLastError(comm);
    return sumOfRanks(comm, 2, rank);
  });
  for (const auto& e : errors) CHECK(e == "");
}

// A split queued behind an AllReduce that waits for a missing peer, then the
// parent aborted: the AllReduce ends, the split never runs, and the child
// reports that instead of staying in progress.
TEST_CASE("A non-blocking split whose parent is aborted before it ran fails its child", "[nonblocking]") {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  Signal done;
  std::thread peer([&] {  // joins, never calls the AllReduce or the split
    ncclComm_t comm = initNonBlocking(2, id, 1);
    done.wait();
    ncclCommAbort(comm);
  });
  ncclComm_t comm = initNonBlocking(2, id, 0);
  REQUIRE(comm != nullptr);
  std::vector<float> buf(1024, 1.0f);
  CHECK(ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr) == ncclInProgress);
  ncclComm_t child = nullptr;
  CHECK(ncclCommSplit(comm, 0, 0, &child, nullptr) == ncclInProgress);
  REQUIRE(child != nullptr);
  CHECK(asyncState(child) == ncclInProgress);
  CHECK(ncclCommAbort(comm) == ncclSuccess);
  const ncclResult_t childState = waitDone(child);
  CHECK(childState == ncclInvalidUsage);
  const ncclResult_t r = ncclAllReduce(buf.data(), buf.data(), 1, ncclFloat, ncclSum, child, nullptr);
  CHECK(r == ncclInvalidUsage);
  const std::string why = ncclGetLastError(child);
  CHECK(why.find("ncclCommSplit") != std::string::npos);
  CHECK(why.find("before its queued call ran") != std::string::npos);
  CHECK(ncclCommDestroy(child) == ncclSuccess);
  done.raise();
  peer.join();
}

// Shrink without rank 2 (which never calls it): both survivors' calls return
// at once, their children become ready and reduce over two ranks.
TEST_CASE("A non-blocking shrink returns at once and its child becomes ready", "[nonblocking]") {
  Signal survivorsDone;
  auto errors = runRanks(3, [&](int rank, ncclComm_t comm) -> std::string {
    if (rank == 2) {  // the excluded rank: alive, but out of the shrink
      survivorsDone.wait();
      return "";
    }
    int excluded[] = {2};
    ncclComm_t child = nullptr;
    const ncclResult_t r = ncclCommShrink(comm, excluded, 1, &child, nullptr, NCCL_SHRINK_ABORT);
    std::string err;
    if (r != ncclInProgress || child == nullptr)
      err = "shrink returned " + std::to_string(r) + ": " + ncclGetLastError(comm);
    else if (ncclResult_t s = waitDone(child); s != ncclSuccess)
      err = "child: " + std::to_string(s) + " " + ncclGetLastError(child);
    else
      err = sumOfRanks(child, 2, rank);
    if (child != nullptr) ncclCommDestroy(child);
    if (rank == 0) survivorsDone.raise();
    return err;
  });
  for (const auto& e : errors) CHECK(e == "");
}

// Grow from 2 ranks to 3: rank 0 returns before rank 1 called ncclCommGrow
// (the agreement waits for rank 1 in rank 0's background); the newcomer
// joins with an ordinary non-blocking init; all three reduce.
TEST_CASE("A non-blocking grow returns at once and the grown communicator becomes ready", "[nonblocking]") {
  ncclUniqueId growId;
  Signal idReady, rank0Returned;
  std::string newcomerError = "never ran";
  std::thread newcomer([&] {
    if (!idReady.wait()) {
      newcomerError = "no id from rank 0";
      return;
    }
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ncclComm_t grown = nullptr;
    const ncclResult_t r = ncclCommGrow(nullptr, 3, &growId, 2, &grown, &config);
    if (r != ncclInProgress && r != ncclSuccess) {
      newcomerError = std::string("newcomer: ") + ncclGetLastError(nullptr);
      return;
    }
    newcomerError = waitDone(grown) == ncclSuccess ? sumOfRanks(grown, 3, 2) : "newcomer's init failed";
    ncclCommDestroy(grown);
  });
  auto errors = runPair([&](int rank, ncclComm_t comm) -> std::string {
    if (rank == 0) {
      if (ncclCommGetUniqueId(comm, &growId) != ncclSuccess) return std::string("id: ") + ncclGetLastError(comm);
      idReady.raise();
    } else if (!rank0Returned.wait()) {
      return "rank 0's ncclCommGrow did not return before rank 1 called it";
    }
    ncclComm_t grown = nullptr;
    const ncclResult_t r = ncclCommGrow(comm, 3, rank == 0 ? &growId : nullptr, -1, &grown, nullptr);
    if (rank == 0) rank0Returned.raise();
    if (r != ncclInProgress || grown == nullptr) return "grow returned " + std::to_string(r);
    std::string err = waitDone(grown) == ncclSuccess ? sumOfRanks(grown, 3, rank)
                                                     : std::string("grown: ") + ncclGetLastError(grown);
    ncclCommDestroy(grown);
    return err.empty() ? sumOfRanks(comm, 2, rank) : err;
  });
  newcomer.join();
  for (const auto& e : errors) CHECK(e == "");
  CHECK(newcomerError == "");
}

// A communicator whose non-blocking init has not finished refuses calls with
// an error naming why, as NCCL does: ncclInProgress would read as "accepted"
// on a non-blocking communicator, while the call was dropped (the review of
// 2026-11-30: an AllReduce made right after the init was never queued and
// ncclCommGetAsyncError went on to report success). A split on it leaves
// *newcomm NULL, never what the caller's variable held before.
TEST_CASE("Calls on a communicator still initialising are refused, not dropped", "[nonblocking]") {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  REQUIRE(ncclCommInitRankConfig(&comm, 2, id, 0, &config) == ncclInProgress);  // rank 1 has not come yet
  std::vector<float> buf(64, 1.0f);
  CHECK(ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr) == ncclInvalidArgument);
  CHECK(std::string(ncclGetLastError(comm)).find("still initialising") != std::string::npos);
  auto* stale = reinterpret_cast<ncclComm_t>(uintptr_t{0x1234});
  ncclComm_t child = stale;
  CHECK(ncclCommSplit(comm, 0, 0, &child, nullptr) == ncclInvalidArgument);
  CHECK(child == nullptr);
  child = stale;
  int excluded = 1;
  CHECK(ncclCommShrink(comm, &excluded, 1, &child, nullptr, NCCL_SHRINK_DEFAULT) == ncclInvalidArgument);
  CHECK(child == nullptr);
  int count = -1;
  CHECK(ncclCommCount(comm, &count) == ncclInvalidArgument);
  ncclResult_t state = ncclSuccess;
  CHECK(ncclCommGetAsyncError(comm, &state) == ncclSuccess);
  CHECK(state == ncclInProgress);  // the init itself still runs
  // Rank 1 joins: the init completes, and the same calls now work.
  std::thread peer([&] {
    ncclComm_t other = initNonBlocking(2, id, 1);
    if (other == nullptr) return;
    float x = 1.0f;
    ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, other, nullptr);
    waitDone(other);
    ncclCommDestroy(other);
  });
  REQUIRE(waitDone(comm) == ncclSuccess);
  float x = 2.0f;
  CHECK(ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, nullptr) == ncclInProgress);
  CHECK(waitDone(comm) == ncclSuccess);
  CHECK(x == 3.0f);
  peer.join();
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
}

// A group ends on the caller's thread. On a non-blocking communicator whose
// queued collective still waits for its peer, it would have run beside that
// one on the same connections: ncclGroupEnd refuses it, runs none of it, and
// the communicator goes on once the queued call is done.
TEST_CASE("A group on a non-blocking communicator is refused while a queued call runs", "[nonblocking]") {
  Signal refused;
  auto errors = runPair([&](int rank, ncclComm_t comm) -> std::string {
    if (rank == 0) {
      int32_t x = 1, sum = 0;
      if (ncclAllReduce(&x, &sum, 1, ncclInt32, ncclSum, comm, nullptr) != ncclInProgress)
        return "the first AllReduce did not queue";
      int32_t y = 5, other = 0;
      ncclGroupStart();
      ncclAllReduce(&y, &other, 1, ncclInt32, ncclSum, comm, nullptr);
      const ncclResult_t r = ncclGroupEnd();
      const std::string why = ncclGetLastError(comm);
      refused.raise();
      if (r != ncclInvalidArgument) return "ncclGroupEnd gave " + std::to_string(r);
      if (why.find("still in progress") == std::string::npos) return "ncclGroupEnd said: " + why;
      if (waitDone(comm) != ncclSuccess) return "the queued AllReduce failed";
      if (sum != 3 || other != 0) return "sums " + std::to_string(sum) + ", " + std::to_string(other);
    } else {
      if (!refused.wait()) return "rank 0 never tried its group";
      std::string e = sumOfRanks(comm, 2, rank);  // pairs with rank 0's queued AllReduce
      if (!e.empty()) return e;
    }
    // Quiet now: a group runs.
    int32_t z = rank + 10, total = 0;
    ncclGroupStart();
    ncclAllReduce(&z, &total, 1, ncclInt32, ncclSum, comm, nullptr);
    const ncclResult_t r = ncclGroupEnd();
    if (r != ncclSuccess && r != ncclInProgress) return std::string("the second group: ") + ncclGetLastError(comm);
    if (waitDone(comm) != ncclSuccess) return "the second group failed";
    return total == 21 ? "" : "the second group gave " + std::to_string(total);
  });
  CHECK(errors[0] == "");
  CHECK(errors[1] == "");
}
