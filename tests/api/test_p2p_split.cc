// ncclCommSplit (colors, keys, NCCL_SPLIT_NOCOLOR) with the split
// communicators running collectives alongside their parent, and
// ncclCommInitAll communicators driven from threads and from one thread.
#include <algorithm>
#include <catch2/catch.hpp>
#include <numeric>
#include <thread>

#include "coll_util.h"
#include "p2p_util.h"

using namespace plait_test;

namespace {

// How one rank splits: color (or NCCL_SPLIT_NOCOLOR) and key.
struct SplitRule {
  const char* name;
  std::function<int(int rank, int nranks)> color;
  std::function<int(int rank, int nranks)> key;
};

// The parent ranks in rank's new communicator, in new-rank order: same
// color, ordered by key then parent rank. Empty for NOCOLOR.
std::vector<int> expectedMembers(const SplitRule& rule, int rank, int nranks) {
  const int color = rule.color(rank, nranks);
  std::vector<int> members;
  if (color == NCCL_SPLIT_NOCOLOR) return members;
  for (int r = 0; r < nranks; ++r)
    if (rule.color(r, nranks) == color) members.push_back(r);
  std::stable_sort(members.begin(), members.end(),
                   [&](int a, int b) { return rule.key(a, nranks) < rule.key(b, nranks); });
  return members;
}

// The new communicator's size, this rank's place in it, and its order as
// seen by an AllGather of parent ranks.
std::string checkMembership(ncclComm_t child, const std::vector<int>& members, int rank) {
  int count = -1, me = -1;
  if (ncclCommCount(child, &count) != ncclSuccess || ncclCommUserRank(child, &me) != ncclSuccess)
    return std::string("query on the split comm failed: ") + ncclGetLastError(child);
  const int want = static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin());
  if (count != static_cast<int>(members.size()) || me != want)
    return "split comm has " + std::to_string(count) + " ranks and this is rank " + std::to_string(me) + ", expected " +
           std::to_string(members.size()) + " and " + std::to_string(want);
  std::vector<int32_t> all(members.size(), -1);
  int32_t mine = rank;
  if (ncclAllGather(&mine, all.data(), 1, ncclInt32, child, nullptr) != ncclSuccess)
    return std::string("ncclAllGather on the split comm: ") + ncclGetLastError(child);
  for (size_t i = 0; i < members.size(); ++i)
    if (all[i] != members[i])
      return "split comm rank " + std::to_string(i) + " is parent rank " + std::to_string(all[i]) + ", expected " +
             std::to_string(members[i]);
  return "";
}

// AllReduce of parent ranks (+1) over the child and over the parent, in one
// group or one after the other, then a ring on the child and the parent.
std::string runBoth(ncclComm_t parent, ncclComm_t child, const std::vector<int>& members, int rank, int nranks,
                    bool grouped) {
  const size_t count = 4099;
  std::vector<int64_t> inChild(count), inParent(count);
  for (size_t i = 0; i < count; ++i) inChild[i] = inParent[i] = (rank + 1) * 1000 + static_cast<int64_t>(i);
  if (grouped && ncclGroupStart() != ncclSuccess) return "ncclGroupStart failed";
  std::string err;
  if (child && ncclAllReduce(inChild.data(), inChild.data(), count, ncclInt64, ncclSum, child, nullptr) != ncclSuccess)
    err = std::string("child ncclAllReduce: ") + ncclGetLastError(child);
  if (ncclAllReduce(inParent.data(), inParent.data(), count, ncclInt64, ncclSum, parent, nullptr) != ncclSuccess &&
      err.empty())
    err = std::string("parent ncclAllReduce: ") + ncclGetLastError(parent);
  if (grouped && ncclGroupEnd() != ncclSuccess && err.empty())
    err = std::string("ncclGroupEnd: ") + ncclGetLastError(parent);
  if (!err.empty()) return err;
  int64_t childBase = 0, parentBase = 0;
  for (int r : members) childBase += (r + 1) * 1000;
  for (int r = 0; r < nranks; ++r) parentBase += (r + 1) * 1000;
  const int64_t m = static_cast<int64_t>(members.size()), n = nranks;
  for (size_t i = 0; i < count; ++i) {
    const int64_t ii = static_cast<int64_t>(i);
    if (child && inChild[i] != childBase + m * ii)
      return "child AllReduce element " + std::to_string(i) + " is " + std::to_string(inChild[i]) + ", expected " +
             std::to_string(childBase + m * ii);
    if (inParent[i] != parentBase + n * ii)
      return "parent AllReduce element " + std::to_string(i) + " is " + std::to_string(inParent[i]) + ", expected " +
             std::to_string(parentBase + n * ii);
  }
  return "";
}

std::string splitAndRun(const SplitRule& rule, int rank, int nranks, ncclComm_t parent) {
  const int color = rule.color(rank, nranks);
  ncclComm_t child = reinterpret_cast<ncclComm_t>(0x1);  // must be overwritten
  if (ncclCommSplit(parent, color, rule.key(rank, nranks), &child, nullptr) != ncclSuccess)
    return std::string("ncclCommSplit: ") + ncclGetLastError(parent);
  const std::vector<int> members = expectedMembers(rule, rank, nranks);
  std::string err;
  if (color == NCCL_SPLIT_NOCOLOR) {
    if (child != nullptr) return std::string(rule.name) + ": NCCL_SPLIT_NOCOLOR gave a non-NULL communicator";
  } else if (child == nullptr) {
    return std::string(rule.name) + ": ncclCommSplit gave a NULL communicator for color " + std::to_string(color);
  } else {
    err = checkMembership(child, members, rank);
  }
  // Run both even after a wrong membership, so every rank issues the same calls.
  for (bool grouped : {true, false}) {
    std::string run = runBoth(parent, child, members, rank, nranks, grouped);
    if (err.empty() && !run.empty()) err = std::string(grouped ? "in a group: " : "one after the other: ") + run;
  }
  if (child && ncclCommDestroy(child) != ncclSuccess && err.empty())
    err = std::string("ncclCommDestroy(split comm): ") + ncclGetLastError(nullptr);
  return err.empty() ? "" : std::string(rule.name) + ": " + err;
}

const SplitRule kRules[] = {
    {"even/odd, keys reversing order, rank 1 NOCOLOR", [](int r, int) { return r == 1 ? NCCL_SPLIT_NOCOLOR : r % 2; },
     [](int r, int n) { return n - r; }},
    {"pairs, equal keys (parent order)", [](int r, int) { return r / 2; }, [](int, int) { return 0; }},
    {"one color, keys rotating by 2", [](int, int) { return 7; }, [](int r, int n) { return (r + 2) % n; }},
    {"last rank alone, others reversed", [](int r, int n) { return r == n - 1 ? 1 : 0; },
     [](int r, int) { return -r; }},
};

}  // namespace

TEST_CASE("ncclCommSplit: colors, keys and NOCOLOR; split comms work beside the parent", "[split]") {
  for (int nranks : {2, 3, 5, 6}) {
    INFO("nranks " << nranks);
    auto failures = runThreads(nranks, [&](int rank, ncclComm_t comm) -> std::string {
      for (const SplitRule& rule : kRules) {
        std::string err = splitAndRun(rule, rank, nranks, comm);
        if (!err.empty()) return err;
      }
      return "";
    });
    for (auto& f : failures) FAIL_CHECK(f);
  }
}

TEST_CASE("ncclCommSplit of a split communicator", "[split]") {
  const int nranks = 6;
  auto failures = runThreads(nranks, [&](int rank, ncclComm_t comm) -> std::string {
    ncclComm_t half = nullptr, quarter = nullptr;
    if (ncclCommSplit(comm, rank % 2, rank, &half, nullptr) != ncclSuccess)
      return std::string("first split: ") + ncclGetLastError(comm);
    int halfRank = -1;
    ncclCommUserRank(half, &halfRank);  // 0..2 within each parity
    if (ncclCommSplit(half, halfRank == 2 ? NCCL_SPLIT_NOCOLOR : 0, -halfRank, &quarter, nullptr) != ncclSuccess)
      return std::string("second split: ") + ncclGetLastError(half);
    std::string err;
    if (halfRank == 2 && quarter != nullptr) err = "NOCOLOR gave a communicator";
    if (halfRank != 2) {  // members: parent ranks parity, parity+2, reversed
      const int p = rank % 2;
      err = checkMembership(quarter, {p + 2, p}, rank);
    }
    if (quarter) ncclCommDestroy(quarter);
    ncclCommDestroy(half);
    return err;
  });
  for (auto& f : failures) FAIL_CHECK(f);
}

namespace {

// iters AllReduces of (rank+1) on comm; each result must be the sum over
// the comm's members of (parent rank+1), i.e. `want`.
std::string repeatAllReduce(ncclComm_t comm, int rank, int64_t want, int iters) {
  std::vector<int64_t> buf(10007);
  for (int it = 0; it < iters; ++it) {
    std::fill(buf.begin(), buf.end(), rank + 1);
    if (ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclInt64, ncclSum, comm, nullptr) != ncclSuccess)
      return std::string("ncclAllReduce: ") + ncclGetLastError(comm);
    for (size_t i = 0; i < buf.size(); ++i)
      if (buf[i] != want)
        return "iteration " + std::to_string(it) + " element " + std::to_string(i) + " is " + std::to_string(buf[i]) +
               ", expected " + std::to_string(want);
  }
  return "";
}

}  // namespace

TEST_CASE("A split communicator and its parent used at the same time from two threads per rank", "[split]") {
  const int nranks = 4;
  auto failures = runThreads(nranks, [&](int rank, ncclComm_t comm) -> std::string {
    ncclComm_t child = nullptr;
    if (ncclCommSplit(comm, rank % 2, 0, &child, nullptr) != ncclSuccess)
      return std::string("ncclCommSplit: ") + ncclGetLastError(comm);
    std::string childErr;
    std::thread other([&] { childErr = repeatAllReduce(child, rank, (rank % 2 + 1) + (rank % 2 + 3), 50); });
    std::string err = repeatAllReduce(comm, rank, 1 + 2 + 3 + 4, 50);
    other.join();
    ncclCommDestroy(child);
    if (!childErr.empty()) return "split comm: " + childErr;
    return err.empty() ? "" : "parent: " + err;
  });
  for (auto& f : failures) FAIL_CHECK(f);
}

TEST_CASE("ncclCommInitAll: ranks driven from their own threads", "[initall]") {
  for (int nranks : {2, 4}) {
    INFO("nranks " << nranks);
    std::vector<ncclComm_t> comms(nranks);
    REQUIRE(ncclCommInitAll(comms.data(), nranks, nullptr) == ncclSuccess);
    std::vector<std::string> errors(nranks);
    std::vector<std::thread> threads;
    for (int r = 0; r < nranks; ++r)
      threads.emplace_back([&, r] {
        const size_t count = 4099;
        Guarded send(nranks * count, ncclFloat32), recv(nranks * count, ncclFloat32);
        for (int p = 0; p < nranks; ++p) fillPattern(send.data(), p * count, count, ncclFloat32, seedOf(r, p));
        std::vector<P2pOp> ops;
        for (int p = nranks - 1; p >= 0; --p) {  // sends first, peers reversed
          ops.push_back({true, p, send.data() + p * count * 4, count});
          ops.push_back({false, (r + p) % nranks, recv.data() + (r + p) % nranks * count * 4, count});
        }
        CaseInfo c = p2pCase("ncclCommInitAll p2p all-to-all", ncclFloat32, count, nranks, r);
        std::string err = postGroup(comms[r], ncclFloat32, ops);
        Checker chk(c);
        for (int s = 0; s < nranks && err.empty(); ++s)
          chk.pattern("recvbuff", recv.data(), s * count, count, seedOf(s, r));
        chk.guard("recvbuff", recv);
        errors[r] = err.empty() ? chk.error() : c.str() + ": " + err;
      });
    for (auto& t : threads) t.join();
    for (int r = 0; r < nranks; ++r) {
      INFO("rank " << r);
      CHECK(errors[r] == "");
      CHECK(ncclCommDestroy(comms[r]) == ncclSuccess);
    }
  }
}

TEST_CASE("ncclCommInitAll: one thread drives every rank's sends and receives in one group", "[initall][group]") {
  const int nranks = 3;
  const size_t count = 70001;
  ncclComm_t comms[nranks];
  REQUIRE(ncclCommInitAll(comms, nranks, nullptr) == ncclSuccess);
  std::vector<Guarded> send, recv;
  for (int r = 0; r < nranks; ++r) {
    send.emplace_back(count, ncclInt64);
    recv.emplace_back(count, ncclInt64);
    fillPattern(send.back().data(), 0, count, ncclInt64, seedOf(r, -2));
  }
  REQUIRE(ncclGroupStart() == ncclSuccess);
  for (int r = 0; r < nranks; ++r) {  // receives first: only the group makes this complete
    CHECK(ncclRecv(recv[r].data(), count, ncclInt64, (r + nranks - 1) % nranks, comms[r], nullptr) == ncclSuccess);
    CHECK(ncclSend(send[r].data(), count, ncclInt64, (r + 1) % nranks, comms[r], nullptr) == ncclSuccess);
  }
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  for (int r = 0; r < nranks; ++r) {
    CHECK(patternMismatch(recv[r].data(), 0, count, ncclInt64, seedOf((r + nranks - 1) % nranks, -2)) == -1);
    CHECK(recv[r].guardIntact());
    CHECK(ncclCommDestroy(comms[r]) == ncclSuccess);
  }
}
