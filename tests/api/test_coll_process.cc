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

std::string processSweep(int rank, int nranks, ncclComm_t comm) {
  const Item items[] = {
      {reducedSpec("ncclBroadcast", true, false, {0, 1, 2}), coll_data::checkBroadcast},
      {reducedSpec("ncclAllGather", false, false), coll_data::checkAllGather},
      {reducedSpec("ncclAlltoAll", false, false), coll_data::checkAlltoAll},
      {reducedSpec("ncclGather", true, false), coll_data::checkGather},
      {reducedSpec("ncclScatter", true, false), coll_data::checkScatter},
      {reducedSpec("ncclReduce", true, true), coll_reduce::checkReduce},
      {reducedSpec("ncclReduceScatter", false, true), coll_reduce::checkReduceScatter},
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
