// training.h — the network traffic of one training step of a transformer
// under data, tensor, pipeline and expert parallelism, on a simulated
// cluster.
//
// Ranks are laid out as Megatron-LM does (REFERENCE.md, training anchors):
// tensor-parallel rank fastest, then data-parallel, then pipeline stage, so
// a tensor-parallel group of up to one host's GPUs sits inside a host and
// the pipeline's stage-to-stage traffic pairs GPU g of one host with GPU g
// of another (one rail). `Placement` can spread tensor parallelism across
// hosts instead, or shift each stage's GPUs so that pipeline traffic
// changes rail, to show what placement is worth.
//
// One step is a sequence of phases; each phase is one kind of communication
// made by every group of that kind at once (every TP group's all-reduce,
// every stage boundary's send/recv, ...), simulated together on the fabric
// (collective.h), and repeated as often as a step needs it:
//   TP    all-reduce of a micro-batch's activations (seq × d_model values),
//         2 forward and 2 backward per block (Megatron's f and g), per
//         micro-batch;
//   PP    activations forward and gradients backward across each stage
//         boundary, both at once (1F1B's steady state), 1/tp of a
//         micro-batch's activations per TP rank (scatter/gather), per
//         micro-batch;
//   EP    all-to-all dispatch and combine, forward and backward, per MoE
//         block and micro-batch: each rank's tokens (seq / tp) × top-k ×
//         capacity factor × d_model, spread evenly over its EP group;
//   DP    the gradients of each rank's shard of the dense parameters
//         (12 d² per block, 4 d² when the MLP is experts), once per step;
//   EDP   the expert parameters' gradients over ranks holding the same
//         experts (8 d² per expert per block), once per step.
// Communication only: compute and its overlap with communication are not
// modelled; the step's communication time is the sum of its phases.
#pragma once

#include <string>
#include <vector>

#include "plait/status.hpp"
#include "sim/collective.h"

namespace plait::sim {

struct TrainingSpec {
  int tp = 8;            // tensor-parallel group size
  int pp = 1;            // pipeline stages
  int dp = 0;            // data-parallel replicas; 0: the GPUs left over
  int ep = 1;            // expert-parallel group size (divides dp), experts spread over it
  int dModel = 8192;
  int blocks = 64;
  int seq = 4096;
  int microBatch = 1;    // sequences per micro-batch
  int accumulate = 8;    // micro-batches per step
  int experts = 0;       // 0: dense MLPs
  int topK = 2;
  double capacityFactor = 1.25;
  int bytesPerValue = 2;  // bf16 activations and gradients
  bool tpAcrossHosts = false;  // data-parallel rank fastest instead: TP groups span hosts
  int ppRailShift = 0;         // stage s uses GPU (g + s * shift) mod GPUs-per-host: off-rail pipeline traffic
};

struct PhaseReport {
  std::string name;           // TP, PP, EP, DP, EDP
  std::string what;           // "all-reduce", "send/recv", "all-to-all"
  int groups = 0;             // concurrent groups (or transfer pairs)
  int groupSize = 0;
  double bytesPerCall = 0;    // per rank (collectives) or per transfer
  int calls = 0;              // per step
  double timePerCallUs = 0;
  double totalUs() const { return timePerCallUs * calls; }
  std::string plan;           // "ring Simple 8ch", "transfers"
  CollectiveResult result;    // one call's link loads
};

struct StepReport {
  std::vector<PhaseReport> phases;
  std::vector<double> bytesByClass;     // per LinkClass, over the whole step
  std::vector<double> peakByClass;      // per LinkClass: highest utilisation of one of its links in any phase
  std::vector<double> linkBytes;        // per fabric link, over the step
  std::vector<double> linkPeak;         // per fabric link: its highest utilisation in any phase
  std::vector<LinkLoad> hottest;        // most utilised links (peak over phases)
  double commUs() const;
};

// InvalidArgument naming the parameter when the spec does not fit the
// cluster (tp × pp × dp != GPUs, ep not dividing dp, tp larger than a host
// when it must fit one, ...).
Result<StepReport> simulateStep(const ClusterModel& model, const TrainingSpec& spec, int hottest = 8);

// The step as text: the phase table, bytes and peak utilisation per link
// class, the hottest links.
std::string describeStep(const ClusterModel& model, const TrainingSpec& spec, const StepReport& report);

}  // namespace plait::sim
