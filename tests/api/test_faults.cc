// Nothing hangs: abort unblocks waits, a dead peer is an error naming it.
#include <catch2/catch.hpp>

#include <signal.h>
#include <stdlib.h>

#include <chrono>
#include <cstring>

#include "harness.h"

using Clock = std::chrono::steady_clock;

TEST_CASE("ncclCommAbort from another thread unblocks a waiting AllReduce", "[faults]") {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t comms[2] = {nullptr, nullptr};
  ncclResult_t init1Result = ncclInternalError;  // Catch2 assertions stay on the test's thread
  std::thread init1([&] { init1Result = ncclCommInitRank(&comms[1], 2, id, 1); });
  const ncclResult_t init0Result = ncclCommInitRank(&comms[0], 2, id, 0);
  init1.join();
  REQUIRE(init0Result == ncclSuccess);
  REQUIRE(init1Result == ncclSuccess);
  // Rank 1 never joins the collective; rank 0 waits until aborted.
  std::vector<float> buf(1 << 16, 1.0f);
  ncclResult_t result = ncclSuccess;
  auto start = Clock::now();
  std::thread waiter([&] { result = ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comms[0], nullptr); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto abortAt = Clock::now();
  REQUIRE(ncclCommAbort(comms[0]) == ncclSuccess);
  waiter.join();
  auto unblocked = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - abortAt).count();
  CHECK(result != ncclSuccess);
  CHECK(unblocked < 1000);
  CHECK(std::chrono::duration_cast<std::chrono::milliseconds>(abortAt - start).count() >= 250);
  CHECK(ncclCommDestroy(comms[1]) == ncclSuccess);
}

TEST_CASE("A rank killed mid-collective makes the others fail with ncclRemoteError naming it", "[faults]") {
  // PLAIT_TIMEOUT is minutes by default: the failure comes from detection.
  auto codes = plait_test::runProcesses(3, [](int rank, const ncclUniqueId& id) {
    ncclComm_t comm = nullptr;
    if (ncclCommInitRank(&comm, 3, id, rank) != ncclSuccess) return 10;
    std::vector<float> buf(1 << 18, 1.0f);
    for (int iter = 0; iter < 1000000; ++iter) {
      if (rank == 2 && iter == 5) raise(SIGKILL);
      ncclResult_t r = ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr);
      if (r != ncclSuccess) {
        const char* msg = ncclGetLastError(comm);
        const bool named = std::strstr(msg, "rank 2") != nullptr;
        ncclCommAbort(comm);
        return r == ncclRemoteError && named ? 0 : 20 + r;
      }
    }
    return 30;  // never noticed
  });
  CHECK(codes[0] == 0);
  CHECK(codes[1] == 0);
  CHECK(codes[2] == -SIGKILL);
}

TEST_CASE("A rank that aborted and exited is not reported dead", "[faults]") {
  auto codes = plait_test::runProcesses(3, [](int rank, const ncclUniqueId& id) {
    ncclComm_t comm = nullptr;
    if (ncclCommInitRank(&comm, 3, id, rank) != ncclSuccess) return 10;
    if (rank == 2) {  // gives up on its own (an error of its own, say) and exits cleanly
      ncclCommAbort(comm);
      return 0;
    }
    usleep(300 * 1000);  // rank 2 is gone by now
    std::vector<float> buf(1 << 16, 1.0f);
    ncclResult_t r = ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat, ncclSum, comm, nullptr);
    std::string msg = ncclGetLastError(comm);
    ncclCommAbort(comm);
    if (r != ncclRemoteError) return 20;
    if (msg.find("rank 2") == std::string::npos) return 21;
    if (msg.find("dead: rank 2") != std::string::npos) return 22;  // it did not die
    return 0;
  });
  CHECK(codes[0] == 0);
  CHECK(codes[1] == 0);
  CHECK(codes[2] == 0);
}

// Run with PLAIT_TIMEOUT=1 (see CMakeLists.txt).
TEST_CASE("A wait that passes PLAIT_TIMEOUT fails instead of hanging", "[timeout]") {
  auto codes = plait_test::runProcesses(2, [](int rank, const ncclUniqueId& id) {
    ncclComm_t comm = nullptr;
    if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) return 10;
    if (rank == 1) {  // alive but silent: only the deadline can end rank 0's wait
      sleep(4);
      ncclCommAbort(comm);
      return 0;
    }
    float x = 1;
    auto start = Clock::now();
    ncclResult_t r = ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comm, nullptr);
    auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    ncclCommAbort(comm);
    return r != ncclSuccess && ms < 3500 ? 0 : 20;
  });
  CHECK(codes[0] == 0);
  CHECK(codes[1] == 0);
}

// A single-copy send (cross-memory attach, the default between local
// processes where permitted) waits for the receiver to release its
// descriptor. A receiver that aborts instead must fail that wait: the loop
// used to see "ready" (the peer aborted) without ever acting on it, and spun.
TEST_CASE("A single-copy send whose receiver aborts fails instead of spinning", "[faults]") {
  auto codes = plait_test::runProcesses(2, [](int rank, const ncclUniqueId& id) {
    ncclComm_t comm = nullptr;
    if (ncclCommInitRank(&comm, 2, id, rank) != ncclSuccess) return 10;
    std::vector<char> buf(1 << 20, 7);
    if (rank == 0) {  // never receives: aborts while the sender waits, then stays alive
      usleep(300 * 1000);
      ncclCommAbort(comm);
      sleep(3);
      return 0;
    }
    const auto start = Clock::now();
    ncclResult_t r = ncclSend(buf.data(), buf.size(), ncclChar, 0, comm, nullptr);
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    std::string msg = ncclGetLastError(comm);
    ncclCommAbort(comm);
    if (r != ncclRemoteError) return 20;
    if (msg.find("rank 0") == std::string::npos || msg.find("aborted") == std::string::npos) return 21;
    return ms < 2500 ? 0 : 22;  // before rank 0 exits: the abort, not the death, ended it
  });
  CHECK(codes[0] == 0);
  CHECK(codes[1] == 0);
}
