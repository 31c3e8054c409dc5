// comm.cc — see comm.h.
#include "sim/comm.h"

#include <algorithm>
#include <map>

namespace plait::sim {

int SimComm::netIn(int h, int c) const {
  if (sub.hosts() < 2) return 0;
  return graphs.perSystem[sub.hostSystem[h]].ring.channels[c].netIn;
}

int SimComm::netOut(int h, int c) const {
  if (sub.hosts() < 2) return 0;
  return graphs.perSystem[sub.hostSystem[h]].ring.channels[c].netOut;
}

Result<SimComm> makeComm(const topo::Cluster& cluster, const std::vector<GpuRef>& gpus) {
  if (gpus.empty()) return invalidArgument("a communicator needs at least one GPU");
  std::map<int, std::vector<int>> byHost;  // cluster host -> ordinals
  for (const GpuRef& g : gpus) {
    if (g.host < 0 || g.host >= cluster.hosts() || g.ordinal < 0 ||
        g.ordinal >= cluster.host(g.host).count(topo::NodeType::kGpu))
      return invalidArgument("communicator names GPU " + std::to_string(g.ordinal) + " of host " +
                             std::to_string(g.host) + ", which the cluster does not have");
    byHost[g.host].push_back(g.ordinal);
  }
  SimComm comm;
  // Hosts with the same system and the same GPUs share one trimmed system
  // (and so one graph search).
  std::map<std::pair<int, std::vector<int>>, int> trimmed;
  for (auto& [host, ordinals] : byHost) {
    std::sort(ordinals.begin(), ordinals.end());
    if (std::adjacent_find(ordinals.begin(), ordinals.end()) != ordinals.end())
      return invalidArgument("communicator names a GPU of host " + std::to_string(host) + " twice");
    const auto key = std::make_pair(cluster.hostSystem[host], ordinals);
    auto it = trimmed.find(key);
    if (it == trimmed.end()) {
      PLAIT_ASSIGN_OR_RETURN(topo::TopoSystem sys, topo::keepGpus(cluster.host(host), ordinals));
      comm.sub.systems.push_back(std::move(sys));
      it = trimmed.emplace(key, static_cast<int>(comm.sub.systems.size()) - 1).first;
    }
    comm.sub.hostSystem.push_back(it->second);
    comm.hosts.push_back(host);
    // Graph ranks: the trimmed system's GPU ordinals, mapped back by device.
    const topo::TopoSystem& sys = comm.sub.systems[it->second];
    const topo::TopoSystem& full = cluster.host(host);
    for (int t = 0; t < sys.count(topo::NodeType::kGpu); ++t) {
      int ordinal = -1;
      for (int o : ordinals)
        if (full.gpu(o).gpu.dev == sys.gpu(t).gpu.dev) ordinal = o;
      if (ordinal < 0) return internalError("trimmed GPU without a counterpart");
      comm.members.push_back({host, ordinal});
    }
  }
  PLAIT_ASSIGN_OR_RETURN(comm.graphs, topo::computeClusterGraphs(comm.sub));
  return comm;
}

}  // namespace plait::sim
