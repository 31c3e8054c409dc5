// reference.h — shared by the training tests: run a strategy on N thread
// ranks and the serial reference on the same global batches, and compare.
#pragma once

#include <cmath>
#include <mutex>
#include <string>
#include <vector>

#include "api/harness.h"
#include "training/trainer.h"

namespace plait_test {

struct RunResult {
  std::vector<double> losses;              // per step (rank 0's; all ranks agree)
  std::vector<std::vector<float>> params;  // final parameters, per rank
  std::vector<plait::training::MemoryReport> memory;
  std::vector<std::string> errors;
};

using TrainerFactory = std::function<plait::Result<std::unique_ptr<plait::training::Trainer>>(
    const plait::training::TrainConfig&, ncclComm_t)>;

// How a run gets its nranks thread ranks and communicators: runThreads, or
// (growFrom > 0) runGrownThreads from that many.
using RankRunner = std::function<std::vector<std::string>(int, const std::function<std::string(int, ncclComm_t)>&)>;
inline RankRunner grownFrom(int oldN) {
  return [oldN](int nranks, const std::function<std::string(int, ncclComm_t)>& body) {
    return runGrownThreads(oldN, nranks, [&](int rank, ncclComm_t grown, ncclComm_t) { return body(rank, grown); });
  };
}

// Runs `steps` steps on nranks thread ranks.
inline RunResult runDistributed(int nranks, const plait::training::TrainConfig& config, int steps,
                                const TrainerFactory& make, const RankRunner& runner = runThreads) {
  RunResult out;
  out.params.resize(nranks);
  out.memory.resize(nranks);
  std::vector<std::vector<double>> losses(nranks);
  out.errors = runner(nranks, [&](int rank, ncclComm_t comm) -> std::string {
    auto trainer = make(config, comm);
    if (!trainer.isOk()) return trainer.status().toString();
    for (int k = 0; k < steps; ++k) {
      auto loss = (*trainer)->step(k);
      if (!loss.isOk()) return loss.status().toString();
      losses[rank].push_back(*loss);
    }
    auto params = (*trainer)->fullParams();
    if (!params.isOk()) return params.status().toString();
    out.params[rank] = *params;
    out.memory[rank] = (*trainer)->memory();
    return "";
  });
  if (out.errors.empty()) {
    out.losses = losses[0];
    for (int r = 1; r < nranks; ++r)
      if (losses[r] != losses[0]) out.errors.push_back("rank " + std::to_string(r) + " reports other losses");
  }
  return out;
}

// The serial reference on the same global batches (assembled rank by rank).
inline RunResult runSerial(plait::training::TrainConfig config, int nranksData, int steps) {
  config.nranksData = nranksData;
  auto trainer = plait::training::makeSerialTrainer(config);
  RunResult out;
  for (int k = 0; k < steps; ++k) out.losses.push_back(*trainer->step(k));
  out.params.push_back(*trainer->fullParams());
  out.memory.push_back(trainer->memory());
  return out;
}

// max_i |a_i − b_i| / max(1, |b_i|).
template <typename T>
double maxRelDiff(const std::vector<T>& a, const std::vector<T>& b) {
  if (a.size() != b.size()) return INFINITY;
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i)
    worst = std::max(worst, std::abs(double(a[i]) - double(b[i])) / std::max(1.0, std::abs(double(b[i]))));
  return worst;
}

}  // namespace plait_test
