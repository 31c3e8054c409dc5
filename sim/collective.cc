// collective.cc — see collective.h.
#include "sim/collective.h"

#include <algorithm>
#include <array>
#include <numeric>

#include "core/tuner.h"

namespace plait::sim {

struct ClusterModel::ChannelSet {
  std::vector<Flow> flows;                               // one per channel, no ceiling
  std::array<std::vector<double>, kProtocolCount> rate;  // per protocol, per channel (GB/s)
  HopCounts hops;            // the critical path: one loop of a ring; up and down the deepest tree branch
  double switchesPerNetHop = 0;
};

const char* simAlgoName(SimAlgo a) { return a == SimAlgo::kTree ? "tree" : "ring"; }

namespace {

HopClass hopClassOf(LinkClass c) {
  switch (c) {
    case LinkClass::kNvlink:
    case LinkClass::kLocal: return HopClass::kNvlink;
    case LinkClass::kPcie:
    case LinkClass::kCpu: return HopClass::kPcie;
    case LinkClass::kNic:
    case LinkClass::kSpine: return HopClass::kNet;
  }
  return HopClass::kNet;
}

bool isRing(CollType c) {
  return c == CollType::kAllReduce || c == CollType::kAllGather || c == CollType::kReduceScatter ||
         c == CollType::kBroadcast || c == CollType::kReduce;
}

void addHop(HopCounts* h, HopClass c, double n) {
  (c == HopClass::kNet ? h->net : c == HopClass::kPcie ? h->pcie : h->nvlink) += n;
}

}  // namespace

ClusterModel::~ClusterModel() = default;

Result<std::unique_ptr<ClusterModel>> ClusterModel::create(topo::Cluster cluster, const NetworkSpec& network) {
  std::unique_ptr<ClusterModel> m(new ClusterModel());
  m->cluster_ = std::move(cluster);
  PLAIT_ASSIGN_OR_RETURN(m->graphs_, topo::computeClusterGraphs(m->cluster_));
  PLAIT_ASSIGN_OR_RETURN(m->fabric_, Fabric::build(m->cluster_, m->graphs_.paths, network));
  for (int h = 0; h < m->cluster_.hosts(); ++h) {
    m->rankBase_.push_back(static_cast<int>(m->gpuOfRank_.size()));
    for (int g = 0; g < m->cluster_.host(h).count(topo::NodeType::kGpu); ++g) m->gpuOfRank_.push_back({h, g});
  }
  m->cache_.resize(kSimAlgoCount * (m->graphs_.comm.rings.size() + 1));
  return m;
}

HopClass ClusterModel::routeHop(GpuRef a, GpuRef b, int netOut, int netIn, std::vector<int>* route,
                                int* switches) const {
  const size_t first = route->size();
  *switches += fabric_.appendRoute(a, b, netOut, netIn, route);
  if (a.host != b.host) return HopClass::kNet;
  HopClass cls = HopClass::kNvlink;
  for (size_t i = first; i < route->size(); ++i)
    if (hopClassOf(fabric_.links()[(*route)[i]].cls) == HopClass::kPcie) cls = HopClass::kPcie;
  return cls;
}

void ClusterModel::ringFlows(ChannelSet* set, int k) const {
  set->flows.assign(k, Flow{});
  const int n = nranks();
  std::vector<int> route;
  int netHops = 0, switches = 0;
  for (int c = 0; c < k; ++c) {
    const std::vector<int>& ring = graphs_.comm.rings[c];
    for (int i = 0; i < n; ++i) {
      const GpuRef a = gpuOfRank_[ring[i]], b = gpuOfRank_[ring[(i + 1) % n]];
      int netOut = 0, netIn = 0;
      if (a.host != b.host) {
        netOut = graphs_.perSystem[cluster_.hostSystem[a.host]].ring.channels[c].netOut;
        netIn = graphs_.perSystem[cluster_.hostSystem[b.host]].ring.channels[c].netIn;
      }
      route.clear();
      int crossed = 0;
      const HopClass cls = routeHop(a, b, netOut, netIn, &route, &crossed);
      for (int l : route) set->flows[c].uses.push_back({l, 1.0});
      if (c != 0) continue;
      addHop(&set->hops, cls, 1);
      if (cls == HopClass::kNet) {
        ++netHops;
        switches += crossed;
      }
    }
    mergeUses(&set->flows[c].uses);
  }
  set->switchesPerNetHop = netHops > 0 ? static_cast<double>(switches) / netHops : 0;
}

// Trees as NCCL runs them: per graph channel c, both trees of the double
// binary tree over hosts (topology/topology.h), each carrying half of the
// channel's share, so that every NIC serves a host that is interior in one
// tree and a leaf in the other. Inside a host a tree is a chain in channel
// c's GPU order, headed by the GPU next to the NIC the channel enters by;
// hosts talk through that NIC. Every edge is crossed once up (the
// reduction) and once down (the broadcast).
void ClusterModel::treeFlows(ChannelSet* set, int k) const {
  const int hosts = cluster_.hosts();
  set->flows.assign(2 * k, Flow{});
  std::vector<int> route;
  int crossed = 0, netEdges = 0, netSwitches = 0;
  std::array<std::vector<int>, 2> parents{topo::doubleBinaryTreeParents(hosts, false),
                                          topo::doubleBinaryTreeParents(hosts, true)};
  for (int c = 0; c < k; ++c) {
    // Host h's chain: its ranks in ring c's order (rings list hosts whole).
    std::vector<std::vector<int>> chain(hosts);
    for (int r : graphs_.comm.rings[c]) chain[gpuOfRank_[r].host].push_back(r);
    std::vector<int> nic(hosts);
    for (int h = 0; h < hosts; ++h) nic[h] = hosts > 1 ? graphs_.perSystem[cluster_.hostSystem[h]].ring.channels[c].netIn : 0;
    route.clear();
    for (int h = 0; h < hosts; ++h)
      for (size_t i = 1; i < chain[h].size(); ++i) {
        routeHop(gpuOfRank_[chain[h][i]], gpuOfRank_[chain[h][i - 1]], 0, 0, &route, &crossed);
        routeHop(gpuOfRank_[chain[h][i - 1]], gpuOfRank_[chain[h][i]], 0, 0, &route, &crossed);
      }
    const size_t intra = route.size();
    for (int t = 0; t < 2; ++t) {
      Flow& f = set->flows[2 * c + t];
      route.resize(intra);
      for (int h = 0; h < hosts; ++h) {
        const int p = parents[t][h];
        if (p < 0) continue;
        const GpuRef a = gpuOfRank_[chain[h].front()], b = gpuOfRank_[chain[p].front()];
        int switches = 0;
        routeHop(a, b, nic[h], nic[p], &route, &switches);
        routeHop(b, a, nic[p], nic[h], &route, &crossed);
        if (c == 0 && t == 0) {
          netEdges += 1;
          netSwitches += switches;
        }
      }
      for (int l : route) f.uses.push_back({l, 1.0});
      mergeUses(&f.uses);
    }
  }
  // The critical path: down the longest chain and the deeper tree, and back.
  int hostDepth = 0;
  for (int t = 0; t < 2; ++t)
    for (int h = 0; h < hosts; ++h) {
      int d = 0;
      for (int p = parents[t][h]; p >= 0 && d <= hosts; p = parents[t][p]) ++d;
      hostDepth = std::max(hostDepth, d);
    }
  std::vector<int> chain0;
  for (int r : graphs_.comm.rings[0])
    if (gpuOfRank_[r].host == 0) chain0.push_back(r);
  for (size_t i = 1; i < chain0.size(); ++i) {
    route.clear();
    addHop(&set->hops, routeHop(gpuOfRank_[chain0[i]], gpuOfRank_[chain0[i - 1]], 0, 0, &route, &crossed), 2);
  }
  set->hops.net = 2.0 * hostDepth;
  set->switchesPerNetHop = netEdges > 0 ? static_cast<double>(netSwitches) / netEdges : 0;
}

const ClusterModel::ChannelSet& ClusterModel::channels(SimAlgo algo, int k) const {
  std::unique_ptr<ChannelSet>& slot = cache_[static_cast<int>(algo) * (graphs_.comm.rings.size() + 1) + k];
  if (slot) return *slot;
  auto set = std::make_unique<ChannelSet>();
  if (algo == SimAlgo::kTree) {
    treeFlows(set.get(), k);
  } else {
    ringFlows(set.get(), k);
  }
  const std::vector<SimLink>& links = fabric_.links();
  for (int p = 0; p < kProtocolCount; ++p) {
    const Protocol proto = static_cast<Protocol>(p);
    std::vector<double> capacity(links.size());
    for (size_t l = 0; l < links.size(); ++l)
      capacity[l] = links[l].gbs * protocolEfficiency(proto, hopClassOf(links[l].cls));
    // The graph search gave each channel treeBw on its links; the channel's
    // two trees share it, and each tree splits its threads between the
    // reduction going up and the broadcast coming down: a quarter each (NCCL's
    // tree model: algorithm bandwidth half the graph's total).
    double ceiling = protocolChannelCeilingGBs(proto);
    if (algo == SimAlgo::kTree && graphs_.comm.treeBw > 0) {
      const double quarter = 0.25 * graphs_.comm.treeBw;
      ceiling = ceiling > 0 ? std::min(ceiling, quarter) : quarter;
    }
    std::vector<Flow> flows = set->flows;
    for (Flow& f : flows) f.ceilingGBs = ceiling;
    set->rate[p] = maxMinRates(capacity, flows);
  }
  slot = std::move(set);
  return *slot;
}

Result<CollectiveResult> ClusterModel::simulate(CollType coll, uint64_t bytes, const SimOptions& options) const {
  if (!isRing(coll))
    return invalidArgument(std::string("plait-sim models ring collectives (AllReduce, AllGather, ReduceScatter, "
                                       "Broadcast, Reduce), not ") + collName(coll));
  if ((options.protocols & 0x7) == 0) return invalidArgument("no protocol allowed");
  if ((options.algorithms & 0x3) == 0) return invalidArgument("no algorithm allowed");
  CollectiveResult r;
  const int n = nranks();
  if (n == 1 || bytes == 0) {
    r.latencyUs = r.timeUs = ringLatencyUs(Protocol::kSimple, HopCounts{});
    return r;
  }
  // The channel count the CUDA executor would use (core/tuner.h).
  TunerInputs ti;
  ti.nranks = n;
  ti.nHosts = cluster_.hosts();
  ti.nChannels = static_cast<int>(graphs_.comm.rings.size());
  const Tuner tuner(ti);
  Task task;
  task.coll = coll;
  const int k = tuner.devicePlan(task, bytes, ti.nChannels).nChannels;
  const int steps = ringSteps(coll, n);
  const ChannelSet* chosen = nullptr;
  double perChannelBytes = 0;
  for (int a = 0; a < kSimAlgoCount; ++a) {
    const SimAlgo algo = static_cast<SimAlgo>(a);
    if ((options.algorithms & (1u << a)) == 0 || (algo == SimAlgo::kTree && coll != CollType::kAllReduce)) continue;
    const ChannelSet& set = channels(algo, k);
    HopCounts hops = set.hops;
    // A ring link carries the channel's share times the collective's ring
    // factor; a tree flow carries half a channel's share, once each way.
    double share = static_cast<double>(bytes) / k / 2;
    if (algo == SimAlgo::kRing) {
      hops.nvlink = set.hops.nvlink * steps / n;
      hops.pcie = set.hops.pcie * steps / n;
      hops.net = set.hops.net * steps / n;
      share = static_cast<double>(bytes) / k * ringBytesPerLink(coll, n);
    }
    const double netLatency = set.switchesPerNetHop * fabric_.spec().switchLatencyUs;
    for (int p = 0; p < kProtocolCount; ++p) {
      const Protocol proto = static_cast<Protocol>(p);
      if ((options.protocols & (1u << p)) == 0 || bytes > protocolMaxBytes(proto)) continue;
      const double slowest = *std::min_element(set.rate[p].begin(), set.rate[p].end());
      const double lat = algo == SimAlgo::kTree ? treeLatencyUs(proto, hops, netLatency)
                                                : ringLatencyUs(proto, hops, netLatency);
      const double t = lat + share / (slowest * 1e3);
      if (chosen != nullptr && t >= r.timeUs) continue;
      chosen = &set;
      perChannelBytes = share;
      r.timeUs = t;
      r.latencyUs = lat;
      r.algorithm = algo;
      r.protocol = proto;
      r.channelGBs = slowest;
      r.hops = hops;
    }
  }
  if (chosen == nullptr) return invalidArgument("no allowed algorithm and protocol carries " + std::to_string(bytes) + " bytes");
  const ChannelSet& set = *chosen;
  r.channels = k;
  r.algBw = static_cast<double>(bytes) / r.timeUs / 1e3;
  r.busBw = r.algBw * ringBytesPerLink(coll, n);

  // Where the bytes go, and how busy each link is at the chosen protocol's rates.
  const std::vector<SimLink>& links = fabric_.links();
  const std::vector<double>& rate = set.rate[static_cast<int>(r.protocol)];
  std::vector<double> load(links.size(), 0.0), carried(links.size(), 0.0);
  for (size_t c = 0; c < set.flows.size(); ++c)
    for (const FlowUse& u : set.flows[c].uses) {
      load[u.link] += u.weight * rate[c];
      carried[u.link] += u.weight * perChannelBytes;
      r.bytesByClass[static_cast<int>(links[u.link].cls)] += u.weight * perChannelBytes;
    }
  if (options.busiest > 0) {
    std::vector<int> ids;
    for (size_t l = 0; l < links.size(); ++l)
      if (load[l] > 0 && links[l].cls != LinkClass::kLocal) ids.push_back(static_cast<int>(l));
    const size_t keep = std::min<size_t>(ids.size(), static_cast<size_t>(options.busiest));
    std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(),
                      [&](int a, int b) { return load[a] / links[a].gbs > load[b] / links[b].gbs; });
    for (size_t i = 0; i < keep; ++i) {
      const int l = ids[i];
      r.busiest.push_back({l, load[l] / links[l].gbs, carried[l]});
    }
  }
  return r;
}

}  // namespace plait::sim
