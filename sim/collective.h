// collective.h — collectives on a simulated cluster: Plait's graphs, its
// tuner's channel choice and cost model, and the fabric's fair shares.
//
// How a prediction is made, for a ring collective of S bytes on n GPUs:
//  1. The rings are the ones Plait builds for the communicator (comm.h:
//     topology/cluster.h's graph search on its hosts trimmed to its GPUs,
//     joined across hosts through NIC-terminated channels).
//  2. The channel count is the CUDA executor's (core/tuner.h devicePlan: one
//     channel per 256 KiB, at most the rings found).
//  3. Each channel is one flow over every link its hops cross (fabric.h
//     routes); every channel of every communicator in the phase runs at
//     once, and max-min fair shares give each its rate, each link's capacity
//     scaled by the protocol's efficiency on its class and each channel
//     bounded by the protocol's ceiling (core/cost_model.h).
//  4. time = latency (the cost model's base + per-hop latencies of the
//     critical path, plus the switches a network hop crosses) + the bytes
//     each link carries (S × the collective's ring factor / channels) over
//     the slowest channel's rate. The algorithm and protocol are the fastest
//     of those allowed (LL up to 1 MiB, LL128 up to 64 MiB, Simple), as
//     NCCL's tuner picks; SimOptions restricts them (Plait's CUDA executor
//     runs rings with Simple).
// AllReduce, AllGather, ReduceScatter, Broadcast and Reduce are rings (and
// AllReduce also trees, and NVLS inside one NVSwitch host: every GPU one flow
// up to the switches and one down, each carrying S (1 + 1/heads) / channels at
// NCCL's NVLS efficiency, after NCCL's NVLS latency; heads = min(n, 32), and
// the links of GPUs that are not heads, which carry S, are charged as heads');
// point-to-point transfers (send/recv, all-to-all)
// are one flow each, from the sender's nearest NIC to the receiver's.
//
// Not thread-safe: a model caches the world communicator's flows.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/cost_model.h"
#include "core/task.h"
#include "plait/status.hpp"
#include "sim/comm.h"
#include "sim/fabric.h"
#include "sim/flows.h"
#include "topology/cluster.h"

namespace plait::sim {

// The algorithms the model knows. Plait's executors run rings; trees (the
// double binary trees of topology/, AllReduce only) and NVLS (AllReduce in
// the NVSwitches of one host, Hopper on: core/cost_model.h) are modelled so
// that predictions say what NCCL's tuner would pick.
enum class SimAlgo : uint8_t { kRing = 0, kTree = 1, kNvls = 2 };
inline constexpr int kSimAlgoCount = 3;
const char* simAlgoName(SimAlgo a);

struct LinkLoad {
  int link = -1;
  double utilisation = 0;  // fraction of the link's capacity kept busy while the phase runs
  double bytes = 0;        // bytes it carries
};

struct CollectiveResult {
  double timeUs = 0;
  SimAlgo algorithm = SimAlgo::kRing;
  double algBw = 0;  // GB/s
  double busBw = 0;
  Protocol protocol = Protocol::kSimple;
  int channels = 0;
  double latencyUs = 0;   // the latency part of timeUs
  double channelGBs = 0;  // the slowest channel's rate
  HopCounts hops;         // the critical path
  std::string plan;       // "ring Simple 8ch", "tree LL 2ch", "oneshot", "transfers"
  std::vector<double> linkBytes;  // per fabric link: bytes carried (all communicators of the phase)
  std::vector<double> linkBusy;   // per fabric link: fraction of its capacity in use
};

struct SimOptions {
  uint8_t algorithms = 0x7;  // bit per SimAlgo allowed
  uint8_t protocols = 0x7;   // bit per Protocol allowed
};

struct Transfer {
  GpuRef from, to;
  double bytes = 0;
};

// A cluster and its fabric, ready to answer many queries.
class ClusterModel {
 public:
  // Builds the fabric and the world communicator (every GPU). Errors from
  // the graph search or the fabric, naming the cause; InvalidArgument beyond
  // kMaxGpus GPUs (memory grows with GPUs × channels × hops).
  static Result<std::unique_ptr<ClusterModel>> create(topo::Cluster cluster, const NetworkSpec& network);
  ~ClusterModel();
  ClusterModel(const ClusterModel&) = delete;
  ClusterModel& operator=(const ClusterModel&) = delete;

  // One collective on every GPU.
  Result<CollectiveResult> simulate(CollType coll, uint64_t bytes, const SimOptions& options) const;
  // The same collective on each of `comms` at once (equal-sized groups of a
  // parallelism strategy): the slowest group's time and every link's load.
  Result<CollectiveResult> simulateConcurrent(const std::vector<SimComm>& comms, CollType coll, uint64_t bytes,
                                              const SimOptions& options) const;
  // Point-to-point transfers, all starting together (Simple protocol, one
  // hop's latency): time until the last is through, and every link's load.
  // Between hosts a transfer leaves by the sender's nearest NIC, or with PXN
  // (NetworkSpec::pxn) by the NIC of the sender host's GPU on the receiver's
  // rail, reached over NVLink.
  CollectiveResult simulateTransfers(const std::vector<Transfer>& transfers) const;
  // AlltoAll on every GPU: each rank sends bytes / n to every other (bytes:
  // nccl-tests' size, the per-rank buffer). Up to kMaxAlltoAllRanks ranks
  // (n² flows).
  Result<CollectiveResult> simulateAlltoAll(uint64_t bytes) const;
  static constexpr int kMaxAlltoAllRanks = 1024;
  static constexpr int64_t kMaxGpus = int64_t(1) << 17;

  Result<SimComm> communicator(const std::vector<GpuRef>& gpus) const { return makeComm(cluster_, gpus); }
  int nranks() const { return world_.nranks(); }
  const SimComm& world() const { return world_; }
  const Fabric& fabric() const { return fabric_; }
  const topo::Cluster& cluster() const { return cluster_; }
  // The `count` busiest links of a result, most utilised first.
  std::vector<LinkLoad> busiest(const CollectiveResult& r, int count) const;

 private:
  ClusterModel() = default;
  struct ChannelFlows;  // one communicator's channels: flows, critical path
  ChannelFlows flowsFor(const SimComm& comm, SimAlgo algo, int k) const;
  void ringFlows(const SimComm& comm, int k, ChannelFlows* out) const;
  void treeFlows(const SimComm& comm, int k, ChannelFlows* out) const;
  void nvlsFlows(const SimComm& comm, int k, ChannelFlows* out) const;
  // NVLS's efficiency on `comm` (core/cost_model.h), or 0 where NCCL would
  // not run it: more than one host, a GPU before Hopper, a GPU with no
  // NVLink to an NVSwitch.
  double nvlsEfficiencyOn(const SimComm& comm) const;
  // The topology links (host-local ids) between GPU `g` and its NVSwitch,
  // each way; {-1, -1} when it has none.
  std::pair<int, int> switchLinks(GpuRef g) const;
  // Appends the route a -> b; returns the hop's class (NVLink or PCIe inside
  // a host, NET between hosts) and adds the switches it crosses to *switches.
  HopClass routeHop(GpuRef a, GpuRef b, int netOut, int netIn, std::vector<int>* route, int* switches) const;
  // Each link's capacity under protocol `p`, or under NVLS's efficiency
  // when `nvls` > 0.
  std::vector<double> capacities(Protocol p, double nvls = 0) const;
  using FlowSet = std::vector<std::shared_ptr<const ChannelFlows>>;  // per communicator
  // The channels' flows of each communicator (the world's cached).
  FlowSet flowSet(const std::vector<const SimComm*>& comms, SimAlgo algo, int k, bool cacheable) const;
  // Each channel's fair rate under `proto`, every communicator's at once.
  std::vector<double> channelRates(const std::vector<const SimComm*>& comms, const FlowSet& flows, SimAlgo algo,
                                   Protocol proto, double nvls) const;
  // r->linkBytes and r->linkBusy for channels at `rate`, each carrying `share` per link use.
  void fillLinkLoads(const FlowSet& flows, const std::vector<double>& rate, double share, CollectiveResult* r) const;
  Result<CollectiveResult> run(const std::vector<const SimComm*>& comms, CollType coll, uint64_t bytes,
                               const SimOptions& options, bool cacheable) const;

  topo::Cluster cluster_;
  std::vector<topo::PathTable> paths_;  // per distinct system, for the fabric
  Fabric fabric_;
  SimComm world_;
  // The world communicator's flows and rates, by (algorithm, channels, protocol).
  mutable std::map<std::tuple<int, int, int>, std::vector<double>> worldRates_;
  mutable std::map<std::pair<int, int>, std::shared_ptr<const ChannelFlows>> worldFlows_;
};

}  // namespace plait::sim
