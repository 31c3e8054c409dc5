// tools/train/parameter_server.h — plait-train's asynchronous strategies
// (--parallel downpour | sandblaster): options and the run of one rank.
#pragma once

#include <CLI/CLI.hpp>

#include "nccl.h"
#include "training/parameter_server/parameter_server.h"

namespace plait_train {

bool isParameterServer(const std::string& parallel);
void addParameterServerOptions(CLI::App& app, plait::training::ps::PsConfig& ps);
// One rank of a downpour or sandblaster run; its exit code. globalBatch:
// Downpour, samples per round of pushes from every replica (each replica's
// mini-batch is globalBatch / replicas); Sandblaster, the full batch.
int runParameterServerRank(const plait::training::TrainConfig& train, plait::training::ps::PsConfig ps,
                           int globalBatch, int steps, int rank, int nranks, ncclComm_t comm);

// Mean loss of the parameters (serial forward order) on 256 samples drawn
// with seed + 1: what --final-loss prints for every strategy.
double evalLoss(const plait::training::TrainConfig& config, const std::vector<float>& params);

}  // namespace plait_train
