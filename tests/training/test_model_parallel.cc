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

TEST_CASE("expert parallelism (AlltoAll dispatch, capacity, dropping) matches serial", "[training][ep]") {
  for (int nranks : {2, 4}) {
    INFO(nranks << " ranks");
    TrainConfig c = config("moe", "ep");
    c.model.moe.experts = 4;
    c.model.moe.capacityFactor = 1.0;  // tight: some choices are dropped
    // Each rank routes its rows as one group; serial routes the same rows as N groups.
    compareWithSerial(c, nranks, nranks, nranks);
  }
}

TEST_CASE("MoE routing drops tokens over capacity and the balance loss is 1 when balanced", "[training][ep]") {
  std::vector<float> logits(8 * 4, 0.0f);
  for (int i = 0; i < 8; ++i) logits[i * 4 + 0] = 5.0f;  // every token prefers expert 0
  MoeRouting r = moeRoute(8, 4, 1, 1, 1.0, logits.data());
  CHECK(r.capacity == 2);
  CHECK(r.slots.size() == 2);
  CHECK(r.dropped == 6);
  std::vector<float> balanced(8 * 4, 0.0f);
  for (int i = 0; i < 8; ++i) balanced[i * 4 + i % 4] = 1e-3f;  // near-uniform, first choices spread evenly
  CHECK(moeRoute(8, 4, 1, 1, 1.0, balanced.data()).auxLoss == Approx(1.0).epsilon(1e-3));
}

TEST_CASE("pipeline parallelism (GPipe and 1F1B) matches serial accumulation over the micro-batches",
          "[training][pp]") {
  for (std::string kind : {"mlp", "transformer"})
    for (std::string parallel : {"pp-gpipe", "pp-1f1b"})
      for (int stages : {2, 3}) {
        INFO(kind << " " << parallel << " with " << stages << " stages");
        TrainConfig c = config(kind, parallel);
        c.localBatch = 8;
        c.accumulate = 4;  // m micro-batches
        auto dist = plait_test::runDistributed(stages, c, 4, byName());
        REQUIRE(dist.errors.empty());
        TrainConfig s = c;
        s.parallel = "none";
        auto serial = plait_test::runSerial(s, 1, 4);
        // Same micro-batches, same layer code, same accumulation order: only
        // stage boundaries differ, and they move tensors without arithmetic.
        CHECK(dist.losses == serial.losses);
        CHECK(dist.params[0] == serial.params[0]);
      }
}

TEST_CASE("DP x PP over ncclCommSplit matches serial", "[training][pp]") {
  // Two pipelines of 2 stages on 4 ranks, each on half the global batch in 4
  // micro-batches; stage gradients averaged over the data-parallel group.
  for (std::string kind : {"mlp", "transformer"}) {
    INFO(kind);
    TrainConfig c = config(kind, "dp-pp");
    c.ppSize = 2;
    c.localBatch = 8;
    c.accumulate = 4;
    // Serial sums the same rows in other groupings (micro-batches of the
    // global batch, not of each pipeline's shard): reduction order only.
    compareWithSerial(c, 4, 2);
  }
  // With BatchNorm (SyncBN over the data-parallel group of each stage) and one
  // micro-batch, each pipeline's batch is its shard, and the statistics cover
  // the global batch as in serial.
  TrainConfig c = config("mlp", "dp-pp");
  c.model.batchnorm = true;
  c.ppSize = 2;
  c.optimizer.kind = "sgd";  // the bias before BN has gradient 0 + noise (see test_batch_norm.cc)
  c.optimizer.lr = 0.1f;
  compareWithSerial(c, 4, 2);
}
