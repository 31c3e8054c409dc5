// DDP against the serial reference on the same global batches.
//
// Tolerances: DDP computes each rank's gradient over its own rows and then
// averages; serial sums all rows in one loop. The two differ only in the
// order of float additions: per gradient element a relative error of about
// rows·2⁻²⁴ ≈ 1e-6 per step. Adam divides by √v, which can magnify the
// difference of near-zero gradients; over 6 steps of lr 1e-2 a parameter can
// move by at most 6·lr = 0.06 in all, so 1e-4 on parameters and 1e-5 on losses
// leave a wide margin against reduction order yet catch any real error (a
// missing average or a skipped bucket moves them by 1e-2 or more).
#include <catch2/catch.hpp>

#include "plait/live_ranks.h"
#include "reference.h"

using namespace plait::training;
using plait_test::maxRelDiff;

namespace {

TrainConfig smallConfig(const std::string& kind) {
  TrainConfig c;
  c.model.kind = kind;
  c.localBatch = 4;
  c.seed = 7;
  c.firstBucketBytes = 256;  // several buckets even for tiny models
  c.bucketBytes = 2048;
  return c;
}

plait_test::TrainerFactory ddp() { return [](const TrainConfig& c, ncclComm_t comm) { return makeDdpTrainer(c, comm); }; }

}  // namespace

TEST_CASE("DDP matches serial training on the same global batch", "[training][ddp]") {
  for (std::string kind : {"mlp", "transformer", "moe"}) {
    for (int nranks : {2, 3}) {
      INFO(kind << " on " << nranks << " ranks");
      TrainConfig c = smallConfig(kind);
      const int steps = 6;
      auto dist = plait_test::runDistributed(nranks, c, steps, ddp());
      REQUIRE(dist.errors.empty());
      // Each DDP rank routes its own tokens as one MoE group (capacity counted
      // per rank); the serial reference routes the same rows as N groups.
      TrainConfig serialConfig = c;
      serialConfig.model.moe.groups = nranks;
      auto serial = plait_test::runSerial(serialConfig, nranks, steps);
      CHECK(maxRelDiff(dist.losses, serial.losses) < 1e-5);
      CHECK(maxRelDiff(dist.params[0], serial.params[0]) < 1e-4);
      for (int r = 1; r < nranks; ++r) CHECK(dist.params[r] == dist.params[0]);  // replicas bit-identical
    }
  }
}

TEST_CASE("DDP: bucket sizes and overlap do not change the result", "[training][ddp]") {
  TrainConfig c = smallConfig("transformer");
  auto reference = plait_test::runDistributed(2, c, 3, ddp());
  REQUIRE(reference.errors.empty());
  for (size_t bucket : {size_t(1), size_t(1) << 30}) {
    TrainConfig other = c;
    other.firstBucketBytes = other.bucketBytes = bucket;  // one bucket per parameter / one bucket in all
    other.overlap = bucket == 1;
    auto run = plait_test::runDistributed(2, other, 3, ddp());
    REQUIRE(run.errors.empty());
    // Elementwise averages do not depend on how the elements are grouped.
    CHECK(run.params[0] == reference.params[0]);
    CHECK(run.losses == reference.losses);
  }
}

TEST_CASE("DDP no_sync accumulation over k micro-batches equals one k-times-larger batch", "[training][ddp]") {
  TrainConfig c = smallConfig("mlp");
  c.localBatch = 8;
  auto whole = plait_test::runDistributed(2, c, 4, ddp());
  c.accumulate = 4;
  auto accumulated = plait_test::runDistributed(2, c, 4, ddp());
  REQUIRE(whole.errors.empty());
  REQUIRE(accumulated.errors.empty());
  // Same rows, summed in micro-batch order: differs from one pass only by float
  // reassociation (see the file comment).
  CHECK(maxRelDiff(accumulated.losses, whole.losses) < 1e-5);
  CHECK(maxRelDiff(accumulated.params[0], whole.params[0]) < 1e-4);
}

TEST_CASE("DDP broadcasts rank 0's parameters at start", "[training][ddp]") {
  TrainConfig c = smallConfig("mlp");
  c.optimizer.lr = 0;  // parameters stay as initialised
  auto run = plait_test::runDistributed(3, c, 1, ddp());
  REQUIRE(run.errors.empty());
  auto serial = plait_test::runSerial(c, 3, 1);  // initialised with the seed, as rank 0 is
  CHECK(run.params[1] == serial.params[0]);
  CHECK(run.params[2] == serial.params[0]);
}

TEST_CASE("every model learns on its synthetic data", "[training]") {
  for (std::string kind : {"mlp", "transformer", "moe"}) {
    INFO(kind);
    TrainConfig c = smallConfig(kind);
    c.localBatch = 16;
    auto serial = plait_test::runSerial(c, 1, 40);
    double first = 0, last = 0;
    for (int i = 0; i < 5; ++i) first += serial.losses[i], last += serial.losses[35 + i];
    CHECK(last < 0.8 * first);
  }
}

// NCCL 2.32's ncclCommGrow: DDP on a communicator grown from 2 ranks to 4
// trains exactly as on one made with 4.
TEST_CASE("DDP on a communicator grown from 2 to 4 ranks matches serial training", "[training][ddp][grow]") {
  TrainConfig c = smallConfig("transformer");
  const int steps = 4;
  auto grown = plait_test::runDistributed(4, c, steps, ddp(), plait_test::grownFrom(2));
  REQUIRE(grown.errors.empty());
  auto serial = plait_test::runSerial(c, 4, steps);
  CHECK(maxRelDiff(grown.losses, serial.losses) < 1e-5);
  CHECK(maxRelDiff(grown.params[0], serial.params[0]) < 1e-4);
  for (int r = 1; r < 4; ++r) CHECK(grown.params[r] == grown.params[0]);
}

// ncclCommShrink: one of 3 DDP ranks dies (aborts its communicator) after a
// step; the others' next step fails, they shrink with NCCL_SHRINK_ABORT and
// train on as 2 ranks, exactly as serial training over 2 would.
TEST_CASE("DDP goes on after a rank dies: the survivors shrink and train as 2", "[training][ddp][shrink]") {
  TrainConfig c = smallConfig("mlp");
  const int steps = 4;
  std::vector<std::vector<double>> losses(3);
  std::vector<std::vector<float>> params(3);
  auto errors = plait_test::runThreads(3, [&](int rank, ncclComm_t comm) -> std::string {
    auto first = makeDdpTrainer(c, comm);
    if (!first.isOk()) return first.status().toString();
    if (!(*first)->step(0).isOk()) return "step 0 failed";
    if (rank == 2) {
      ncclCommAbort(comm);
      return "";
    }
    if ((*first)->step(1).isOk()) return "a step without rank 2 succeeded";
    int dead[] = {2};
    ncclComm_t shrunk = nullptr;
    if (ncclCommShrink(comm, dead, 1, &shrunk, nullptr, NCCL_SHRINK_ABORT) != ncclSuccess)
      return std::string("ncclCommShrink: ") + ncclGetLastError(comm);
    std::string e;
    {
      auto trainer = makeDdpTrainer(c, shrunk);
      if (!trainer.isOk()) return trainer.status().toString();
      for (int k = 0; k < steps && e.empty(); ++k) {
        auto loss = (*trainer)->step(k);
        if (loss.isOk()) losses[rank].push_back(*loss);
        else e = loss.status().toString();
      }
      if (auto p = (*trainer)->fullParams(); p.isOk()) params[rank] = *p;
      else if (e.empty()) e = p.status().toString();
    }
    ncclCommDestroy(shrunk);
    return e;
  });
  REQUIRE(errors.empty());
  auto serial = plait_test::runSerial(c, 2, steps);
  CHECK(maxRelDiff(losses[0], serial.losses) < 1e-5);
  CHECK(losses[1] == losses[0]);
  CHECK(maxRelDiff(params[0], serial.params[0]) < 1e-4);
  CHECK(params[1] == params[0]);
}

// The live-ranks mode (PLAIT_LIVE_RANKS, plait/live_ranks.h): one of 3 DDP
// ranks leaves (aborts its communicator) before training; the others train
// on the same communicator without shrinking it. Each survivor keeps its
// third of every global batch (the sampler still shards over 3), the
// gradients average over the 2 of them, and both hold identical parameters
// after every step.
TEST_CASE("DDP goes on over the survivors in the live-ranks mode, without a shrink", "[training][ddp][live]") {
  setenv("PLAIT_LIVE_RANKS", "1", 1);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  ncclResetDebugInit();  // re-reads the PLAIT_* tunables
  TrainConfig c = smallConfig("mlp");
  const int steps = 4;
  std::vector<std::vector<double>> losses(3);
  std::vector<std::vector<float>> params(3);
  auto errors = plait_test::runThreads(3, [&](int rank, ncclComm_t comm) -> std::string {
    if (rank == 2) {
      ncclCommAbort(comm);
      return "";
    }
    auto trainer = makeDdpTrainer(c, comm);
    if (!trainer.isOk()) return trainer.status().toString();
    for (int k = 0; k < steps; ++k) {
      auto loss = (*trainer)->step(k);
      if (!loss.isOk()) return "step " + std::to_string(k) + ": " + loss.status().toString();
      if (!std::isfinite(*loss)) return "step " + std::to_string(k) + ": loss is not finite";
      losses[rank].push_back(*loss);
    }
    auto p = (*trainer)->fullParams();
    if (!p.isOk()) return p.status().toString();
    params[rank] = *p;
    unsigned long long epoch = 0;
    int live[3] = {};
    if (plaitCommLiveRanks(comm, &epoch, live) != ncclSuccess) return ncclGetLastError(comm);
    if (epoch != 1 || live[0] != 1 || live[1] != 1 || live[2] != 0) return "the mask is not {1, 1, 0} at epoch 1";
    return "";
  });
  unsetenv("PLAIT_LIVE_RANKS");
  ncclResetDebugInit();
#pragma GCC diagnostic pop
  for (const std::string& e : errors) FAIL(e);
  CHECK(losses[0].size() == steps);
  CHECK(losses[1] == losses[0]);
  CHECK(params[1] == params[0]);
  CHECK(!params[0].empty());
}
