// Tensor, pipeline and expert parallelism (and hybrids) against serial
// training on the same global batch.
//
// Tolerances: these strategies also reassociate sums inside the forward pass
// (partial products of a row-parallel layer summed across ranks, expert rows
// in another order), so activations differ by a few ulps per layer, and the
// differences compound through depth and steps. Per step and layer that is
// ~1e-7 relative; 1e-5 on losses and 1e-4 on parameters after 5 steps leaves
// a wide margin yet catches a missing f/g all-reduce (an O(1) error).
#include <catch2/catch.hpp>

#include "reference.h"
#include "training/strategies.h"

using namespace plait::training;
using plait_test::maxRelDiff;

namespace {

TrainConfig config(const std::string& kind, const std::string& parallel) {
  TrainConfig c;
  c.model.kind = kind;
  c.model.heads = 4;
  c.parallel = parallel;
  c.localBatch = 4;
  c.seed = 3;
  return c;
}

plait_test::TrainerFactory byName() {
  return [](const TrainConfig& c, ncclComm_t comm) { return makeTrainer(c, comm); };
}

void compareWithSerial(const TrainConfig& c, int nranks, int dataRanks, int serialGroups = 1) {
  auto dist = plait_test::runDistributed(nranks, c, 5, byName());
  REQUIRE(dist.errors.empty());
  TrainConfig s = c;
  s.parallel = "none";
  s.model.moe.groups = serialGroups;
  auto serial = plait_test::runSerial(s, dataRanks, 5);
  CHECK(maxRelDiff(dist.losses, serial.losses) < 1e-5);
  CHECK(maxRelDiff(dist.params[0], serial.params[0]) < 1e-4);
  for (int r = 1; r < nranks; ++r) CHECK(maxRelDiff(dist.params[r], dist.params[0]) == 0.0);
}

}  // namespace

TEST_CASE("tensor parallelism (heads and MLP split) matches serial", "[training][tp]") {
  for (int nranks : {2, 4}) {
    INFO(nranks << " ranks");
    compareWithSerial(config("transformer", "tp"), nranks, 1);
  }
}

TEST_CASE("DP x TP over ncclCommSplit matches serial", "[training][tp]") {
  TrainConfig c = config("transformer", "dp-tp");
  c.tpSize = 2;
  compareWithSerial(c, 4, 2);
}
