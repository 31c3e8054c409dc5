// collective.h — one collective on a simulated cluster: Plait's graphs, its
// tuner's channel choice and cost model, and the fabric's fair shares.
//
// How a prediction is made, for a ring collective of S bytes on n GPUs:
//  1. The rings are the ones Plait builds: topology/cluster.h's graph search
//     on each distinct host, joined across hosts (NIC-terminated channels).
//  2. The channel count is the CUDA executor's (core/tuner.h devicePlan: one
//     channel per 256 KiB, at most the rings found).
//  3. Each channel is one flow over every link its hops cross (fabric.h
//     routes), all channels at once; max-min fair shares give each channel's
//     rate, each link's capacity scaled by the protocol's efficiency on its
//     class and each channel bounded by the protocol's ceiling
//     (core/cost_model.h).
//  4. time = ring latency (the cost model's base + per-hop latencies of the
//     critical path, plus the switches a network hop crosses) + the bytes
//     each link carries (S × the collective's ring factor / channels) over
//     the slowest channel's rate. The protocol is the fastest of those
//     allowed (LL up to 1 MiB, LL128 up to 64 MiB, Simple), as NCCL's tuner
//     picks; `protocols` restricts the choice (Plait's device path runs
//     Simple only).
// AllReduce, AllGather, ReduceScatter, Broadcast and Reduce are rings; other
// collectives are refused (InvalidArgument) until the simulator models them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/cost_model.h"
#include "core/task.h"
#include "plait/status.hpp"
#include "sim/fabric.h"
#include "sim/flows.h"
#include "topology/cluster.h"

namespace plait::sim {

struct LinkLoad {
  int link = -1;
  double utilisation = 0;  // fraction of the link's capacity the collective keeps busy
  double bytes = 0;        // bytes it carries during the collective
};

// The algorithms the model knows. Plait's executors run rings; trees (the
// double binary trees topology/ builds, AllReduce only) are modelled so that
// predictions at scale say what NCCL's tree would do.
enum class SimAlgo : uint8_t { kRing = 0, kTree = 1 };
inline constexpr int kSimAlgoCount = 2;
const char* simAlgoName(SimAlgo a);

struct CollectiveResult {
  double timeUs = 0;
  SimAlgo algorithm = SimAlgo::kRing;
  double algBw = 0;  // GB/s
  double busBw = 0;
  Protocol protocol = Protocol::kSimple;
  int channels = 0;
  double latencyUs = 0;    // the latency part of timeUs
  double channelGBs = 0;   // the slowest channel's rate
  HopCounts hops;          // the critical path
  std::vector<double> bytesByClass = std::vector<double>(kLinkClassCount, 0.0);
  std::vector<LinkLoad> busiest;  // up to `busiest` links, most utilised first
};

struct SimOptions {
  uint8_t algorithms = 0x3;  // bit per SimAlgo allowed
  uint8_t protocols = 0x7;   // bit per Protocol allowed
  int busiest = 0;          // how many of the busiest links to report
};

// A cluster, its graphs and its fabric, ready to answer many queries.
class ClusterModel {
 public:
  // Searches the graphs (computeClusterGraphs) and builds the fabric. Errors
  // from either, naming the cause.
  static Result<std::unique_ptr<ClusterModel>> create(topo::Cluster cluster, const NetworkSpec& network);
  ~ClusterModel();
  ClusterModel(const ClusterModel&) = delete;
  ClusterModel& operator=(const ClusterModel&) = delete;

  Result<CollectiveResult> simulate(CollType coll, uint64_t bytes, const SimOptions& options) const;

  int nranks() const { return static_cast<int>(gpuOfRank_.size()); }
  const topo::ClusterGraphs& graphs() const { return graphs_; }
  const Fabric& fabric() const { return fabric_; }
  const topo::Cluster& cluster() const { return cluster_; }

 private:
  ClusterModel() = default;
  struct ChannelSet;  // the first k channels' flows and fair rates per protocol
  const ChannelSet& channels(SimAlgo algo, int k) const;
  void ringFlows(ChannelSet* set, int k) const;
  void treeFlows(ChannelSet* set, int k) const;
  // Appends the route a -> b to `route`; returns the hop's class (NVLink or
  // PCIe inside a host, NET between hosts) and adds the switches it crosses
  // to `*switches`.
  HopClass routeHop(GpuRef a, GpuRef b, int netOut, int netIn, std::vector<int>* route, int* switches) const;

  topo::Cluster cluster_;
  topo::ClusterGraphs graphs_;
  Fabric fabric_;
  std::vector<GpuRef> gpuOfRank_;
  std::vector<int> rankBase_;  // per host: its first rank
  mutable std::vector<std::unique_ptr<ChannelSet>> cache_;  // by algorithm and channel count
};

}  // namespace plait::sim
