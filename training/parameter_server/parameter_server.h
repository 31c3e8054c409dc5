// training/parameter_server/parameter_server.h — asynchronous training with
// parameter servers, after DistBelief (Dean et al., "Large Scale Distributed
// Deep Networks", NIPS 2012), on the one-sided operations (mailbox.h).
//
// Downpour SGD: ranks 0..S-1 are servers, each holding a contiguous shard of
// the flat parameter vector (forward order) and its optimizer state (Adagrad
// as in the paper, or any optimizer of optim.h: updates are elementwise, so
// a shard updates exactly as the whole would); ranks S..S+R-1 are model
// replicas. A replica trains on its own shard of the data (the
// DistributedSampler over R), fetches the parameters every nFetch steps and
// pushes the gradients accumulated since its last push every nPush steps. A
// server applies each push when it arrives (no locks across shards) and
// records its staleness: updates applied to the shard between the fetch the
// gradient was computed from and the push. A slow replica does not hold the
// others; a dead one is dropped (or fails the job: dropDeadReplicas).
//
// Sandblaster L-BFGS: rank 0 coordinates, ranks 1..S are servers, the rest
// replicas. The coordinator runs batch L-BFGS (lbfgs.h) whose vectors live
// sharded on the servers: dot products, axpys and copies are commands each
// server runs on its shard, so no full vector crosses the network. A
// gradient evaluation splits the batch into `portions` pieces (default 8R,
// much smaller than 1/R of the batch); whichever replica asks next gets the
// next piece, so faster replicas take more; when none are left, idle
// replicas redo pieces still outstanding (backup tasks), and the servers
// count each piece once. A replica fetches the parameters once per
// evaluation and pushes each piece's gradient sum to the servers.
//
// Every rank of the communicator calls the same run function; each returns
// its own part of the report, and rank 0's holds the final parameters and
// the servers' statistics.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nccl.h"
#include "plait/status.hpp"
#include "training/trainer.h"

namespace plait::training::ps {

struct PsConfig {
  int servers = 1;
  int steps = 10;       // Downpour: steps per replica; Sandblaster: L-BFGS iterations
  int nFetch = 1, nPush = 1;  // Downpour
  int portions = 0;     // Sandblaster: pieces per evaluation (0: 8 × replicas)
  int history = 5;      // Sandblaster: L-BFGS pairs kept
  int maxLineSearch = 20;
  bool dropDeadReplicas = true;  // false: a dead replica fails the servers
  // Injection for tests and the comparison: replica slowReplica (index among
  // replicas, −1: none) sleeps slowMs before each step or piece; replica
  // killReplica raises SIGKILL (a process) before step killStep.
  int slowReplica = -1;
  double slowMs = 0;
  int killReplica = -1, killStep = -1;
};

// One point of a run: a replica's step (Downpour) or an L-BFGS iteration
// (Sandblaster's coordinator). samples: processed by this replica so far
// (Downpour) or by all replicas (Sandblaster: evaluations × batch).
struct PsPoint {
  int step = 0;
  double loss = 0, seconds = 0;
  int64_t samples = 0;
};

struct PsReport {
  std::string role;  // "server", "replica" or "coordinator"
  int index = 0;     // among its role
  std::vector<PsPoint> points;
  // Rank 0 only: the final parameters (forward order) and, from every
  // server, per replica: pushes applied and pushes the replica said it sent
  // (Downpour), pieces counted (Sandblaster); staleness of every push
  // (Downpour; histogram, last bin: that many or more).
  std::vector<float> params;
  std::vector<int64_t> pushesApplied, pushesSent, portionsDone;
  std::vector<int64_t> stalenessHistogram;
  std::vector<int> droppedReplicas;  // replica indices
  int evaluations = 0;               // Sandblaster: gradient evaluations
  double finalLoss = 0;              // Sandblaster: at the final parameters
};

inline constexpr int kStalenessBins = 64;

// Every rank of comm (S servers + R ≥ 1 replicas; Sandblaster one more, the
// coordinator). config.localBatch: a replica's mini-batch (Downpour), or
// L-BFGS's full batch (Sandblaster: the first localBatch samples of the
// sampler's step 0).
Result<PsReport> runDownpour(const TrainConfig& config, const PsConfig& ps, ncclComm_t comm);
Result<PsReport> runSandblaster(const TrainConfig& config, const PsConfig& ps, ncclComm_t comm);

// Serial references: L-BFGS on the same full batch in one process (the same
// driver, vectors in memory).
Result<PsReport> runSerialLbfgs(const TrainConfig& config, const PsConfig& ps);

// Mean and 99th percentile of a staleness histogram.
double stalenessMean(const std::vector<int64_t>& histogram);
int stalenessPercentile(const std::vector<int64_t>& histogram, double q);

}  // namespace plait::training::ps
