// training/trainer.h — one training step, whatever the parallelism.
//
// A Trainer owns a model replica (or shard), its parameter, gradient and
// optimizer storage, and the communication its strategy needs. step(k) takes
// this rank's part of global batch k from the DistributedSampler, runs
// `accumulate` micro-batches, communicates, and updates. Every rank of the
// communicator must call the collective methods in the same order.
//
// Errors: methods return a Status from the communication that failed; the
// trainer is then unusable.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "nccl.h"
#include "plait/status.hpp"
#include "training/data.h"
#include "training/mixed_precision.h"
#include "training/model.h"
#include "training/optim.h"

namespace plait::training {

struct TrainConfig {
  ModelConfig model;
  OptimizerConfig optimizer;
  std::string parallel = "none";  // none | ddp | zero1 | zero2 | zero3 | tp | pp-gpipe | pp-1f1b | ep | dp-tp | dp-pp
  uint64_t seed = 1;
  int localBatch = 8;   // samples per rank per step (per data-parallel rank)
  int accumulate = 1;   // micro-batches per step (localBatch must divide by it)
  bool checkpoint = false;  // activation checkpointing of every unit
  // DDP
  size_t bucketBytes = 25u << 20;
  size_t firstBucketBytes = 1u << 20;
  bool overlap = true;  // false: all buckets after backward (the benchmark's baseline)
  std::string ddpIsolate;  // benchmark only: "compute" (no all-reduce) or "comm" (no forward/backward)
  int nranksData = 1;   // serial reference: data-parallel ranks whose shards make its batch
  int tpSize = 2;       // dp-tp: tensor-parallel group size (ranks / tpSize data-parallel groups)
  int ppSize = 2;       // dp-pp: pipeline stages (ranks / ppSize data-parallel groups)
  // Mixed precision (serial and ddp; mixed_precision.h): compute and
  // gradient format, fp32 master weights, dynamic loss scale.
  std::string precision = "fp32";  // fp32 | bf16 | fp16
  LossScaleConfig lossScale;
  // Fault injection for tests: at step injectOverflowStep (−1: never) rank
  // injectOverflowRank makes one of its local gradients +inf before reduction.
  int injectOverflowStep = -1, injectOverflowRank = 0;
};

// Bytes this rank holds. Persistent: kept between steps. peakTransient: the
// largest temporary buffer set during a step (ZeRO-3's gathered unit).
struct MemoryReport {
  size_t paramBytes = 0, gradBytes = 0, optimizerBytes = 0, peakTransientBytes = 0;
  size_t total() const { return paramBytes + gradBytes + optimizerBytes; }
};

struct StepTimes {
  double computeSeconds = 0;  // forward + backward (including overlapped communication)
  double commWaitSeconds = 0; // waiting for communication after backward
  double totalSeconds = 0;
  // Pipelines: idle fraction of stage time, the ideal (p−1)/(m+p−1), and the
  // most micro-batches whose activations one stage held at once.
  double bubbleMeasured = 0, bubbleTheory = 0;
  int peakInFlight = 0;
};

class Trainer {
 public:
  virtual ~Trainer() = default;
  // One optimizer step on global batch `step`; returns the global mean loss
  // (identical on every rank).
  virtual Result<double> step(int step) = 0;
  virtual MemoryReport memory() const = 0;
  // Every parameter in the serial model's forward order (collective).
  virtual Result<std::vector<float>> fullParams() = 0;
  const StepTimes& lastTimes() const { return times_; }
  // Rows (tokens or samples) this rank processed per step.
  virtual int rowsPerStep() const = 0;
  // Mixed precision: the loss scale the next step uses, and how many steps
  // were skipped for inf/NaN gradients (1 and 0 without mixed precision).
  virtual double lossScale() const { return 1; }
  virtual int skippedSteps() const { return 0; }

 protected:
  StepTimes times_;
};

// Single-process reference: the whole model, the global batch, no communication.
// `nranksData` > 1 assembles the batch rank by rank like the sharded runs see it.
std::unique_ptr<Trainer> makeSerialTrainer(const TrainConfig& config);
// comm: the data-parallel communicator (not owned; outlives the trainer).
Result<std::unique_ptr<Trainer>> makeDdpTrainer(const TrainConfig& config, ncclComm_t comm);
// stage 1, 2 or 3.
Result<std::unique_ptr<Trainer>> makeZeroTrainer(const TrainConfig& config, ncclComm_t comm, int stage);

// tpComm: the tensor-parallel group; dpComm: the data-parallel group (null or
// one rank for pure tensor parallelism). Neither owned.
Result<std::unique_ptr<Trainer>> makeTensorParallelTrainer(const TrainConfig& config, ncclComm_t tpComm,
                                                           ncclComm_t dpComm);

// Experts spread over comm's ranks (experts must divide by its size).
Result<std::unique_ptr<Trainer>> makeExpertParallelTrainer(const TrainConfig& config, ncclComm_t comm);

// Stages over comm's ranks; m = config.accumulate micro-batches of the
// batch; GPipe or 1F1B. dpComm (null: none): the data-parallel group of this
// stage (the same stage of the other pipelines); each pipeline then takes its
// shard of the global batch and stage gradients are averaged over dpComm.
Result<std::unique_ptr<Trainer>> makePipelineTrainer(const TrainConfig& config, ncclComm_t comm, bool oneFOneB,
                                                     ncclComm_t dpComm = nullptr);

// Splits a batch's samples into k equal micro-batches (rows of x and labels).
std::vector<Batch> splitBatch(const Batch& batch, int k);

}  // namespace plait::training
