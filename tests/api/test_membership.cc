// Communicators whose members change. NCCL 2.32's ncclCommGetUniqueId +
// ncclCommGrow: 2 ranks grow to 4, as threads and as processes; the grown
// communicator runs collectives and point-to-point against values computed
// here, the old one keeps working, and every misuse (a second id before the
// first is consumed, no id or two ids among the existing ranks, an id this
// communicator did not make, disagreeing sizes, bad ranks) is refused by name
// on every rank. ncclCommRevoke: a peer blocked on the revoking rank fails
// fast, later calls are refused, split still works. ncclCommShrink: without
// a live rank, without an aborted one, without a SIGKILLed process.
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include <catch2/catch.hpp>
#include <cstring>
#include <string>
#include <vector>

#include "harness.h"

using namespace plait_test;

namespace {

std::string says(ncclComm_t comm, const char* text) {
  const char* e = ncclGetLastError(comm);
  return std::strstr(e, text) != nullptr ? "" : std::string("expected '") + text + "', got: " + e;
}

// Collectives and a ring of sends on `comm` (n ranks, this one `rank`).
std::string exercise(ncclComm_t comm, int rank, int n) {
  int count = 0, me = -1;
  if (ncclCommCount(comm, &count) != ncclSuccess || count != n) return "ncclCommCount says " + std::to_string(count);
  if (ncclCommUserRank(comm, &me) != ncclSuccess || me != rank) return "ncclCommUserRank says " + std::to_string(me);
  constexpr size_t kCount = 3000;
  std::vector<float> buf(kCount);
  for (size_t i = 0; i < kCount; ++i) buf[i] = static_cast<float>(rank + 1) * static_cast<float>(i % 7 + 1);
  if (ncclAllReduce(buf.data(), buf.data(), kCount, ncclFloat32, ncclSum, comm, nullptr) != ncclSuccess)
    return std::string("AllReduce: ") + ncclGetLastError(comm);
  const float ranks = static_cast<float>(n * (n + 1) / 2);
  for (size_t i = 0; i < kCount; ++i)
    if (buf[i] != ranks * static_cast<float>(i % 7 + 1)) return "AllReduce element " + std::to_string(i) + " wrong";
  std::vector<int32_t> mine(5, rank * 10), all(5 * n, -1);
  if (ncclAllGather(mine.data(), all.data(), 5, ncclInt32, comm, nullptr) != ncclSuccess)
    return std::string("AllGather: ") + ncclGetLastError(comm);
  for (int r = 0; r < n; ++r)
    if (all[5 * r + 4] != r * 10) return "AllGather block " + std::to_string(r) + " wrong";
  int64_t word = rank == n - 1 ? 777 : -1;
  if (ncclBroadcast(&word, &word, 1, ncclInt64, n - 1, comm, nullptr) != ncclSuccess || word != 777)
    return std::string("Broadcast from the last rank: ") + ncclGetLastError(comm);
  int32_t out = rank, in = -1;
  if (ncclGroupStart() != ncclSuccess || ncclSend(&out, 1, ncclInt32, (rank + 1) % n, comm, nullptr) != ncclSuccess ||
      ncclRecv(&in, 1, ncclInt32, (rank + n - 1) % n, comm, nullptr) != ncclSuccess || ncclGroupEnd() != ncclSuccess)
    return std::string("send/recv: ") + ncclGetLastError(comm);
  if (in != (rank + n - 1) % n) return "received " + std::to_string(in) + " from the ring predecessor";
  return "";
}

}  // namespace

TEST_CASE("ncclCommGrow: 2 thread ranks grow to 4; the old communicator stays usable", "[grow]") {
  auto failed = runGrownThreads(2, 4, [](int rank, ncclComm_t grown, ncclComm_t old) -> std::string {
    std::string e = exercise(grown, rank, 4);
    if (!e.empty()) return "grown: " + e;
    if (old != nullptr && !(e = exercise(old, rank, 2)).empty()) return "old: " + e;
    return "";
  });
  CHECK(failed == std::vector<std::string>{});
}

TEST_CASE("ncclCommGrow: misuse is refused by name, on every existing rank alike", "[grow]") {
  ncclComm_t out = nullptr;
  ncclUniqueId foreign;
  REQUIRE(ncclGetUniqueId(&foreign) == ncclSuccess);
  // Newcomers' arguments, checked without any communicator.
  CHECK(ncclCommGrow(nullptr, 4, nullptr, 2, &out, nullptr) == ncclInvalidArgument);
  CHECK(says(nullptr, "a new rank (comm = NULL) needs the root's id") == "");
  CHECK(ncclCommGrow(nullptr, 4, &foreign, 4, &out, nullptr) == ncclInvalidArgument);
  CHECK(says(nullptr, "in [0, 4)") == "");
  CHECK(ncclCommGrow(nullptr, 0, &foreign, 0, &out, nullptr) == ncclInvalidArgument);
  CHECK(ncclCommGrow(nullptr, 4, &foreign, 2, nullptr, nullptr) == ncclInvalidArgument);

  auto failed = runThreads(2, [&](int rank, ncclComm_t comm) -> std::string {
    ncclComm_t grown = nullptr;
    std::string e;
    ncclUniqueId gid{}, replaced{};
    if (rank == 0) {
      // A second id replaces one not consumed (a failed grow must not leave
      // the communicator unable to grow again; review of 2026-11-30).
      if (ncclCommGetUniqueId(comm, &replaced) != ncclSuccess)
        return std::string("GetUniqueId: ") + ncclGetLastError(comm);
      if (ncclCommGetUniqueId(comm, &gid) != ncclSuccess)
        return std::string("a second GetUniqueId: ") + ncclGetLastError(comm);
    }
    // Local checks.
    if (ncclCommGrow(comm, 4, nullptr, rank, &grown, nullptr) != ncclInvalidArgument) return "existing rank != -1";
    if (!(e = says(comm, "an existing rank passes -1")).empty()) return e;
    if (ncclCommGrow(comm, 2, nullptr, -1, &grown, nullptr) != ncclInvalidArgument) return "no growth";
    if (!(e = says(comm, "needs more")).empty()) return e;
    // Collective checks: every rank gets the same refusal.
    if (ncclCommGrow(comm, 4, nullptr, -1, &grown, nullptr) != ncclInvalidUsage) return "no id among the ranks";
    if (!(e = says(comm, "no rank passed the id")).empty()) return e;
    if (ncclCommGrow(comm, 4, &gid, -1, &grown, nullptr) != ncclInvalidUsage) return "two ids";
    if (!(e = says(comm, "ranks 0 and 1 both passed an id")).empty()) return e;
    if (ncclCommGrow(comm, 4, rank == 1 ? &foreign : nullptr, -1, &grown, nullptr) != ncclInvalidUsage)
      return "a foreign id";
    if (!(e = says(comm, "did not make on this communicator")).empty()) return e;
    if (ncclCommGrow(comm, 4, rank == 0 ? &replaced : nullptr, -1, &grown, nullptr) != ncclInvalidUsage)
      return "a replaced id";
    if (!(e = says(comm, "did not make on this communicator")).empty()) return e;
    if (ncclCommGrow(comm, 3 + rank, rank == 0 ? &gid : nullptr, -1, &grown, nullptr) != ncclInvalidArgument)
      return "disagreeing sizes";
    if (!(e = says(comm, "asks for")).empty()) return e;
    if (grown != nullptr) return "a refused grow made a communicator";
    // Nothing was broken by the refusals: the communicator works, and can
    // still make an id for a grow.
    float x = 1.0f;
    if (ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comm, nullptr) != ncclSuccess || x != 2.0f)
      return "the communicator broke";
    ncclUniqueId again;
    if (rank == 0 && ncclCommGetUniqueId(comm, &again) != ncclSuccess) return "no id after the refusals";
    return "";
  });
  CHECK(failed == std::vector<std::string>{});
}

// Processes: old ranks 0 and 1, newcomers 2 and 3 (forked first, waiting on
// a pipe for the id old rank 0 makes).
TEST_CASE("ncclCommGrow: 2 process ranks grow to 4", "[grow][process]") {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  auto codes = runProcesses(4, [&](int rank, const ncclUniqueId& id) -> int {
    ncclComm_t old = nullptr, grown = nullptr;
    if (rank < 2) {
      if (ncclCommInitRank(&old, 2, id, rank) != ncclSuccess) return 10;
      ncclUniqueId gid{};
      if (rank == 0) {
        if (ncclCommGetUniqueId(old, &gid) != ncclSuccess) return 11;
        for (int k = 0; k < 2; ++k)
          if (::write(fds[1], &gid, sizeof gid) != static_cast<ssize_t>(sizeof gid)) return 12;
      }
      if (ncclCommGrow(old, 4, rank == 0 ? &gid : nullptr, -1, &grown, nullptr) != ncclSuccess) return 13;
    } else {
      pollfd p{fds[0], POLLIN, 0};
      if (::poll(&p, 1, 60000) != 1) return 20;
      ncclUniqueId gid;
      if (::read(fds[0], &gid, sizeof gid) != static_cast<ssize_t>(sizeof gid)) return 21;
      if (ncclCommGrow(nullptr, 4, &gid, rank, &grown, nullptr) != ncclSuccess) return 22;
    }
    const std::string e = exercise(grown, rank, 4);
    if (!e.empty()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, e.c_str());
      return 30;
    }
    if (old != nullptr && !exercise(old, rank, 2).empty()) return 31;
    ncclCommDestroy(grown);
    if (old != nullptr) ncclCommDestroy(old);
    return 0;
  });
  ::close(fds[0]);
  ::close(fds[1]);
  CHECK(codes == std::vector<int>{0, 0, 0, 0});
}

TEST_CASE("ncclCommShrink: the survivors of 4 thread ranks keep their order", "[shrink]") {
  auto failed = runThreads(4, [](int rank, ncclComm_t comm) -> std::string {
    if (rank == 1) return "";  // excluded: does not call
    int excluded[] = {1};
    ncclComm_t shrunk = nullptr;
    if (ncclCommShrink(comm, excluded, 1, &shrunk, nullptr, NCCL_SHRINK_DEFAULT) != ncclSuccess)
      return std::string("ncclCommShrink: ") + ncclGetLastError(comm);
    const std::string e = exercise(shrunk, rank == 0 ? 0 : rank - 1, 3);
    ncclCommDestroy(shrunk);
    return e;
  });
  CHECK(failed == std::vector<std::string>{});
}

TEST_CASE("ncclCommShrink with NCCL_SHRINK_ABORT after a rank aborted mid-job", "[shrink]") {
  auto failed = runThreads(4, [](int rank, ncclComm_t comm) -> std::string {
    if (rank == 2) {  // "dies": its communicator goes away under the others
      ncclCommAbort(comm);
      return "";
    }
    float x = 1.0f;
    if (ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comm, nullptr) == ncclSuccess)
      return "an AllReduce without rank 2 succeeded";
    int excluded[] = {2};
    ncclComm_t shrunk = nullptr;
    if (ncclCommShrink(comm, excluded, 1, &shrunk, nullptr, NCCL_SHRINK_ABORT) != ncclSuccess)
      return std::string("ncclCommShrink: ") + ncclGetLastError(comm);
    std::string e = exercise(shrunk, rank == 3 ? 2 : rank, 3);
    if (e.empty() && (ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comm, nullptr) != ncclInvalidUsage ||
                      !says(comm, "revoked").empty()))
      e = "the parent was not revoked by NCCL_SHRINK_ABORT";
    ncclCommDestroy(shrunk);
    return e;
  });
  CHECK(failed == std::vector<std::string>{});
}

TEST_CASE("ncclCommShrink: bad lists and disagreeing survivors are refused", "[shrink]") {
  auto failed = runThreads(4, [](int rank, ncclComm_t comm) -> std::string {
    ncclComm_t shrunk = nullptr;
    std::string e;
    int self[] = {rank}, outside[] = {4}, twice[] = {(rank + 1) % 4, (rank + 1) % 4};
    if (ncclCommShrink(comm, nullptr, 1, &shrunk, nullptr, 0) != ncclInvalidArgument) return "NULL list";
    if (ncclCommShrink(comm, outside, 0, &shrunk, nullptr, 0) != ncclInvalidArgument) return "empty list";
    if (ncclCommShrink(comm, outside, 1, &shrunk, nullptr, 0) != ncclInvalidArgument ||
        !(e = says(comm, "outside [0, 4)")).empty())
      return "rank 4: " + e;
    if (ncclCommShrink(comm, twice, 2, &shrunk, nullptr, 0) != ncclInvalidArgument ||
        !(e = says(comm, "twice")).empty())
      return "a rank twice: " + e;
    if (ncclCommShrink(comm, self, 1, &shrunk, nullptr, 0) != ncclInvalidArgument ||
        !(e = says(comm, "an excluded rank does not call")).empty())
      return "itself: " + e;
    if (ncclCommShrink(comm, outside, 1, &shrunk, nullptr, 4) != ncclInvalidArgument) return "bad flags";
    if (rank == 3) return "";
    // Ranks 0 and 1 exclude {3}; rank 2 excludes {1, 3}: same root (0), other lists.
    int mostly[] = {3}, more[] = {1, 3};
    if (rank == 1 && ncclCommShrink(comm, mostly, 1, &shrunk, nullptr, 0) != ncclInvalidUsage)
      return "rank 1 was not told of rank 2's refusal";
    if (rank == 0 && (ncclCommShrink(comm, mostly, 1, &shrunk, nullptr, 0) != ncclInvalidUsage ||
                      !(e = says(comm, "rank 2 passed another list")).empty()))
      return "the root: " + e;
    if (rank == 2 && (ncclCommShrink(comm, more, 2, &shrunk, nullptr, 0) != ncclInvalidUsage ||
                      !(e = says(comm, "every survivor passes the same list")).empty()))
      return "rank 2: " + e;
    return shrunk == nullptr ? "" : "a refused shrink made a communicator";
  });
  CHECK(failed == std::vector<std::string>{});
}

TEST_CASE("ncclCommRevoke: the peer blocked on this rank fails fast; split still works", "[revoke]") {
  CHECK(ncclCommRevoke(nullptr, 0) == ncclSuccess);  // as NCCL
  auto failed = runThreads(2, [](int rank, ncclComm_t comm) -> std::string {
    float x = 1.0f;
    if (rank == 0) {  // waits for rank 1, which revokes instead of joining
      const auto start = std::chrono::steady_clock::now();
      if (ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comm, nullptr) == ncclSuccess)
        return "an AllReduce rank 1 never joined succeeded";
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (s > 30) return "the blocked AllReduce took " + std::to_string(s) + " s to fail";
    } else {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      if (ncclCommRevoke(comm, 1) != ncclInvalidArgument) return "revokeFlags 1 accepted";
      if (ncclCommRevoke(comm, 0) != ncclSuccess) return std::string("ncclCommRevoke: ") + ncclGetLastError(comm);
      if (ncclCommRevoke(comm, 0) != ncclInvalidArgument) return "revoked twice";
      std::string e;
      if (ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comm, nullptr) != ncclInvalidUsage ||
          !(e = says(comm, "revoked (ncclCommRevoke)")).empty())
        return "a call after revoke: " + e;
    }
    ncclComm_t child = nullptr;
    if (ncclCommSplit(comm, 0, rank, &child, nullptr) != ncclSuccess)
      return std::string("split after revoke: ") + ncclGetLastError(comm);
    const std::string e = exercise(child, rank, 2);
    ncclCommDestroy(child);
    return e;
  });
  CHECK(failed == std::vector<std::string>{});
}

// A SIGKILLed process: the survivors' next collective fails naming it, and
// they shrink and go on.
TEST_CASE("ncclCommShrink: 3 of 4 processes go on after the fourth is killed", "[shrink][process]") {
  auto codes = runProcesses(4, [](int rank, const ncclUniqueId& id) -> int {
    ncclComm_t comm = nullptr, shrunk = nullptr;
    if (ncclCommInitRank(&comm, 4, id, rank) != ncclSuccess) return 10;
    float x = 1.0f;
    if (ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comm, nullptr) != ncclSuccess || x != 4.0f) return 11;
    if (rank == 3) ::raise(SIGKILL);
    if (ncclAllReduce(&x, &x, 1, ncclFloat32, ncclSum, comm, nullptr) == ncclSuccess) return 12;
    int excluded[] = {3};
    if (ncclCommShrink(comm, excluded, 1, &shrunk, nullptr, NCCL_SHRINK_ABORT) != ncclSuccess) {
      std::fprintf(stderr, "rank %d: %s\n", rank, ncclGetLastError(comm));
      return 13;
    }
    const std::string e = exercise(shrunk, rank, 3);
    if (!e.empty()) {
      std::fprintf(stderr, "rank %d: %s\n", rank, e.c_str());
      return 14;
    }
    ncclCommDestroy(shrunk);
    ncclCommDestroy(comm);
    return 0;
  });
  CHECK(codes == std::vector<int>{0, 0, 0, -SIGKILL});
}
