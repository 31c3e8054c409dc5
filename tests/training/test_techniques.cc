// Gradient accumulation and activation checkpointing, serially.
#include <catch2/catch.hpp>

#include "reference.h"

using namespace plait::training;
using plait_test::maxRelDiff;

TEST_CASE("activation checkpointing gives exactly the gradients of no checkpointing", "[training][techniques]") {
  for (std::string kind : {"mlp", "transformer", "moe"}) {
    INFO(kind);
    ModelConfig mc;
    mc.kind = kind;
    SyntheticDataset data(mc, 5);
    Batch batch = data.batch({0, 1, 2, 3, 4, 5});
    std::vector<std::vector<float>> grads;
    for (bool checkpoint : {false, true}) {
      auto model = buildModel(mc);
      FlatStorage storage(*model);
      initModel(*model, 5);
      model->checkpoint.assign(model->numUnits(), checkpoint);
      model->forwardBackward(batch, 1.0f);
      grads.push_back(storage.flatGrads());
    }
    // Recomputation runs the same forward on the same input: identical bits.
    CHECK(grads[1] == grads[0]);
  }
}

TEST_CASE("gradient accumulation over k micro-batches equals one k-times-larger batch", "[training][techniques]") {
  for (std::string kind : {"mlp", "transformer"}) {
    INFO(kind);
    TrainConfig c;
    c.model.kind = kind;
    c.localBatch = 8;
    auto whole = plait_test::runSerial(c, 1, 4);
    c.accumulate = 4;
    auto accumulated = plait_test::runSerial(c, 1, 4);
    // Kernels accumulate parameter gradients row by row onto what is there
    // (g += ...), and the loss gradient's factor (1/k)/(rows/k) equals 1/rows
    // exactly for k = 4, so k passes add the same terms in the same order as
    // one: the parameters agree bit for bit. The loss is a mean of k means,
    // which rounds differently from one mean.
    CHECK(accumulated.params[0] == whole.params[0]);
    CHECK(maxRelDiff(accumulated.losses, whole.losses) < 1e-6);
  }
}
