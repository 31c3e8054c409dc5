// Every collective on registered buffers (ncclMemAlloc + ncclCommRegister):
// the same checks as the FIFO sweeps (patterns, guards, untouched inputs),
// with the direct path's TRACE lines counted, so a silent fallback fails.
// Ranks as threads (peers' buffers read by address) and as forked processes
// (peers' memfds mapped through /proc). Between processes, the data movers
// go direct on unregistered buffers too, by cross-memory attach.
#include <optional>
#include <string>

#include <sched.h>

#include "coll_checks.h"
#include "direct_test_env.h"

using namespace plait_test;

namespace {

struct Item {
  const char* name;  // as the library logs it, with a leading space (" Reduce" is not "AllReduce")
  SweepSpec spec;
  CheckFn check;
};

// Count 0 returns before the direct path is asked; three ops of each kind.
SweepSpec registeredSpec(const char* coll, bool rooted, bool reduction, std::vector<int> variants = {0, 1}) {
  SweepSpec s = reducedSpec(coll, rooted, reduction, std::move(variants));
  if (reduction) s.ops = {ncclSum, ncclMax, ncclAvg};
  s.counts = {1, 7, 4099, 70001};
  return s;
}

std::vector<Item> items() {
  return {
      {" Broadcast", registeredSpec("ncclBroadcast", true, false, {0, 1, 2}), coll_data::checkBroadcast},
      {" AllGather", registeredSpec("ncclAllGather", false, false), coll_data::checkAllGather},
      {" AlltoAll", registeredSpec("ncclAlltoAll", false, false), coll_data::checkAlltoAll},
      {" Gather", registeredSpec("ncclGather", true, false), coll_data::checkGather},
      {" Scatter", registeredSpec("ncclScatter", true, false), coll_data::checkScatter},
      {" Reduce", registeredSpec("ncclReduce", true, true), coll_reduce::checkReduce},
      {" ReduceScatter", registeredSpec("ncclReduceScatter", false, true), coll_reduce::checkReduceScatter},
  };
}

// The data movers: what cross-memory attach serves on unregistered buffers.
std::vector<Item> dataMovers() {
  std::vector<Item> list = items();
  std::erase_if(list, [](const Item& i) { return i.spec.reduction; });
  return list;
}

// Every item's sweep on this rank (with registered buffers unless `plain`); the first error.
std::string registeredSweep(int rank, int nranks, ncclComm_t comm, const std::vector<Item>& list,
                            bool plain = false) {
  std::optional<RegisteredBuffers> registered;
  if (!plain) registered.emplace(comm);
  std::string first;
  for (const Item& item : list) {
    std::string err = sweep(rank, nranks, comm, item.spec, item.check);
    if (first.empty()) first = err;  // a failed call ends that sweep on every rank alike
  }
  return first;
}

void checkAllDirect(const DirectTestEnv& env, const std::vector<Item>& list) {
  for (const Item& item : list) {
    INFO(item.name);
    CHECK(env.count(item.name, true) > 0);
    CHECK(env.count(item.name, false) == 0);
    const std::string name = item.name;
    if (name == " AlltoAll") {  // in place (variant 1) on every rank, each pair swaps blocks
      const int swapped = env.count(item.name, true, "swapping blocks in pairs");
      CHECK(swapped > 0);
      CHECK(swapped < env.count(item.name, true));
      continue;
    }
    if (name != " Broadcast" && name != " Gather" && name != " Scatter") continue;
    // In place (variants 1 and 2) the root copies a share of every other
    // rank's block; out of place (variant 0) they copy it all.
    const int shared = env.count(item.name, true, "the root copying a share");
    CHECK(shared > 0);
    CHECK(shared < env.count(item.name, true));
  }
}

}  // namespace

TEST_CASE("Every collective on registered buffers runs direct and matches (threads)", "[registered]") {
  DirectTestEnv env;
  const std::vector<Item> list = items();
  for (int nranks : {2, 3}) {
    INFO("nranks " << nranks);
    auto failures =
        runThreads(nranks, [&](int rank, ncclComm_t comm) { return registeredSweep(rank, nranks, comm, list); });
    for (auto& f : failures) FAIL_CHECK(f);
  }
  checkAllDirect(env, list);
}

TEST_CASE("Every collective on registered buffers runs direct and matches (processes)", "[registered][process]") {
  DirectTestEnv env;
  const std::vector<Item> list = items();
  for (int nranks : {3}) {  // more than one peer to map; 2 ranks run as threads above
    INFO("nranks " << nranks);
    auto failures = runProcessesChecked(
        nranks, [&](int rank, ncclComm_t comm) { return registeredSweep(rank, nranks, comm, list); });
    for (auto& f : failures) FAIL_CHECK(f);
  }
  checkAllDirect(env, list);
}

// Only the root's buffer registered, ranks as threads (no cross-memory
// attach): an in-place Broadcast still goes direct, but the receivers'
// outputs are not open to the root, so it copies no share and they read
// their whole outputs.
TEST_CASE("An in-place Broadcast whose receivers' outputs are unregistered goes direct without the root's share",
          "[registered]") {
  DirectTestEnv env;
  const size_t count = 70001;
  const int root = 1;
  auto failures = runThreads(3, [&](int rank, ncclComm_t comm) -> std::string {
    std::optional<RegisteredBuffers> registered;
    if (rank == root) registered.emplace(comm);
    Guarded buf(count, ncclInt32);
    registered.reset();
    auto* v = reinterpret_cast<int32_t*>(buf.data());
    for (size_t i = 0; i < count; ++i) v[i] = rank == root ? int32_t(i * 7 + 3) : -1;
    if (ncclBroadcast(buf.data(), buf.data(), count, ncclInt32, root, comm, nullptr) != ncclSuccess)
      return std::string("ncclBroadcast: ") + ncclGetLastError(comm);
    for (size_t i = 0; i < count; ++i)
      if (v[i] != int32_t(i * 7 + 3)) return "element " + std::to_string(i) + " is wrong";
    return "";
  });
  for (auto& f : failures) FAIL_CHECK(f);
  CHECK(env.count(" Broadcast", true) == 3);
  CHECK(env.count(" Broadcast", true, "copying a share") == 0);
}

// In place on every rank, each pair of ranks swaps its blocks; with
// sendbuff shifted against recvbuff by a block either way or by a few
// elements (NCCL leaves such overlaps undefined; Plait runs them), or in
// place on rank 0 only, a rank whose buffers overlap stages its peers' blocks
// and places them, and its own, after the completion handshake, so no peer
// reads a block it has overwritten.
TEST_CASE("An AlltoAll whose buffers overlap runs direct on registered buffers, correctly", "[registered]") {
  DirectTestEnv env;
  const ptrdiff_t count = 4099;
  constexpr ptrdiff_t kOnlyRank0 = 1;  // rank 0 in place, the others out of place
  const std::vector<ptrdiff_t> shifts = {0, count, -count, 3, -5, kOnlyRank0};
  for (ptrdiff_t shift : shifts) {
    INFO("sendbuff at recvbuff + " << shift << " elements" << (shift == kOnlyRank0 ? " (rank 0 in place only)" : ""));
    auto failures = runThreads(3, [&](int rank, ncclComm_t comm) -> std::string {
      RegisteredBuffers registered(comm);
      Guarded buf(5 * count, ncclInt32), other(3 * count, ncclInt32);
      auto* v = reinterpret_cast<int32_t*>(buf.data());
      int32_t* recv = v + count;
      int32_t* send = recv + shift;
      if (shift == kOnlyRank0) send = rank == 0 ? recv : reinterpret_cast<int32_t*>(other.data());
      for (ptrdiff_t i = 0; i < 5 * count; ++i) v[i] = -1;
      for (int j = 0; j < 3; ++j)
        for (ptrdiff_t i = 0; i < count; ++i) send[j * count + i] = rank * 1000003 + j * 10007 + int32_t(i);
      if (ncclAlltoAll(send, recv, count, ncclInt32, comm, nullptr) != ncclSuccess)
        return std::string("ncclAlltoAll: ") + ncclGetLastError(comm);
      for (int j = 0; j < 3; ++j)
        for (ptrdiff_t i = 0; i < count; ++i)
          if (recv[j * count + i] != j * 1000003 + rank * 10007 + int32_t(i))
            return "block " + std::to_string(j) + " element " + std::to_string(i) + " is wrong";
      return "";
    });
    for (auto& f : failures) FAIL_CHECK(f);
  }
  CHECK(env.count(" AlltoAll", true) == 3 * static_cast<int>(shifts.size()));
  CHECK(env.count(" AlltoAll", true, "swapping blocks in pairs") == 3);  // shift 0 only
  CHECK(env.count(" AlltoAll", false) == 0);
}

// Unregistered buffers between processes: the data movers copy straight out
// of (or into) peers' memory with process_vm_readv/writev, in and out of
// place, pull and push AllGather; the reductions still take the FIFO path.
// AlltoAll's single copies are off where the ranks share cores
// (PLAIT_ALLTOALL_CMA=-1, the default): with 3 ranks, on a machine with
// fewer than 3 CPUs for them. 1 turns them on, 0 off.
TEST_CASE("Data movers on unregistered buffers between processes run direct by cross-memory attach",
          "[registered][process][cma]") {
  const bool push = GENERATE(false, true);
  const int alltoallCma = GENERATE(1, 0, -1);
  INFO("PLAIT_DIRECT_ALLGATHER_PUSH=" << push << " PLAIT_ALLTOALL_CMA=" << alltoallCma);
  setenv("PLAIT_DIRECT_ALLGATHER_PUSH", push ? "1" : "0", 1);
  setenv("PLAIT_ALLTOALL_CMA", std::to_string(alltoallCma).c_str(), 1);
  cpu_set_t mask;
  const int cpus = sched_getaffinity(0, sizeof mask, &mask) == 0 ? CPU_COUNT(&mask) : 1;
  const bool alltoallDirect = alltoallCma == 1 || (alltoallCma == -1 && cpus >= 3);
  DirectTestEnv env;
  std::vector<Item> movers = dataMovers();
  std::vector<Item> alltoall;
  for (auto it = movers.begin(); it != movers.end();)
    if (std::string(it->name).find("AlltoAll") != std::string::npos) {
      alltoall.push_back(*it);
      it = movers.erase(it);
    } else {
      ++it;
    }
  REQUIRE(alltoall.size() == 1);
  movers.push_back(alltoall.front());  // run last, checked apart
  const std::vector<Item> reductions = {items()[5], items()[6]};
  auto failures = runProcessesChecked(3, [&](int rank, ncclComm_t comm) {
    std::string first = registeredSweep(rank, 3, comm, movers, true);
    std::string second = registeredSweep(rank, 3, comm, reductions, true);
    return first.empty() ? second : first;
  });
  unsetenv("PLAIT_DIRECT_ALLGATHER_PUSH");
  unsetenv("PLAIT_ALLTOALL_CMA");
  for (auto& f : failures) FAIL_CHECK(f);
  movers.pop_back();
  checkAllDirect(env, movers);
  {
    INFO(alltoall.front().name << " (" << cpus << " CPUs)");
    CHECK((env.count(alltoall.front().name, true) > 0) == alltoallDirect);
    CHECK((env.count(alltoall.front().name, false) > 0) == !alltoallDirect);
    CHECK((env.count(alltoall.front().name, true, "by cross-memory attach, swapping blocks in pairs") > 0) ==
          alltoallDirect);
  }
  for (const Item& item : reductions) {
    INFO(item.name);
    CHECK(env.count(item.name, false) > 0);
    CHECK(env.count(item.name, true) == 0);
  }
}

TEST_CASE("Without cross-memory attach, or above its size limit, unregistered data movers take the FIFO path",
          "[registered][process][cma]") {
  // PLAIT_DIRECT_CMA_MAX_BYTES=1000: the smaller counts of the sweep go
  // direct, the larger ones round the ring.
  const bool capped = GENERATE(false, true);
  const char* setting = capped ? "PLAIT_DIRECT_CMA_MAX_BYTES" : "PLAIT_P2P_CMA";
  INFO(setting);
  setenv(setting, capped ? "1000" : "0", 1);
  DirectTestEnv env;
  const std::vector<Item> movers = {items()[0], items()[1]};  // Broadcast, AllGather
  auto failures =
      runProcessesChecked(2, [&](int rank, ncclComm_t comm) { return registeredSweep(rank, 2, comm, movers, true); });
  unsetenv(setting);
  for (auto& f : failures) FAIL_CHECK(f);
  for (const Item& item : movers) {
    INFO(item.name);
    CHECK(env.count(item.name, false) > 0);
    CHECK((env.count(item.name, true) > 0) == capped);
  }
}
