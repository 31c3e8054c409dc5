// collective.cc — see collective.h.
#include "sim/collective.h"

#include <algorithm>
#include <array>
#include <limits>

#include "core/tuner.h"

namespace plait::sim {

struct ClusterModel::ChannelFlows {
  std::vector<Flow> flows;  // ring: one per channel; tree: two per channel (both trees); no ceilings
  HopCounts hops;           // ring: one loop of channel 0; tree: up and down the deepest branch
  double switchesPerNetHop = 0;
};

const char* simAlgoName(SimAlgo a) {
  switch (a) {
    case SimAlgo::kRing: return "ring";
    case SimAlgo::kTree: return "tree";
    case SimAlgo::kNvls: return "nvls";
  }
  return "unknown";
}

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
  int64_t gpus = 0;
  for (int h = 0; h < cluster.hosts(); ++h) gpus += cluster.host(h).count(topo::NodeType::kGpu);
  if (gpus > kMaxGpus)
    return invalidArgument("plait-sim models up to " + std::to_string(kMaxGpus) + " GPUs; this cluster has " +
                           std::to_string(gpus));
  std::unique_ptr<ClusterModel> m(new ClusterModel());
  m->cluster_ = std::move(cluster);
  for (const topo::TopoSystem& sys : m->cluster_.systems) m->paths_.emplace_back(sys, topo::pathOptionsFromEnv(sys));
  PLAIT_ASSIGN_OR_RETURN(m->fabric_, Fabric::build(m->cluster_, m->paths_, network));
  std::vector<GpuRef> all;
  for (int h = 0; h < m->cluster_.hosts(); ++h)
    for (int g = 0; g < m->cluster_.host(h).count(topo::NodeType::kGpu); ++g) all.push_back({h, g});
  PLAIT_ASSIGN_OR_RETURN(m->world_, makeComm(m->cluster_, all));
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

// Ring channel c: one flow over every hop of the ring; the NICs are the ones
// the graph search gave the channel on each host.
void ClusterModel::ringFlows(const SimComm& comm, int k, ChannelFlows* out) const {
  out->flows.assign(k, Flow{});
  const int n = comm.nranks();
  std::vector<int> hostIndex(cluster_.hosts(), -1);  // cluster host -> the communicator's
  for (size_t h = 0; h < comm.hosts.size(); ++h) hostIndex[comm.hosts[h]] = static_cast<int>(h);
  std::vector<int> route;
  int netHops = 0, switches = 0;
  for (int c = 0; c < k; ++c) {
    const std::vector<int>& ring = comm.graphs.comm.rings[c];
    for (int i = 0; i < n; ++i) {
      const GpuRef a = comm.members[ring[i]], b = comm.members[ring[(i + 1) % n]];
      route.clear();
      int crossed = 0;
      const HopClass cls = routeHop(a, b, comm.netOut(hostIndex[a.host], c), comm.netIn(hostIndex[b.host], c), &route,
                                    &crossed);
      for (int l : route) out->flows[c].uses.push_back({l, 1.0});
      if (c != 0) continue;
      addHop(&out->hops, cls, 1);
      if (cls == HopClass::kNet) {
        ++netHops;
        switches += crossed;
      }
    }
    mergeUses(&out->flows[c].uses);
  }
  out->switchesPerNetHop = netHops > 0 ? static_cast<double>(switches) / netHops : 0;
}

// Trees as NCCL runs them: per graph channel c, both trees of the double
// binary tree over hosts (topology/topology.h), each carrying half of the
// channel's share, so that every NIC serves a host that is interior in one
// tree and a leaf in the other. Inside a host a tree is a chain in channel
// c's GPU order, headed by the GPU next to the NIC the channel enters by;
// hosts talk through that NIC. Every edge is crossed once up (the
// reduction) and once down (the broadcast).
void ClusterModel::treeFlows(const SimComm& comm, int k, ChannelFlows* out) const {
  const int hosts = static_cast<int>(comm.hosts.size());
  out->flows.assign(2 * k, Flow{});
  std::vector<int> route;
  int crossed = 0, netEdges = 0, netSwitches = 0;
  const std::array<std::vector<int>, 2> parents{topo::doubleBinaryTreeParents(hosts, false),
                                                topo::doubleBinaryTreeParents(hosts, true)};
  std::vector<int> hostIndex(cluster_.hosts(), -1);
  for (int h = 0; h < hosts; ++h) hostIndex[comm.hosts[h]] = h;
  std::vector<std::vector<int>> chain0;
  for (int c = 0; c < k; ++c) {
    // Sub host h's chain: its ranks in ring c's order (rings list hosts whole).
    std::vector<std::vector<int>> chain(hosts);
    for (int r : comm.graphs.comm.rings[c]) chain[hostIndex[comm.members[r].host]].push_back(r);
    if (c == 0) chain0 = chain;
    route.clear();
    for (int h = 0; h < hosts; ++h)
      for (size_t i = 1; i < chain[h].size(); ++i) {
        routeHop(comm.members[chain[h][i]], comm.members[chain[h][i - 1]], 0, 0, &route, &crossed);
        routeHop(comm.members[chain[h][i - 1]], comm.members[chain[h][i]], 0, 0, &route, &crossed);
      }
    const size_t intra = route.size();
    for (int t = 0; t < 2; ++t) {
      route.resize(intra);
      for (int h = 0; h < hosts; ++h) {
        const int p = parents[t][h];
        if (p < 0) continue;
        const GpuRef a = comm.members[chain[h].front()], b = comm.members[chain[p].front()];
        int switches = 0;
        routeHop(a, b, comm.netIn(h, c), comm.netIn(p, c), &route, &switches);
        routeHop(b, a, comm.netIn(p, c), comm.netIn(h, c), &route, &crossed);
        if (c == 0 && t == 0) {
          netEdges += 1;
          netSwitches += switches;
        }
      }
      Flow& f = out->flows[2 * c + t];
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
  const std::vector<int>& longest =
      *std::max_element(chain0.begin(), chain0.end(), [](const auto& a, const auto& b) { return a.size() < b.size(); });
  for (size_t i = 1; i < longest.size(); ++i) {
    route.clear();
    addHop(&out->hops, routeHop(comm.members[longest[i]], comm.members[longest[i - 1]], 0, 0, &route, &crossed), 2);
  }
  out->hops.net = 2.0 * hostDepth;
  out->switchesPerNetHop = netEdges > 0 ? static_cast<double>(netSwitches) / netEdges : 0;
}

std::pair<int, int> ClusterModel::switchLinks(GpuRef g) const {
  const topo::TopoSystem& sys = cluster_.host(g.host);
  const int gpu = sys.of(topo::NodeType::kGpu)[g.ordinal];
  for (int l : sys.nodes[gpu].links) {
    const topo::TopoLink& link = sys.links[l];
    if (link.type != topo::LinkType::kNvl || sys.nodes[link.to].type != topo::NodeType::kNvs) continue;
    const int back = sys.findLink(link.to, gpu);
    if (back >= 0) return {l, back};
  }
  return {-1, -1};
}

double ClusterModel::nvlsEfficiencyOn(const SimComm& comm) const {
  if (comm.hosts.size() != 1 || comm.nranks() < 2) return 0;
  double efficiency = 1;
  for (const GpuRef& g : comm.members) {
    if (switchLinks(g).first < 0) return 0;
    efficiency = std::min(efficiency, nvlsEfficiency(cluster_.host(g.host).gpu(g.ordinal).gpu.sm));
  }
  return efficiency;
}

// NVLS: per channel, every GPU's link up to its NVSwitch and the one down,
// a flow each (the reduced loads come down while the contributions go up,
// and the multicast stores likewise, so both directions stream at once).
void ClusterModel::nvlsFlows(const SimComm& comm, int k, ChannelFlows* out) const {
  out->flows.clear();
  for (int c = 0; c < k; ++c)
    for (const GpuRef& g : comm.members) {
      const auto [up, down] = switchLinks(g);
      out->flows.push_back(Flow{{{fabric_.hostLink(g.host, up), 1.0}}, 0});
      out->flows.push_back(Flow{{{fabric_.hostLink(g.host, down), 1.0}}, 0});
    }
  out->hops = HopCounts{1, 0, 0};
}

ClusterModel::ChannelFlows ClusterModel::flowsFor(const SimComm& comm, SimAlgo algo, int k) const {
  ChannelFlows out;
  switch (algo) {
    case SimAlgo::kTree: treeFlows(comm, k, &out); break;
    case SimAlgo::kNvls: nvlsFlows(comm, k, &out); break;
    case SimAlgo::kRing: ringFlows(comm, k, &out); break;
  }
  return out;
}

std::vector<double> ClusterModel::capacities(Protocol p, double nvls) const {
  const std::vector<SimLink>& links = fabric_.links();
  std::vector<double> capacity(links.size());
  for (size_t l = 0; l < links.size(); ++l)
    capacity[l] = links[l].gbs * (nvls > 0 ? nvls : protocolEfficiency(p, hopClassOf(links[l].cls)));
  return capacity;
}

Result<CollectiveResult> ClusterModel::simulate(CollType coll, uint64_t bytes, const SimOptions& options) const {
  return run({&world_}, coll, bytes, options, true);
}

Result<CollectiveResult> ClusterModel::simulateConcurrent(const std::vector<SimComm>& comms, CollType coll,
                                                          uint64_t bytes, const SimOptions& options) const {
  std::vector<const SimComm*> ptrs;
  for (const SimComm& c : comms) ptrs.push_back(&c);
  return run(ptrs, coll, bytes, options, false);
}

namespace {

Status checkRun(const std::vector<const SimComm*>& comms, CollType coll, const SimOptions& options) {
  if (!isRing(coll))
    return invalidArgument(std::string("plait-sim models AllReduce, AllGather, ReduceScatter, Broadcast and Reduce "
                                       "as collectives (point-to-point and all-to-all as transfers), not ") +
                           collName(coll));
  if ((options.protocols & 0x7) == 0) return invalidArgument("no protocol allowed");
  if ((options.algorithms & 0x7) == 0) return invalidArgument("no algorithm allowed");
  if (comms.empty()) return invalidArgument("no communicator to simulate on");
  for (const SimComm* c : comms)
    if (c->nranks() != comms[0]->nranks()) return invalidArgument("concurrent communicators must have the same size");
  return Status::ok();
}

}  // namespace

Result<CollectiveResult> ClusterModel::run(const std::vector<const SimComm*>& comms, CollType coll, uint64_t bytes,
                                           const SimOptions& options, bool cacheable) const {
  PLAIT_RETURN_IF_ERROR(checkRun(comms, coll, options));
  CollectiveResult r;
  const int n = comms[0]->nranks();
  if (n == 1 || bytes == 0) {
    r.latencyUs = r.timeUs = ringLatencyUs(Protocol::kSimple, HopCounts{});
    return r;
  }
  // The channel count the CUDA executor would use (core/tuner.h).
  int maxChannels = std::numeric_limits<int>::max();
  for (const SimComm* c : comms) maxChannels = std::min(maxChannels, static_cast<int>(c->graphs.comm.rings.size()));
  TunerInputs ti;
  ti.nranks = n;
  ti.nHosts = static_cast<int>(comms[0]->hosts.size());
  ti.nChannels = maxChannels;
  const Tuner tuner(ti);
  Task task;
  task.coll = coll;
  const int k = tuner.devicePlan(task, bytes, maxChannels).nChannels;
  const int steps = ringSteps(coll, n);

  // NVLS where every communicator can run it (AllReduce only, as NCCL's
  // default: its AllGather and ReduceScatter need CollNet between hosts).
  double nvls = coll == CollType::kAllReduce ? 1 : 0;
  for (const SimComm* c : comms) nvls = std::min(nvls, nvlsEfficiencyOn(*c));

  FlowSet bestFlows;
  std::vector<double> bestRate;
  double bestShare = 0;
  bool found = false;
  for (int a = 0; a < kSimAlgoCount; ++a) {
    const SimAlgo algo = static_cast<SimAlgo>(a);
    if ((options.algorithms & (1u << a)) == 0 || (algo == SimAlgo::kTree && coll != CollType::kAllReduce) ||
        (algo == SimAlgo::kNvls && nvls <= 0))
      continue;
    const FlowSet flows = flowSet(comms, algo, k, cacheable);
    const ChannelFlows& first = *flows[0];
    HopCounts hops = first.hops;
    // A ring link carries the channel's share times the collective's ring
    // factor; a tree flow carries half a channel's share, once each way; an
    // NVLS flow (1 + 1/heads) times the channel's share (the heads' links
    // are the loaded ones).
    double share = static_cast<double>(bytes) / k / 2;
    if (algo == SimAlgo::kNvls) share = static_cast<double>(bytes) / k * (1.0 + 1.0 / nvlsHeads(n));
    if (algo == SimAlgo::kRing) {
      hops.nvlink = first.hops.nvlink * steps / n;
      hops.pcie = first.hops.pcie * steps / n;
      hops.net = first.hops.net * steps / n;
      share = static_cast<double>(bytes) / k * ringBytesPerLink(coll, n);
    }
    const double netLatency = first.switchesPerNetHop * fabric_.spec().switchLatencyUs;
    for (int p = 0; p < kProtocolCount; ++p) {
      const Protocol proto = static_cast<Protocol>(p);
      if ((options.protocols & (1u << p)) == 0 || bytes > protocolMaxBytes(proto)) continue;
      if (algo == SimAlgo::kNvls && proto != Protocol::kSimple) continue;  // NCCL's NVLS is Simple only
      const double efficiency = algo == SimAlgo::kNvls ? nvls : 0;
      std::vector<double>* cached = cacheable ? &worldRates_[{a, k, p}] : nullptr;
      if (cached != nullptr && cached->empty()) *cached = channelRates(comms, flows, algo, proto, efficiency);
      std::vector<double> rate = cached != nullptr ? *cached : channelRates(comms, flows, algo, proto, efficiency);
      const double slowest = *std::min_element(rate.begin(), rate.end());
      const double lat = algo == SimAlgo::kNvls   ? nvlsLatencyUs()
                         : algo == SimAlgo::kTree ? treeLatencyUs(proto, hops, netLatency)
                                                  : ringLatencyUs(proto, hops, netLatency);
      const double t = lat + share / (slowest * 1e3);
      if (found && t >= r.timeUs) continue;
      found = true;
      bestFlows = flows;
      bestRate = std::move(rate);
      bestShare = share;
      r.timeUs = t;
      r.latencyUs = lat;
      r.algorithm = algo;
      r.protocol = proto;
      r.channelGBs = slowest;
      r.hops = hops;
    }
  }
  if (!found) return invalidArgument("no allowed algorithm and protocol carries " + std::to_string(bytes) + " bytes");
  r.channels = k;
  r.plan = std::string(simAlgoName(r.algorithm)) + " " + protocolName(r.protocol) + " " + std::to_string(k) + "ch";
  r.algBw = static_cast<double>(bytes) / r.timeUs / 1e3;
  r.busBw = r.algBw * ringBytesPerLink(coll, n);
  fillLinkLoads(bestFlows, bestRate, bestShare, &r);
  return r;
}

ClusterModel::FlowSet ClusterModel::flowSet(const std::vector<const SimComm*>& comms, SimAlgo algo, int k,
                                            bool cacheable) const {
  FlowSet flows;
  for (const SimComm* c : comms) {
    std::shared_ptr<const ChannelFlows>* slot = cacheable ? &worldFlows_[{static_cast<int>(algo), k}] : nullptr;
    if (slot != nullptr && *slot) {
      flows.push_back(*slot);
      continue;
    }
    auto made = std::make_shared<const ChannelFlows>(flowsFor(*c, algo, k));
    if (slot != nullptr) *slot = made;
    flows.push_back(std::move(made));
  }
  return flows;
}

std::vector<double> ClusterModel::channelRates(const std::vector<const SimComm*>& comms, const FlowSet& flows,
                                               SimAlgo algo, Protocol proto, double nvls) const {
  // The graph search gave each channel treeBw on its links; the channel's two
  // trees share it, and each tree splits its threads between the reduction
  // going up and the broadcast coming down: a quarter each (NCCL's tree
  // model: algorithm bandwidth half the graph's total).
  const double ceiling = protocolChannelCeilingGBs(proto);
  std::vector<Flow> all;
  for (size_t i = 0; i < comms.size(); ++i) {
    double own = ceiling;
    if (algo == SimAlgo::kTree && comms[i]->graphs.comm.treeBw > 0) {
      const double quarter = 0.25 * comms[i]->graphs.comm.treeBw;
      own = own > 0 ? std::min(own, quarter) : quarter;
    }
    for (Flow f : flows[i]->flows) {
      f.ceilingGBs = own;
      all.push_back(std::move(f));
    }
  }
  return maxMinRates(capacities(proto, nvls), all);
}

void ClusterModel::fillLinkLoads(const FlowSet& flows, const std::vector<double>& rate, double share,
                                 CollectiveResult* r) const {
  const std::vector<SimLink>& links = fabric_.links();
  r->linkBytes.assign(links.size(), 0.0);
  r->linkBusy.assign(links.size(), 0.0);
  size_t f = 0;
  for (const auto& comm : flows)
    for (const Flow& flow : comm->flows) {
      for (const FlowUse& u : flow.uses) {
        r->linkBusy[u.link] += u.weight * rate[f];
        r->linkBytes[u.link] += u.weight * share;
      }
      ++f;
    }
  for (size_t l = 0; l < links.size(); ++l) r->linkBusy[l] /= links[l].gbs;
}

CollectiveResult ClusterModel::simulateTransfers(const std::vector<Transfer>& transfers) const {
  CollectiveResult r;
  r.protocol = Protocol::kSimple;
  const std::vector<SimLink>& links = fabric_.links();
  r.linkBytes.assign(links.size(), 0.0);
  r.linkBusy.assign(links.size(), 0.0);
  if (transfers.empty()) return r;
  std::vector<TimedFlow> flows;
  std::vector<int> route;
  HopCounts worst;
  double worstSwitches = 0;
  for (const Transfer& t : transfers) {
    route.clear();
    int switches = 0;
    GpuRef from = t.from;
    if (fabric_.spec().pxn && t.from.host != t.to.host && t.to.ordinal < cluster_.host(t.from.host).count(topo::NodeType::kGpu) &&
        fabric_.nvlinkPeers(t.from.host, t.from.ordinal, t.to.ordinal)) {
      const GpuRef peer{t.from.host, t.to.ordinal};  // PXN: the NVLink peer on the receiver's rail sends
      routeHop(t.from, peer, 0, 0, &route, &switches);
      from = peer;
    }
    const HopClass cls = routeHop(from, t.to, fabric_.nearestNet(from), fabric_.nearestNet(t.to), &route, &switches);
    TimedFlow tf;
    for (int l : route) tf.flow.uses.push_back({l, 1.0});
    mergeUses(&tf.flow.uses);
    tf.bytes = t.bytes;
    for (const FlowUse& u : tf.flow.uses) r.linkBytes[u.link] += u.weight * t.bytes;
    flows.push_back(std::move(tf));
    if (cls == HopClass::kNet) {
      worst = HopCounts{0, 0, 1};
      worstSwitches = std::max<double>(worstSwitches, switches);
    } else if (worst.net == 0 && cls == HopClass::kPcie) {
      worst = HopCounts{0, 1, 0};
    } else if (worst.net == 0 && worst.pcie == 0) {
      worst = HopCounts{1, 0, 0};
    }
  }
  const std::vector<double> capacity = capacities(Protocol::kSimple);
  const std::vector<double> finish = simulateFlows(capacity, flows);
  const double last = *std::max_element(finish.begin(), finish.end());
  r.latencyUs = ringLatencyUs(Protocol::kSimple, worst, worstSwitches * fabric_.spec().switchLatencyUs);
  r.timeUs = r.latencyUs + last;
  r.hops = worst;
  r.channels = 1;
  r.plan = "transfers";
  for (size_t l = 0; l < links.size(); ++l) r.linkBusy[l] = last > 0 ? r.linkBytes[l] / (last * 1e3) / links[l].gbs : 0;
  double total = 0;
  for (const Transfer& t : transfers) total += t.bytes;
  r.algBw = total / r.timeUs / 1e3;
  r.busBw = r.algBw;
  return r;
}

Result<CollectiveResult> ClusterModel::simulateAlltoAll(uint64_t bytes) const {
  const int n = nranks();
  if (n > kMaxAlltoAllRanks)
    return invalidArgument("AlltoAll is simulated pair by pair, up to " + std::to_string(kMaxAlltoAllRanks) +
                           " GPUs; this cluster has " + std::to_string(n));
  std::vector<Transfer> transfers;
  transfers.reserve(static_cast<size_t>(n) * (n - 1));
  for (int a = 0; a < n; ++a)
    for (int b = 0; b < n; ++b)
      if (a != b) transfers.push_back({world_.members[a], world_.members[b], static_cast<double>(bytes) / n});
  CollectiveResult r = simulateTransfers(transfers);
  if (n == 1 || bytes == 0) {
    r.latencyUs = r.timeUs = ringLatencyUs(Protocol::kSimple, HopCounts{});
    return r;
  }
  r.algBw = static_cast<double>(bytes) / r.timeUs / 1e3;
  r.busBw = r.algBw * ringBytesPerLink(CollType::kAlltoAll, n);
  r.plan = fabric_.spec().pxn ? "pairs PXN" : "pairs";
  return r;
}

std::vector<LinkLoad> ClusterModel::busiest(const CollectiveResult& r, int count) const {
  const std::vector<SimLink>& links = fabric_.links();
  std::vector<int> ids;
  for (size_t l = 0; l < r.linkBusy.size(); ++l)
    if (r.linkBytes[l] > 0 && links[l].cls != LinkClass::kLocal) ids.push_back(static_cast<int>(l));
  const size_t keep = std::min<size_t>(ids.size(), static_cast<size_t>(std::max(count, 0)));
  std::partial_sort(ids.begin(), ids.begin() + keep, ids.end(), [&](int a, int b) {
    return r.linkBusy[a] != r.linkBusy[b] ? r.linkBusy[a] > r.linkBusy[b] : r.linkBytes[a] > r.linkBytes[b];
  });
  std::vector<LinkLoad> out;
  for (size_t i = 0; i < keep; ++i) out.push_back({ids[i], r.linkBusy[ids[i]], r.linkBytes[ids[i]]});
  return out;
}

}  // namespace plait::sim
