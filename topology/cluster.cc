// cluster.cc — several hosts: loading, per-system search, global assembly.
#include "topology/cluster.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <set>

#include "base/log.h"

namespace plait::topo {

Cluster replicateSystem(TopoSystem system, int hosts) {
  Cluster c;
  c.systems.push_back(std::move(system));
  c.hostSystem.assign(std::max(hosts, 1), 0);
  return c;
}

namespace {

// Removes the <pci> elements that hold a GPU whose dev is not kept, and the
// <nvlink> elements that target one of them (by bus id).
void dropGpus(XmlNode* node, const std::set<int64_t>& keptDevs, const std::set<std::string>& droppedBusIds) {
  std::vector<XmlNode> kept;
  for (XmlNode& c : node->children) {
    if (c.name == "pci") {
      const XmlNode* gpu = c.child("gpu");
      if (gpu != nullptr && keptDevs.count(gpu->intAttr("dev", -1)) == 0) continue;
    }
    if (c.name == "nvlink") {
      std::string target = c.attrOr("target", "");
      std::transform(target.begin(), target.end(), target.begin(), [](unsigned char ch) { return std::tolower(ch); });
      if (droppedBusIds.count(target) > 0) continue;
    }
    dropGpus(&c, keptDevs, droppedBusIds);
    kept.push_back(std::move(c));
  }
  node->children = std::move(kept);
}

}  // namespace

Result<TopoSystem> keepGpus(const TopoSystem& system, const std::vector<int>& ordinals) {
  std::set<int64_t> keptDevs;
  std::vector<char> seen(system.count(NodeType::kGpu), 0);
  for (int o : ordinals) {
    if (o < 0 || o >= system.count(NodeType::kGpu) || seen[o]++)
      return invalidArgument("keepGpus: GPU ordinal " + std::to_string(o) + " is out of range or repeated");
    keptDevs.insert(system.gpu(o).gpu.dev);
  }
  if (keptDevs.size() == seen.size()) return system;
  std::set<std::string> droppedBusIds;
  for (int g = 0; g < system.count(NodeType::kGpu); ++g)
    if (!seen[g]) droppedBusIds.insert(system.gpu(g).busId);
  XmlNode xml = system.xml;
  dropGpus(&xml, keptDevs, droppedBusIds);
  return buildSystem(xml);
}

Result<Cluster> loadCluster(const std::string& path, int hosts) {
  PLAIT_ASSIGN_OR_RETURN(XmlNode root, readXmlFile(path));
  if (root.name == "system") {
    if (hosts < 0 || hosts > kMaxClusterHosts)
      return invalidArgument("cluster of " + std::to_string(hosts) + " hosts (at most " +
                             std::to_string(kMaxClusterHosts) + ")");
    PLAIT_ASSIGN_OR_RETURN(TopoSystem sys, buildSystem(root));
    return replicateSystem(std::move(sys), std::max(hosts, 1));
  }
  if (root.name != "cluster") return invalidArgument(path + ": root is <" + root.name + ">, expected <system> or <cluster>");
  Cluster c;
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  for (const XmlNode& node : root.children) {
    if (node.name != "node") continue;
    const std::string* file = node.attr("file");
    if (!file) return invalidArgument(path + ": <node> without file");
    PLAIT_ASSIGN_OR_RETURN(XmlNode xml, readXmlFile((dir / *file).string()));
    PLAIT_ASSIGN_OR_RETURN(TopoSystem sys, buildSystem(xml));
    c.systems.push_back(std::move(sys));
    PLAIT_ASSIGN_OR_RETURN(int64_t count, node.intAttrIn("count", 1, 1, kMaxClusterHosts));
    if (count > kMaxClusterHosts - static_cast<int64_t>(c.hostSystem.size()))
      return invalidArgument(path + ": more than " + std::to_string(kMaxClusterHosts) + " hosts in all");
    c.hostSystem.insert(c.hostSystem.end(), static_cast<size_t>(count), static_cast<int>(c.systems.size()) - 1);
  }
  if (c.hostSystem.empty()) return invalidArgument(path + ": no <node> elements");
  if (hosts > 0 && hosts != c.hosts()) {
    return invalidArgument(path + " describes " + std::to_string(c.hosts()) + " hosts, not " + std::to_string(hosts));
  }
  return c;
}

Result<CommGraphs> assembleGpuGraphs(const std::vector<NodeGraph>& hostGraphs,
                                     const std::vector<std::vector<int>>& hostRanks) {
  if (hostGraphs.empty() || hostGraphs.size() != hostRanks.size()) {
    return invalidArgument("assembleGpuGraphs: need one graph and one rank list per host");
  }
  size_t nChannels = SIZE_MAX;
  double bw = 1e30;
  for (const NodeGraph& g : hostGraphs) {
    nChannels = std::min(nChannels, g.channels.size());
    bw = std::min(bw, g.speedIntra);
  }
  if (nChannels == 0) return invalidArgument("assembleGpuGraphs: a host has no channel");
  std::vector<std::vector<std::vector<int>>> orders(nChannels);
  for (size_t c = 0; c < nChannels; ++c) {
    for (size_t h = 0; h < hostGraphs.size(); ++h) {
      std::vector<int> host;
      for (int g : hostGraphs[h].channels[c].gpus) {
        if (g < 0 || g >= static_cast<int>(hostRanks[h].size())) {
          return invalidArgument("assembleGpuGraphs: host " + std::to_string(h) + " has no rank for GPU " + std::to_string(g));
        }
        host.push_back(hostRanks[h][g]);
      }
      orders[c].push_back(std::move(host));
    }
  }
  PLAIT_ASSIGN_OR_RETURN(CommGraphs graphs, assembleGraphs(orders));
  graphs.ringBw = graphs.treeBw = bw;
  if (log::enabled(log::Level::kInfo, log::kInit)) {
    std::string text = graphs.describe();
    size_t pos = 0;
    for (size_t nl; (nl = text.find('\n', pos)) != std::string::npos; pos = nl + 1) {
      PLAIT_INFO(kInit, "%s", text.substr(pos, nl - pos).c_str());
    }
  }
  return graphs;
}

Result<ClusterGraphs> computeClusterGraphs(const Cluster& cluster) {
  ClusterGraphs out;
  const bool multiNode = cluster.hosts() > 1;
  for (const TopoSystem& sys : cluster.systems) {
    if (sys.count(NodeType::kGpu) == 0) return invalidUsage("a host has no GPU: use buildHostGraphs for host ranks");
    out.paths.emplace_back(sys, pathOptionsFromEnv(sys));
    PLAIT_ASSIGN_OR_RETURN(NodeGraphs graphs, computeNodeGraphs(sys, out.paths.back(), multiNode));
    if (graphs.ring.channels.empty()) return internalError("graph search found no channel");
    out.perSystem.push_back(std::move(graphs));
  }
  // Ranks host by host, GPU ordinal order inside; chains follow the tree graph.
  std::vector<NodeGraph> hostGraphs;
  std::vector<std::vector<int>> hostRanks;
  int next = 0;
  for (int h = 0; h < cluster.hosts(); ++h) {
    hostGraphs.push_back(out.perSystem[cluster.hostSystem[h]].tree);
    std::vector<int> ranks(cluster.host(h).count(NodeType::kGpu));
    for (int& r : ranks) r = next++;
    hostRanks.push_back(std::move(ranks));
  }
  PLAIT_ASSIGN_OR_RETURN(out.comm, assembleGpuGraphs(hostGraphs, hostRanks));
  return out;
}

std::vector<RankPlacement> hostPlacements(const Cluster& cluster, int ranksPerHost) {
  std::vector<RankPlacement> out;
  for (int h = 0; h < cluster.hosts(); ++h) {
    const TopoSystem& sys = cluster.host(h);
    const std::vector<int>& cpus = sys.of(NodeType::kCpu);
    for (int r = 0; r < ranksPerHost; ++r) {
      RankPlacement p;
      p.rank = h * ranksPerHost + r;
      p.hostHash = 0x9e3779b97f4a7c15ULL * static_cast<uint64_t>(h + 1);
      p.numaNode = cpus.empty() ? 0 : sys.nodes[cpus[r % cpus.size()]].cpu.numaId;
      p.cpu = r;
      out.push_back(p);
    }
  }
  return out;
}

}  // namespace plait::topo
