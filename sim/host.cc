// host.cc — see host.h.
#include "sim/host.h"

#include <algorithm>

#include "core/cost_model.h"
#include "core/tuner.h"
#include "topology/topology.h"
#include "transport/line_fifo.h"

namespace plait::sim {

namespace {

// The ring part of simulateHostRanks: `k` of the communicator's `channels`
// rings as flows over the hosts' cores, DRAM and NICs.
void ringOnHosts(const HostRunSpec& s, const topo::CommGraphs& graphs, CollType coll, uint64_t bytes, int k,
                 int channels, bool oversubscribed, CollectiveResult* r) {
  const int n = s.hosts * s.ranksPerHost;
  // Links: a copy engine per core per host, then each host's NIC up and
  // down, then (past the cache) each host's DRAM.
  const int coreLinks = s.hosts * s.cores;
  std::vector<double> capacity(coreLinks, s.costs.ringBytesPerUs / 1e3);
  for (int h = 0; h < s.hosts; ++h) {
    capacity.push_back(s.nicGBs);
    capacity.push_back(s.nicGBs);
  }
  const int memBase = static_cast<int>(capacity.size());
  const bool dram = s.memGBs > 0 && 2.0 * static_cast<double>(bytes) * s.ranksPerHost > s.cacheBytes;
  if (dram) capacity.insert(capacity.end(), s.hosts, s.memGBs);
  auto coreOf = [&](int rank, int c) {
    const int local = rank % s.ranksPerHost;
    return (rank / s.ranksPerHost) * s.cores + (local * channels + c) % s.cores;
  };
  std::vector<Flow> flows(k);
  int netHops = 0;
  for (int c = 0; c < k; ++c) {
    const std::vector<int>& ring = graphs.rings[c];
    for (int i = 0; i < n; ++i) {
      const int a = ring[i], b = ring[(i + 1) % n];
      flows[c].uses.push_back({coreOf(a, c), 1.0});
      if (dram) flows[c].uses.push_back({memBase + a / s.ranksPerHost, 1.0});
      if (a / s.ranksPerHost != b / s.ranksPerHost) {
        flows[c].uses.push_back({coreLinks + 2 * (a / s.ranksPerHost), 1.0});
        flows[c].uses.push_back({coreLinks + 2 * (b / s.ranksPerHost) + 1, 1.0});
        if (c == 0) ++netHops;
      }
    }
    mergeUses(&flows[c].uses);
  }
  const std::vector<double> rate = maxMinRates(capacity, flows);
  const double slowest = *std::min_element(rate.begin(), rate.end());
  const int steps = ringSteps(coll, n);
  const double netSteps = static_cast<double>(steps) * netHops / n;
  r->latencyUs = s.costs.callUs + (steps - netSteps) * (oversubscribed ? s.wakeUs : s.costs.hopUs) +
                 netSteps * s.netHopUs;
  r->timeUs = r->latencyUs + ringBytesPerLink(coll, n) * static_cast<double>(bytes) / k / (slowest * 1e3);
  r->channels = k;
  r->channelGBs = slowest;
  r->hops.pcie = steps - netSteps;  // shared-memory hand-offs
  r->hops.net = netSteps;
  r->plan = "ring " + std::to_string(k) + "ch" + (dram ? " DRAM" : "");
}

}  // namespace

Result<CollectiveResult> simulateHostRanks(const HostRunSpec& s, CollType coll, uint64_t bytes) {
  if (s.hosts < 1 || s.ranksPerHost < 1 || s.cores < 1)
    return invalidArgument("host ranks: hosts, ranks per host and cores must be >= 1");
  if (s.hosts > 1 && !(s.nicGBs > 0)) return invalidArgument("host ranks on several hosts need --nic-gbps");
  if (coll != CollType::kAllReduce && coll != CollType::kAllGather && coll != CollType::kReduceScatter &&
      coll != CollType::kBroadcast && coll != CollType::kReduce)
    return invalidArgument(std::string("host ranks: ") + collName(coll) + " is not modelled");
  const int n = s.hosts * s.ranksPerHost;
  CollectiveResult r;
  r.protocol = Protocol::kSimple;
  if (n == 1 || bytes == 0) {
    r.latencyUs = r.timeUs = s.costs.callUs;
    return r;
  }
  // What the communicator would connect and plan (src/core/comm.cc).
  const int channels = defaultHostChannels(s.cores, s.ranksPerHost);
  std::vector<topo::RankPlacement> placements;
  for (int rank = 0; rank < n; ++rank)
    placements.push_back({rank, 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(rank / s.ranksPerHost + 1), 0,
                          rank % s.ranksPerHost});
  PLAIT_ASSIGN_OR_RETURN(topo::CommGraphs graphs, topo::buildHostGraphs(placements, channels));
  TunerInputs ti;
  ti.nranks = n;
  ti.nLocalRanks = s.ranksPerHost;
  ti.nHosts = s.hosts;
  ti.nChannels = channels;
  ti.ringStepBytes = kHostShmDefaults.ringStepBytes;
  ti.ringSteps = kHostShmDefaults.ringSteps;
  const bool mesh = s.ranksPerHost <= kHostShmDefaults.meshMaxRanks;
  ti.meshStepBytes = mesh ? kHostShmDefaults.meshStepBytes : 0;
  ti.lineMaxBytes = mesh ? kLineMaxMessageBytes : 0;
  ti.fullMesh = mesh && s.hosts == 1;
  ti.costs = s.costs;
  ti.cpuShare = std::min(1.0, static_cast<double>(s.cores) / s.ranksPerHost);  // as the communicator sets it
  const Tuner tuner(ti);
  Task task;
  task.coll = coll;
  const Plan plan = tuner.plan(task, bytes);
  const bool oversubscribed = s.ranksPerHost * channels > s.cores;
  if (plan.algo == Algorithm::kOneShot) {  // in cache, all pairs at once: the tuner's own figure
    r.timeUs = plan.predictedUs + (oversubscribed ? s.wakeUs - tuner.handOffUs(coll) : 0);
    r.latencyUs = r.timeUs;
    r.channels = 1;
    r.plan = "oneshot";
  } else if (plan.algo == Algorithm::kTree) {  // one channel over the mesh: the tuner's figure, wake-ups as the ring's
    double hops = 0, perByte = 0;
    tuner.treeShape(coll, &hops, &perByte);
    r.timeUs = plan.predictedUs + (oversubscribed ? hops * (s.wakeUs - tuner.handOffUs(coll)) : 0);
    r.latencyUs = s.costs.callUs + hops * (oversubscribed ? s.wakeUs : s.costs.hopUs);
    r.channels = 1;
    r.hops.pcie = hops;
    r.plan = "tree";
  } else {
    ringOnHosts(s, graphs, coll, bytes, plan.nChannels, channels, oversubscribed, &r);
  }
  r.algBw = static_cast<double>(bytes) / r.timeUs / 1e3;
  r.busBw = r.algBw * ringBytesPerLink(coll, n);
  return r;
}

}  // namespace plait::sim
