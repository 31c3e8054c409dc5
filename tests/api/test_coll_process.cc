// Every collective with ranks as forked processes: shared memory between
// processes is a different path from threads of one process. A reduced
// sweep (fewer types) of the same checks the thread tests run.
#include "coll_checks.h"

using namespace plait_test;

namespace {

struct Item {
  SweepSpec spec;
  CheckFn check;
};

SweepSpec processSpec(const char* coll, bool rooted, bool reduction, std::vector<int> variants = {0, 1}) {
  SweepSpec s;
  s.coll = coll;
  s.rooted = rooted;
  s.reduction = reduction;
  s.variants = std::move(variants);
  s.types = {ncclInt8, ncclFloat16, ncclInt32, ncclFloat32, ncclFloat64, ncclBfloat16};
  s.counts = {0, 1, 7, 4099, 70001};
  return s;
}

std::string processSweep(int rank, int nranks, ncclComm_t comm) {
  const Item items[] = {
      {processSpec("ncclBroadcast", true, false, {0, 1, 2}), coll_data::checkBroadcast},
      {processSpec("ncclAllGather", false, false), coll_data::checkAllGather},
      {processSpec("ncclAlltoAll", false, false, {0}), coll_data::checkAlltoAll},
      {processSpec("ncclGather", true, false), coll_data::checkGather},
      {processSpec("ncclScatter", true, false), coll_data::checkScatter},
      {processSpec("ncclReduce", true, true), coll_reduce::checkReduce},
      {processSpec("ncclReduceScatter", false, true), coll_reduce::checkReduceScatter},
  };
  std::string first;
  for (const Item& item : items) {
    std::string err = sweep(rank, nranks, comm, item.spec, item.check);
    // A failed call ends this collective's sweep on every rank alike, so
    // the ranks stay in step for the next one.
    if (first.empty()) first = err;
  }
  return first;
}

}  // namespace

TEST_CASE("Every collective with ranks as forked processes", "[process]") {
  for (int nranks : {2, 3, 4}) {
    INFO("nranks " << nranks);
    auto failures =
        runProcessesChecked(nranks, [&](int rank, ncclComm_t comm) { return processSweep(rank, nranks, comm); });
    for (auto& f : failures) FAIL_CHECK(f);
  }
}
