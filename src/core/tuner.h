// tuner.h — chooses how to run each operation: algorithm, channels, slicing.
//
// The model is NCCL's: time = latency + bytes / bandwidth for each candidate
// algorithm, minimised; PLAIT_ALGO / NCCL_ALGO restricts the choice (its
// full syntax, per collective too); NCCL_PROTO is checked (Plait runs
// only Simple). The inputs are
// the communicator's shape and its transports' properties, so the same tuner
// serves shared memory now and networks later. A Plan is plain data that
// prints itself (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=TUNING shows each size's).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/cost_model.h"
#include "core/task.h"

namespace plait {

enum class Algorithm : uint8_t {
  kCopy,     // one rank: a local copy (with the op's pre/post scaling)
  kOneShot,  // every rank pushes its input to every peer, then reduces locally
  kRing,     // pipelined ring (reduce-scatter + all-gather for AllReduce)
  kTree,     // log-depth over the mesh: halving-doubling AllReduce, recursive-doubling AllGather,
             // binomial Broadcast and Reduce
};

const char* algorithmName(Algorithm algo);

struct Plan {
  Algorithm algo = Algorithm::kRing;
  int nChannels = 1;
  size_t sliceBytes = 0;  // bytes per FIFO step
  size_t chunkBytes = 0;  // bytes per rank per ring loop
  bool nonTemporal = false;
  double predictedUs = 0;
  // Set when the task's algorithm selection (Task::algos, forced) leaves it
  // no algorithm the tuner can run: the plan must not run.
  bool refused = false;
  std::string toString() const;
};

struct TunerInputs {
  int nranks = 1;
  int nLocalRanks = 1;
  int nHosts = 1;              // hosts the ranks span (network hops per ring loop)
  int nChannels = 1;           // channels the communicator has connected
  size_t ringStepBytes = 0;    // FIFO step size of ring connectors
  int ringSteps = 8;
  // The device path's ring connectors (devicePlan's slicing; 0: as the host's).
  size_t deviceRingStepBytes = 0;
  int deviceRingSteps = 0;
  size_t meshStepBytes = 0;    // FIFO step size of mesh connectors (0: no mesh)
  size_t lineMaxBytes = 0;     // largest message of the mesh's line FIFOs
  bool fullMesh = false;       // every peer reachable through a mesh connector
  HostCosts costs = kHostCosts;  // the host model's numbers (PLAIT_HOST_COSTS: core/host_costs.h)
  // The share of a core each local rank gets: below 1 when ranks outnumber
  // cores. Copies and reductions are CPU work, so the byte terms divide by
  // it (the one-shot, n reads per rank, then costs more than the ring, about
  // two per rank); hand-offs of AllReduce, AllGather and ReduceScatter cost
  // hopUs / share^2 (Tuner::handOffUs).
  double cpuShare = 1;
};

class Tuner {
 public:
  explicit Tuner(const TunerInputs& inputs);
  // Never fails: an unknown forced algorithm was reported at construction.
  // The task's own selection (Task::algos) replaces PLAIT_ALGO's; one that
  // allows nothing runnable gives a refused plan when forced, else is
  // ignored. Channels stay within the task's bounds.
  Plan plan(const Task& task, size_t bytes) const;
  // The ring plan for this task whatever the cost model prefers (the CUDA
  // executor has ring schedules only). Never kCopy: callers handle one rank.
  Plan ringPlan(const Task& task, size_t bytes) const;
  // A device collective's ring plan: one channel (a thread block per rank)
  // per 256 KiB of the buffer, at most `maxChannels` (the device channels the
  // communicator connected); slices and chunks as the host's.
  Plan devicePlan(const Task& task, size_t bytes, int maxChannels) const;
  // The log-depth schedules (core/log_depth.cc): their hops and bytes per
  // buffer byte on the critical path; false where none runs.
  bool treeShape(CollType coll, double* hops, double* perByte) const;
  // What one FIFO hand-off of `coll` costs here (more when ranks share cores).
  double handOffUs(CollType coll) const;
  // Predicted time in microseconds of the plan chosen for this task.
  double estimateUs(const Task& task, size_t bytes) const { return plan(task, bytes).predictedUs; }

 private:
  double oneShotUs(CollType coll, size_t bytes) const;
  bool computeTreeShape(CollType coll, double* hops, double* perByte) const;  // for trees_
  double treeUs(CollType coll, size_t bytes) const;  // 1e30 where no log-depth schedule runs
  double ringUs(CollType coll, size_t bytes, int nChannels) const;
  size_t hostSliceShare(CollType coll, size_t bytes, int nChannels) const;
  // Slice and chunk sizes from a rank's share of a channel (`perRank`).
  // step, steps: the ring FIFOs' shape (the host's unless given).
  void fillRingSlicing(size_t perRank, size_t bytes, Plan* plan, size_t step = 0, int steps = 0) const;
  // `channels` within the task's bounds and [1, most].
  static int boundedChannels(const Task& task, int channels, int most);

  TunerInputs in_;
  // kAlgo* bits (ring, one-shot, tree) PLAIT_ALGO / NCCL_ALGO allows each
  // collective, by CollType; 0: unrestricted (or nothing Plait runs).
  std::array<uint8_t, 10> envAlgos_{};
  // treeShape's answers by CollType, from the inputs alone.
  struct TreeShape {
    bool runs = false;
    double hops = 0, perByte = 0;
  };
  std::array<TreeShape, 10> trees_{};
};

}  // namespace plait
