// Communicator lifetime against groups: abort or destroy while a group holds
// operations on the communicator, from the group's thread or another one
// (PyTorch's watchdog aborts from its own thread). Before the fix a group kept
// a raw pointer to the communicator that destroy/abort freed; under the
// sanitizer build these cases read freed memory, in a normal build they
// crashed. Every call here must return an error, never crash or hang.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "harness.h"

namespace {

bool lastErrorMentions(const char* text) { return std::strstr(ncclGetLastError(nullptr), text) != nullptr; }

// Two communicators of one id, ranks as threads. Failures of rank 1's init
// are reported by the return value (Catch2 v2 assertions are not thread-safe).
bool initPair(ncclComm_t comms[2]) {
  ncclUniqueId id;
  if (ncclGetUniqueId(&id) != ncclSuccess) return false;
  ncclResult_t r1 = ncclInternalError;
  std::thread t([&] { r1 = ncclCommInitRank(&comms[1], 2, id, 1); });
  const ncclResult_t r0 = ncclCommInitRank(&comms[0], 2, id, 0);
  t.join();
  return r0 == ncclSuccess && r1 == ncclSuccess;
}

}  // namespace

TEST_CASE("ncclCommAbort from another thread while ncclGroupEnd waits in a grouped receive", "[lifetime]") {
  ncclComm_t comms[2] = {nullptr, nullptr};
  REQUIRE(initPair(comms));
  std::vector<float> buf(1 << 16, 1.0f);
  ncclResult_t groupResult = ncclSuccess;
  std::thread rank0([&] {
    ncclGroupStart();
    ncclRecv(buf.data(), buf.size(), ncclFloat, 1, comms[0], nullptr);
    groupResult = ncclGroupEnd();  // rank 1 never sends: only the abort ends this
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK(ncclCommAbort(comms[0]) == ncclSuccess);  // the watchdog
  rank0.join();
  CHECK(groupResult != ncclSuccess);
  CHECK(ncclCommAbort(comms[1]) == ncclSuccess);
}

TEST_CASE("ncclCommDestroy inside a group makes ncclGroupEnd fail on every rank", "[lifetime]") {
  ncclComm_t comms[2] = {nullptr, nullptr};
  REQUIRE(initPair(comms));
  float x[4] = {1, 2, 3, 4};
  ncclResult_t results[2] = {ncclSuccess, ncclSuccess};
  std::string messages[2];
  std::thread peer([&] {
    ncclGroupStart();
    ncclRecv(x, 4, ncclFloat, 0, comms[1], nullptr);
    ncclCommDestroy(comms[1]);
    results[1] = ncclGroupEnd();
    messages[1] = ncclGetLastError(nullptr);
  });
  float y[4] = {0};
  ncclGroupStart();
  ncclSend(y, 4, ncclFloat, 1, comms[0], nullptr);
  ncclCommDestroy(comms[0]);
  results[0] = ncclGroupEnd();
  messages[0] = ncclGetLastError(nullptr);
  peer.join();
  for (int r = 0; r < 2; ++r) {
    INFO("rank " << r << ": " << messages[r]);
    CHECK(results[r] == ncclInvalidUsage);
    CHECK(messages[r].find("destroyed or aborted") != std::string::npos);
  }
}

TEST_CASE("ncclGroupSimulateEnd after the group's communicator was destroyed", "[lifetime]") {
  ncclComm_t comms[2] = {nullptr, nullptr};
  REQUIRE(initPair(comms));
  float x = 1;
  ncclGroupStart();
  ncclAllReduce(&x, &x, 1, ncclFloat, ncclSum, comms[0], nullptr);
  CHECK(ncclCommDestroy(comms[0]) == ncclSuccess);
  ncclSimInfo_t info = NCCL_SIM_INFO_INITIALIZER;
  CHECK(ncclGroupSimulateEnd(&info) == ncclInvalidUsage);
  CHECK(lastErrorMentions("destroyed or aborted"));
  // The group is closed: a new one works normally.
  CHECK(ncclGroupStart() == ncclSuccess);
  CHECK(ncclGroupEnd() == ncclSuccess);
  CHECK(ncclCommDestroy(comms[1]) == ncclSuccess);
}

TEST_CASE("Aborting a communicator whose creation a group deferred", "[lifetime]") {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t comm = nullptr;
  ncclGroupStart();
  REQUIRE(ncclCommInitRank(&comm, 1, id, 0) == ncclSuccess);  // created at ncclGroupEnd
  REQUIRE(comm != nullptr);
  CHECK(ncclCommAbort(comm) == ncclSuccess);
  CHECK(ncclGroupEnd() == ncclInvalidUsage);
  CHECK(lastErrorMentions("before ncclGroupEnd created it"));
}

TEST_CASE("Aborting a non-blocking initialisation that waits for a missing rank", "[lifetime]") {
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  for (int delayMs : {0, 1, 20, 200}) {  // abort at different points of the init thread
    ncclComm_t comm = nullptr;
    REQUIRE(ncclCommInitRankConfig(&comm, 2, id, 0, &config) == ncclInProgress);  // rank 1 never comes
    std::this_thread::sleep_for(std::chrono::milliseconds(delayMs));
    CHECK(ncclCommAbort(comm) == ncclSuccess);
    ncclResult_t state = ncclSuccess;
    CHECK(ncclCommGetAsyncError(comm, &state) == ncclInvalidArgument);  // a tombstone now
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);                        // a fresh root each round
  }
}

// Run with PLAIT_DIRECT_CHUNK_BYTES=-1 (see CMakeLists.txt): the value used
// to throw std::length_error through ncclCommInitRank (std::terminate); or
// with another of the path settings out of range, which names that one.
TEST_CASE("A negative PLAIT_DIRECT_CHUNK_BYTES is an error naming it", "[badchunk]") {
  std::string setting = "PLAIT_DIRECT_CHUNK_BYTES";
  for (const char* other : {"PLAIT_DIRECT_CMA_MIN_BYTES", "PLAIT_DIRECT_CMA_MAX_BYTES",
                            "PLAIT_P2P_SCATTER_CMA_MIN_BYTES", "PLAIT_ALLTOALL_CMA", "PLAIT_DIRECT_CMA_EXPLORE_MS",
                            "PLAIT_DIRECT_CMA_REDUCE_MIN_BYTES", "PLAIT_P2P_PUT_WAIT_US"})
    if (std::getenv(other) != nullptr) setting = other;
  INFO(setting);
  ncclUniqueId id;
  REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
  ncclComm_t comms[2] = {nullptr, nullptr};
  ncclResult_t r1 = ncclSuccess;
  std::string message1;
  std::thread t([&] {
    r1 = ncclCommInitRank(&comms[1], 2, id, 1);
    message1 = ncclGetLastError(nullptr);
  });
  const ncclResult_t r0 = ncclCommInitRank(&comms[0], 2, id, 0);
  t.join();
  CHECK(r0 == ncclInvalidArgument);
  CHECK(r1 != ncclSuccess);
  CHECK(lastErrorMentions(setting.c_str()));
  INFO(message1);
  CHECK((r1 == ncclRemoteError || message1.find(setting) != std::string::npos));
}
