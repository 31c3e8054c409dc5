// plait-train — trains a tiny model with one of the training layer's
// strategies and prints, on standard output and from rank 0 only,
//   step K loss L            (one line per step, K from 1)
//   tokens/s T               (global rows per second, median step)
//   step-ms median M compute C comm-wait W
//   memory rank R params P grads G optimizer O transient X   (bytes, one line per rank)
//   loss-scale S skipped N   (only with --precision bf16|fp16)
//   final-loss L             (only with --final-loss)
// Ranks: started by plait-run (or mpirun, torchrun, Slurm), one process each;
// without a launcher, --ranks N runs N ranks as threads of this process.
//
//   plait-run -n 2 plait-train --model transformer --parallel ddp --steps 20
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <thread>
#include <vector>

#include "plait/launch.hpp"
#include "tools/train/parameter_server.h"
#include "training/strategies.h"

namespace {

using namespace plait::training;

struct Options {
  TrainConfig train;
  plait::training::ps::PsConfig ps;
  int ranks = 0;  // 0: from the launcher
  int steps = 10;
  int globalBatch = 16;
  size_t bucketKb = 25 * 1024, firstBucketKb = 1024;
  bool finalLoss = false;
};

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Runs one rank; returns its exit code. comm may be null for one rank.
int runRank(const Options& o, int rank, int nranks, ncclComm_t comm) {
  if (plait_train::isParameterServer(o.train.parallel))
    return plait_train::runParameterServerRank(o.train, o.ps, o.globalBatch, o.steps, rank, nranks, comm);
  TrainConfig c = o.train;
  // A serial run with --data-ranks N assembles its batch like N data-parallel ranks.
  const int dp = c.parallel == "none" ? std::max(1, c.nranksData) : dataParallelSize(c, nranks);
  if (o.globalBatch % (dp * c.accumulate) != 0) {
    if (rank == 0) fprintf(stderr, "plait-train: --batch %d must divide by %d ranks × --accumulate\n", o.globalBatch, dp);
    return 2;
  }
  c.localBatch = o.globalBatch / dp;
  c.bucketBytes = o.bucketKb * 1024;
  c.firstBucketBytes = o.firstBucketKb * 1024;
  auto trainer = makeTrainer(c, comm);
  if (!trainer.isOk()) {
    fprintf(stderr, "plait-train rank %d: %s\n", rank, trainer.status().toString().c_str());
    return 1;
  }
  std::vector<double> total, compute, wait;
  for (int k = 0; k < o.steps; ++k) {
    auto loss = (*trainer)->step(k);
    if (!loss.isOk()) {
      fprintf(stderr, "plait-train rank %d: step %d: %s\n", rank, k + 1, loss.status().toString().c_str());
      return 1;
    }
    if (rank == 0) printf("step %d loss %.9g\n", k + 1, *loss);
    const StepTimes& t = (*trainer)->lastTimes();
    if (k > 0 || o.steps == 1) total.push_back(t.totalSeconds), compute.push_back(t.computeSeconds), wait.push_back(t.commWaitSeconds);
  }
  if (o.finalLoss) {  // collective: every rank gathers the parameters
    auto params = (*trainer)->fullParams();
    if (!params.isOk()) {
      fprintf(stderr, "plait-train rank %d: the final parameters: %s\n", rank, params.status().toString().c_str());
      return 1;
    }
    if (rank == 0) printf("final-loss %.9g\n", plait_train::evalLoss(c, *params));
  }
  MemoryReport m = (*trainer)->memory();
  std::vector<uint64_t> mine{m.paramBytes, m.gradBytes, m.optimizerBytes, m.peakTransientBytes};
  std::vector<uint64_t> all(4 * size_t(nranks));
  if (comm) {
    if (ncclAllGather(mine.data(), all.data(), 4, ncclUint64, comm, nullptr) != ncclSuccess) {
      fprintf(stderr, "plait-train rank %d: ncclAllGather: %s\n", rank, ncclGetLastError(comm));
      return 1;
    }
  } else {
    all = mine;
  }
  if (rank == 0) {
    double rows = double(o.globalBatch) * (c.model.kind == "transformer" ? c.model.seq : 1);
    printf("tokens/s %.1f\n", rows / median(total));
    printf("step-ms median %.3f compute %.3f comm-wait %.3f\n", 1e3 * median(total), 1e3 * median(compute),
           1e3 * median(wait));
    const StepTimes& t = (*trainer)->lastTimes();
    if (c.parallel.rfind("pp-", 0) == 0)
      printf("bubble measured %.3f theoretical %.3f (last step; %d micro-batches, at most %d in flight on rank 0)\n",
             t.bubbleMeasured, t.bubbleTheory, c.accumulate, t.peakInFlight);
    for (int r = 0; r < nranks; ++r)
      printf("memory rank %d params %llu grads %llu optimizer %llu transient %llu\n", r,
             (unsigned long long)all[4 * r], (unsigned long long)all[4 * r + 1], (unsigned long long)all[4 * r + 2],
             (unsigned long long)all[4 * r + 3]);
    if (c.precision != "fp32") printf("loss-scale %g skipped %d\n", (*trainer)->lossScale(), (*trainer)->skippedSteps());
    fflush(stdout);
  }
  return 0;
}

int runThreads(const Options& o, int nranks) {
  std::vector<ncclComm_t> comms(nranks);
  if (ncclCommInitAll(comms.data(), nranks, nullptr) != ncclSuccess) {
    fprintf(stderr, "plait-train: ncclCommInitAll: %s\n", ncclGetLastError(nullptr));
    return 1;
  }
  std::vector<int> codes(nranks);
  std::vector<std::thread> threads;
  for (int r = 0; r < nranks; ++r) threads.emplace_back([&, r] { codes[r] = runRank(o, r, nranks, comms[r]); });
  for (auto& t : threads) t.join();
  for (ncclComm_t c : comms) ncclCommDestroy(c);
  return *std::max_element(codes.begin(), codes.end());
}

void addOptions(CLI::App& app, Options& o) {
  TrainConfig& t = o.train;
  app.add_option("--model", t.model.kind, "mlp | transformer | moe")->check(CLI::IsMember({"mlp", "transformer", "moe"}));
  app.add_option("--parallel", t.parallel,
                 "none | ddp | zero1 | zero2 | zero3 | tp | pp-gpipe | pp-1f1b | ep | dp-tp | dp-pp | downpour | sandblaster | lbfgs (serial)");
  app.add_option("--precision", t.precision, "fp32 | bf16 | fp16 (none, ddp): 16-bit compute and gradients, fp32 master")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  app.add_option("--loss-scale", t.lossScale.initial, "initial dynamic loss scale (bf16/fp16)");
  app.add_option("--loss-scale-window", t.lossScale.growthInterval, "good steps before the loss scale doubles");
  app.add_flag("--batchnorm", t.model.batchnorm, "mlp: BatchNorm after each hidden Linear (SyncBN across data parallel)");
  app.add_option("--ranks", o.ranks, "ranks (threads of this process when no launcher started it)");
  app.add_option("--steps", o.steps, "optimizer steps");
  app.add_option("--seed", t.seed, "seed of data and initialisation");
  app.add_option("--batch", o.globalBatch, "global batch (samples per step, all ranks together)");
  app.add_option("--accumulate", t.accumulate, "micro-batches per step");
  app.add_option("--optimizer", t.optimizer.kind, "adam | sgd | adagrad (downpour's default is adagrad)")
      ->check(CLI::IsMember({"adam", "sgd", "adagrad"}));
  app.add_option("--lr", t.optimizer.lr, "learning rate");
  app.add_flag("--checkpoint", t.checkpoint, "activation checkpointing (recompute in backward)");
  app.add_option("--bucket-kb", o.bucketKb, "DDP bucket size (KiB)");
  app.add_option("--first-bucket-kb", o.firstBucketKb, "DDP first bucket size (KiB)");
  app.add_flag("!--no-overlap", t.overlap, "DDP: all-reduce after backward instead of during it");
  app.add_option("--hidden", t.model.hidden, "mlp/moe hidden width");
  app.add_option("--depth", t.model.depth, "mlp hidden layers");
  app.add_option("--inputs", t.model.inputs, "mlp/moe input features");
  app.add_option("--d-model", t.model.d, "transformer width");
  app.add_option("--heads", t.model.heads, "transformer heads");
  app.add_option("--blocks", t.model.blocks, "transformer blocks");
  app.add_option("--seq", t.model.seq, "transformer sequence length");
  app.add_option("--tp-size", t.tpSize, "dp-tp: ranks per tensor-parallel group");
  app.add_option("--pp-size", t.ppSize, "dp-pp: pipeline stages per data-parallel replica");
  app.add_option("--ddp-isolate", t.ddpIsolate, "benchmark: ddp with only 'compute' or only 'comm'")
      ->check(CLI::IsMember({"", "compute", "comm"}));
  app.add_option("--experts", t.model.moe.experts, "moe experts");
  app.add_option("--top-k", t.model.moe.topK, "moe experts per token");
  app.add_option("--capacity-factor", t.model.moe.capacityFactor, "moe capacity factor");
  app.add_option("--data-ranks", t.nranksData,
                 "--parallel none: take the global batch rank by rank as N data-parallel ranks would");
  app.add_option("--moe-groups", t.model.moe.groups,
                 "moe: routing groups per batch (a serial run routes like N data-parallel ranks with N)");
  app.add_flag("--final-loss", o.finalLoss,
               "print the final parameters' loss on 256 samples (seed + 1); downpour/sandblaster always do");
  plait_train::addParameterServerOptions(app, o.ps);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"plait-train: train a tiny model with a Plait training strategy"};
  addOptions(app, o);
  CLI11_PARSE(app, argc, argv);
  // Downpour updates with Adagrad as in the paper unless --optimizer says otherwise.
  if (o.train.parallel == "downpour" && app.count("--optimizer") == 0) o.train.optimizer.kind = "adagrad";
  auto info = plait::detectLaunch();
  if (!info.isOk()) {
    fprintf(stderr, "plait-train: %s\n", info.status().toString().c_str());
    return 2;
  }
  if (info->launcher == "none") {
    int n = std::max(1, o.ranks);
    if (n == 1 && (o.train.parallel == "none" || o.train.parallel == "lbfgs")) return runRank(o, 0, 1, nullptr);
    return runThreads(o, n);
  }
  if (o.ranks != 0 && o.ranks != info->nranks) {
    fprintf(stderr, "plait-train: --ranks %d but the launcher started %d\n", o.ranks, info->nranks);
    return 2;
  }
  auto id = plait::launchUniqueId(*info, plait::Deadline::afterMs(60000));
  if (!id.isOk()) {
    fprintf(stderr, "plait-train: %s\n", id.status().toString().c_str());
    return 1;
  }
  ncclComm_t comm = nullptr;
  if (ncclCommInitRank(&comm, info->nranks, *id, info->rank) != ncclSuccess) {
    fprintf(stderr, "plait-train rank %d: ncclCommInitRank: %s\n", info->rank, ncclGetLastError(nullptr));
    return 1;
  }
  int rc = runRank(o, info->rank, info->nranks, info->nranks == 1 && o.train.parallel == "none" ? nullptr : comm);
  ncclCommDestroy(comm);
  return rc;
}
