// training/strategies.h — a Trainer by strategy name (TrainConfig::parallel).
#pragma once

#include <memory>
#include <string>

#include "training/trainer.h"

namespace plait::training {

// comm: every rank of the job (not owned; may be null for one rank with
// "none"). InvalidArgument for an unknown name or wrong rank count,
// InvalidUsage for a strategy not built yet.
Result<std::unique_ptr<Trainer>> makeTrainer(const TrainConfig& config, ncclComm_t comm);
// Ranks over which the batch is split (the global batch is localBatch × this).
int dataParallelSize(const TrainConfig& config, int nranks);
int commSizeOf(ncclComm_t comm);

}  // namespace plait::training
