// ZeRO stages 1–3 against the serial reference, and the memory each holds.
// Tolerances as in test_ddp.cc: only the order of float additions differs
// (per-rank partial gradients averaged by reduce-scatter instead of one sum).
#include <catch2/catch.hpp>

#include "reference.h"

using namespace plait::training;
using plait_test::maxRelDiff;

namespace {

TrainConfig smallConfig(const std::string& kind) {
  TrainConfig c;
  c.model.kind = kind;
  c.localBatch = 4;
  c.seed = 11;
  return c;
}

plait_test::TrainerFactory zero(int stage) {
  return [stage](const TrainConfig& c, ncclComm_t comm) { return makeZeroTrainer(c, comm, stage); };
}

}  // namespace

TEST_CASE("ZeRO stages 1-3 match serial training", "[training][zero]") {
  for (int stage : {1, 2, 3})
    for (std::string kind : {"mlp", "transformer", "moe"})
      for (int nranks : {2, 3}) {
        INFO("stage " << stage << ", " << kind << " on " << nranks << " ranks");
        TrainConfig c = smallConfig(kind);
        auto dist = plait_test::runDistributed(nranks, c, 5, zero(stage));
        REQUIRE(dist.errors.empty());
        TrainConfig serialConfig = c;
        serialConfig.model.moe.groups = nranks;  // each rank routes its rows as one group
        auto serial = plait_test::runSerial(serialConfig, nranks, 5);
        CHECK(maxRelDiff(dist.losses, serial.losses) < 1e-5);
        CHECK(maxRelDiff(dist.params[0], serial.params[0]) < 1e-4);
        for (int r = 1; r < nranks; ++r) CHECK(dist.params[r] == dist.params[0]);
      }
}

TEST_CASE("ZeRO stages agree with each other bit for bit", "[training][zero]") {
  // Same reduce-scatter, same elementwise update: only where the full
  // gradient lives differs, not the arithmetic.
  TrainConfig c = smallConfig("transformer");
  auto s1 = plait_test::runDistributed(3, c, 4, zero(1));
  auto s2 = plait_test::runDistributed(3, c, 4, zero(2));
  auto s3 = plait_test::runDistributed(3, c, 4, zero(3));
  REQUIRE((s1.errors.empty() && s2.errors.empty() && s3.errors.empty()));
  CHECK(s2.params[0] == s1.params[0]);
  CHECK(s3.params[0] == s1.params[0]);
  CHECK(s3.losses == s1.losses);
}

TEST_CASE("ZeRO-3 with accumulation and checkpointing matches serial", "[training][zero]") {
  TrainConfig c = smallConfig("transformer");
  c.localBatch = 4;
  c.accumulate = 2;
  c.checkpoint = true;
  auto dist = plait_test::runDistributed(2, c, 4, zero(3));
  REQUIRE(dist.errors.empty());
  TrainConfig plain = smallConfig("transformer");
  auto serial = plait_test::runSerial(plain, 2, 4);
  CHECK(maxRelDiff(dist.losses, serial.losses) < 1e-5);
  CHECK(maxRelDiff(dist.params[0], serial.params[0]) < 1e-4);
}

TEST_CASE("ZeRO memory per rank: stage 3 holds about 1/N of DDP's", "[training][zero]") {
  TrainConfig c = smallConfig("transformer");
  c.model.d = 32;
  const int nranks = 4;
  auto ddp = plait_test::runDistributed(nranks, c, 1, [](const TrainConfig& cc, ncclComm_t comm) {
    return makeDdpTrainer(cc, comm);
  });
  REQUIRE(ddp.errors.empty());
  size_t ddpTotal = ddp.memory[0].total();
  size_t psi = ddp.memory[0].paramBytes;  // 4Ψ bytes in fp32
  CHECK(ddp.memory[0].gradBytes == psi);
  CHECK(ddp.memory[0].optimizerBytes == 2 * psi);  // Adam: m and v
  std::vector<size_t> totals;
  for (int stage : {1, 2, 3}) {
    auto run = plait_test::runDistributed(nranks, c, 1, zero(stage));
    REQUIRE(run.errors.empty());
    INFO("stage " << stage << ": " << run.memory[0].total() << " bytes vs DDP " << ddpTotal);
    totals.push_back(run.memory[0].total());
    // Padding: each unit rounds up to a multiple of N elements.
    CHECK(run.memory[0].optimizerBytes <= 2 * (psi / nranks) + 2 * 16 * nranks * sizeof(float));
    if (stage == 3) {
      CHECK(double(run.memory[0].total()) < 1.05 * double(ddpTotal) / nranks);
      CHECK(run.memory[0].peakTransientBytes > 0);
      CHECK(run.memory[0].peakTransientBytes < psi);  // one unit at a time, never the whole model
    }
  }
  CHECK(totals[0] > totals[1]);
  CHECK(totals[1] > totals[2]);
}
