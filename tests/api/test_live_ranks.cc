// The live-ranks mode (PLAIT_LIVE_RANKS=1, plait/live_ranks.h): a rank of 3
// forked ranks exits between two calls, and the survivors' next calls must
// go on over the two of them with the results the README states, for every
// collective, each checked against values computed here. The random kills
// are tests/soak/live_soak's.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "direct_test_env.h"
#include "harness.h"
#include "nccl.h"
#include "plait/live_ranks.h"

namespace {

constexpr int kRanks = 3, kLost = 2;
constexpr size_t kCount = 1000;
constexpr float kSentinel = -7.0f;

float value(int rank, size_t j) { return static_cast<float>((rank + 1) * 100 + static_cast<int>(j % 50)); }

std::vector<float> input(int rank, size_t n) {
  std::vector<float> v(n);
  for (size_t j = 0; j < n; ++j) v[j] = value(rank, j);
  return v;
}

// Out of line: GCC 12 warns (-Warray-bounds, falsely) on the concatenation inlined many times.
[[gnu::noinline]] std::string failure(const char* call, ncclResult_t r, ncclComm_t comm) {
  std::string out = call;
  out += ": ";
  out += ncclGetErrorString(r);
  out += ": ";
  out += ncclGetLastError(comm);
  return out;
}

#define EXPECT_OK(call)                                              \
  do {                                                               \
    if (ncclResult_t r_ = (call); r_ != ncclSuccess) return failure(#call, r_, comm); \
  } while (0)

std::string expect(bool ok, const std::string& what) { return ok ? "" : what; }

// The survivors' part, after rank kLost exited: every collective over ranks 0 and 1.
std::string survivors(ncclComm_t comm, int rank) {
  std::vector<float> out(kCount * kRanks, kSentinel);
  std::vector<float> in = input(rank, kCount * kRanks);
  // The first call after the loss finds it, agrees and runs again.
  EXPECT_OK(ncclAllReduce(in.data(), out.data(), kCount, ncclFloat32, ncclSum, comm, nullptr));
  plaitLiveCallReport_t rep{};
  EXPECT_OK(plaitCommLastCall(comm, &rep));
  if (rep.epoch != 1 || rep.contributors != 2 || rep.rerun != 1)
    return "report after the loss: epoch " + std::to_string(rep.epoch) + ", " + std::to_string(rep.contributors) +
           " contributors, rerun " + std::to_string(rep.rerun);
  for (size_t j = 0; j < kCount; ++j)
    if (out[j] != value(0, j) + value(1, j)) return "AllReduce over the survivors: element " + std::to_string(j);
  unsigned long long epoch = 0;
  int live[kRanks] = {};
  EXPECT_OK(plaitCommLiveRanks(comm, &epoch, live));
  if (epoch != 1 || live[0] != 1 || live[1] != 1 || live[2] != 0) return "the mask is not {1, 1, 0} at epoch 1";

  // Avg divides by the survivors.
  EXPECT_OK(ncclAllReduce(in.data(), out.data(), kCount, ncclFloat32, ncclAvg, comm, nullptr));
  for (size_t j = 0; j < kCount; ++j)
    if (out[j] != (value(0, j) + value(1, j)) / 2) return "Avg over 2: element " + std::to_string(j);
  EXPECT_OK(plaitCommLastCall(comm, &rep));
  if (rep.rerun != 0 || rep.contributors != 2) return "a call after the loss reports a rerun or other contributors";

  // AllGather: the lost rank's slot is left as it was.
  std::fill(out.begin(), out.end(), kSentinel);
  EXPECT_OK(ncclAllGather(in.data(), out.data(), kCount, ncclFloat32, comm, nullptr));
  for (int r = 0; r < kRanks; ++r)
    for (size_t j = 0; j < kCount; ++j)
      if (out[r * kCount + j] != (r == kLost ? kSentinel : value(r, j)))
        return "AllGather slot " + std::to_string(r) + " element " + std::to_string(j);

  // ReduceScatter: this rank's block, summed over the survivors.
  EXPECT_OK(ncclReduceScatter(in.data(), out.data(), kCount, ncclFloat32, ncclSum, comm, nullptr));
  for (size_t j = 0; j < kCount; ++j)
    if (out[j] != value(0, rank * kCount + j) + value(1, rank * kCount + j))
      return "ReduceScatter element " + std::to_string(j);

  // Reduce to rank 1.
  std::fill(out.begin(), out.end(), kSentinel);
  EXPECT_OK(ncclReduce(in.data(), out.data(), kCount, ncclFloat32, ncclMax, 1, comm, nullptr));
  if (rank == 1)
    for (size_t j = 0; j < kCount; ++j)
      if (out[j] != value(1, j)) return "Reduce(max) to rank 1 element " + std::to_string(j);

  // A Broadcast from the lost rank is refused by name, and the communicator goes on.
  const ncclResult_t lostRoot = ncclBroadcast(in.data(), out.data(), kCount, ncclFloat32, kLost, comm, nullptr);
  const std::string why = ncclGetLastError(comm);
  if (lostRoot != ncclRemoteError || why.find("rank 2, was lost") == std::string::npos)
    return "Broadcast from the lost rank: " + std::string(ncclGetErrorString(lostRoot)) + ": " + why;
  EXPECT_OK(ncclBroadcast(in.data(), out.data(), kCount, ncclFloat32, 0, comm, nullptr));
  for (size_t j = 0; j < kCount; ++j)
    if (out[j] != value(0, j)) return "Broadcast from rank 0 element " + std::to_string(j);

  // Gather to rank 0, Scatter from rank 1, AlltoAll: lost slots untouched.
  std::fill(out.begin(), out.end(), kSentinel);
  EXPECT_OK(ncclGather(in.data(), out.data(), kCount, ncclFloat32, 0, comm, nullptr));
  if (rank == 0)
    for (int r = 0; r < kRanks; ++r)
      for (size_t j = 0; j < kCount; ++j)
        if (out[r * kCount + j] != (r == kLost ? kSentinel : value(r, j))) return "Gather slot " + std::to_string(r);
  EXPECT_OK(ncclScatter(in.data(), out.data(), kCount, ncclFloat32, 1, comm, nullptr));
  for (size_t j = 0; j < kCount; ++j)
    if (out[j] != value(1, rank * kCount + j)) return "Scatter from rank 1 element " + std::to_string(j);
  std::fill(out.begin(), out.end(), kSentinel);
  EXPECT_OK(ncclAlltoAll(in.data(), out.data(), kCount, ncclFloat32, comm, nullptr));
  for (int r = 0; r < kRanks; ++r)
    for (size_t j = 0; j < kCount; ++j)
      if (out[r * kCount + j] != (r == kLost ? kSentinel : value(r, rank * kCount + j)))
        return "AlltoAll slot " + std::to_string(r);

  // Point to point between the survivors; to the lost rank, refused by name.
  if (rank == 0) EXPECT_OK(ncclSend(in.data(), kCount, ncclFloat32, 1, comm, nullptr));
  if (rank == 1) {
    EXPECT_OK(ncclRecv(out.data(), kCount, ncclFloat32, 0, comm, nullptr));
    for (size_t j = 0; j < kCount; ++j)
      if (out[j] != value(0, j)) return "Recv from rank 0 element " + std::to_string(j);
  }
  const ncclResult_t toLost = ncclSend(in.data(), kCount, ncclFloat32, kLost, comm, nullptr);
  if (toLost != ncclRemoteError) return "Send to the lost rank: " + std::string(ncclGetErrorString(toLost));

  // Several operations in one group are refused after a loss.
  ncclGroupStart();
  ncclAllReduce(in.data(), out.data(), kCount, ncclFloat32, ncclSum, comm, nullptr);
  ncclAllReduce(in.data(), out.data(), kCount, ncclFloat32, ncclSum, comm, nullptr);
  const ncclResult_t group = ncclGroupEnd();
  if (group != ncclInvalidUsage) return "a group of two after the loss: " + std::string(ncclGetErrorString(group));
  // And the communicator still works.
  EXPECT_OK(ncclAllReduce(in.data(), out.data(), kCount, ncclFloat32, ncclSum, comm, nullptr));
  return expect(out[0] == value(0, 0) + value(1, 0), "AllReduce after the refusals");
}

std::string allThree(ncclComm_t comm, int rank) {
  std::vector<float> in = input(rank, kCount), out(kCount);
  EXPECT_OK(ncclAllReduce(in.data(), out.data(), kCount, ncclFloat32, ncclSum, comm, nullptr));
  plaitLiveCallReport_t rep{};
  EXPECT_OK(plaitCommLastCall(comm, &rep));
  if (rep.epoch != 0 || rep.contributors != kRanks || rep.rerun != 0) return "report before any loss";
  for (size_t j = 0; j < kCount; ++j)
    if (out[j] != value(0, j) + value(1, j) + value(2, j)) return "AllReduce of 3, element " + std::to_string(j);
  return "";
}

}  // namespace

TEST_CASE("live ranks: after a rank is lost, every collective goes on over the survivors", "[process]") {
  const auto codes = plait_test::runProcesses(kRanks, [](int rank, const ncclUniqueId& id) {
    setenv("PLAIT_LIVE_RANKS", "1", 1);
    setenv("PLAIT_TIMEOUT", "20", 1);
    plait_test::resetLibrarySettings();
    ncclComm_t comm = nullptr;
    if (ncclCommInitRank(&comm, kRanks, id, rank) != ncclSuccess) {
      std::fprintf(stderr, "rank %d: init: %s\n", rank, ncclGetLastError(nullptr));
      return 2;
    }
    std::string e = allThree(comm, rank);
    if (e.empty() && rank == kLost) _exit(0);  // gone without a word, between two calls
    if (e.empty()) e = survivors(comm, rank);
    if (!e.empty()) std::fprintf(stderr, "rank %d: %s\n", rank, e.c_str());
    ncclCommDestroy(comm);
    return e.empty() ? 0 : 1;
  });
  for (int c : codes) CHECK(c == 0);
  unsetenv("PLAIT_LIVE_RANKS");
  unsetenv("PLAIT_TIMEOUT");
  plait_test::resetLibrarySettings();
}

TEST_CASE("live ranks: ranks that disagree on the mode fail init; queries need the mode", "[process]") {
  const auto codes = plait_test::runProcesses(2, [](int rank, const ncclUniqueId& id) {
    setenv("PLAIT_LIVE_RANKS", rank == 0 ? "1" : "0", 1);
    plait_test::resetLibrarySettings();
    ncclComm_t comm = nullptr;
    const ncclResult_t r = ncclCommInitRank(&comm, 2, id, rank);
    const std::string why = ncclGetLastError(nullptr);
    if (r == ncclSuccess) ncclCommDestroy(comm);
    const bool named = why.find("PLAIT_LIVE_RANKS differs across ranks: rank 0 has 1, rank 1 has 0") != std::string::npos;
    if (r != ncclInvalidUsage || !named) std::fprintf(stderr, "rank %d: %d %s\n", rank, r, why.c_str());
    return r == ncclInvalidUsage && named ? 0 : 1;
  });
  for (int c : codes) CHECK(c == 0);
  unsetenv("PLAIT_LIVE_RANKS");
  plait_test::resetLibrarySettings();
  const auto failed = plait_test::runThreads(1, [](int, ncclComm_t comm) -> std::string {
    unsigned long long epoch = 0;
    const ncclResult_t r = plaitCommLiveRanks(comm, &epoch, nullptr);
    const std::string why = ncclGetLastError(comm);
    if (r != ncclInvalidUsage || why.find("not in the live-ranks mode") == std::string::npos)
      return "plaitCommLiveRanks without the mode: " + std::string(ncclGetErrorString(r)) + ": " + why;
    plaitLiveCallReport_t rep{};
    if (plaitCommLastCall(comm, &rep) != ncclInvalidUsage) return "plaitCommLastCall without the mode";
    if (plaitCommLastCall(comm, nullptr) != ncclInvalidArgument) return "plaitCommLastCall(NULL)";
    return "";
  });
  for (const std::string& f : failed) FAIL(f);
  // Bad settings fail init naming them.
  for (auto [name, value, says] : {std::tuple{"PLAIT_LIVE_RANKS", "7", "PLAIT_LIVE_RANKS=7: expected 0 (off) or 1"},
                                   std::tuple{"PLAIT_LIVE_AGREE_MS", "-3", "PLAIT_LIVE_AGREE_MS=-3: must be 0"},
                                   std::tuple{"PLAIT_LIVE_HISTORY_BYTES", "-1", "PLAIT_LIVE_HISTORY_BYTES=-1: must be"}}) {
    setenv("PLAIT_LIVE_RANKS", "1", 1);
    setenv(name, value, 1);
    plait_test::resetLibrarySettings();
    const auto refused = plait_test::runThreads(1, [](int, ncclComm_t) { return std::string("init succeeded"); });
    unsetenv(name);
    unsetenv("PLAIT_LIVE_RANKS");
    plait_test::resetLibrarySettings();
    INFO(name << "=" << value);
    REQUIRE(refused.size() == 1);
    CHECK(refused[0].find(says) != std::string::npos);
  }
}
