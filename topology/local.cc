// local.cc — the environment-driven entry points: this host's system
// (NCCL_TOPO_FILE, NCCL_TOPO_DUMP_FILE) and its graphs (NCCL_GRAPH_FILE,
// NCCL_GRAPH_DUMP_FILE).
#include <cstdlib>
#include <string>
#include <vector>

#include "base/config.h"
#include "base/log.h"
#include "topology/detect.h"
#include "topology/graph_xml.h"
#include "topology/topology.h"

namespace plait::topo {

PLAIT_PARAM_STRING(kTopoFile, "TOPO_FILE", "", "topology XML describing this host (completed by detection)");
PLAIT_PARAM_STRING(kTopoDumpFile, "TOPO_DUMP_FILE", "", "write the host's topology XML here");
PLAIT_PARAM_INT(kTopoDetect, "TOPO_DETECT", 1, "0: NCCL_TOPO_FILE replaces detection instead of being completed by it");
PLAIT_PARAM_STRING(kGraphFile, "GRAPH_FILE", "", "graph XML to use instead of searching");
PLAIT_PARAM_STRING(kGraphDumpFile, "GRAPH_DUMP_FILE", "", "write the searched graphs here");

bool localTopologyConfigured() { return !kTopoFile.get().empty() || !kTopoDumpFile.get().empty(); }

int numaNodeOfCpu(const TopoSystem& system, int cpu) {
  if (cpu < 0) return -1;
  for (int idx : system.of(NodeType::kCpu)) {
    const CpuInfo& info = system.nodes[idx].cpu;
    // NCCL's cpuset text: 32-bit hex words separated by commas, most significant first.
    std::vector<std::string> words;
    size_t start = 0;
    for (size_t comma; (comma = info.affinity.find(',', start)) != std::string::npos; start = comma + 1)
      words.push_back(info.affinity.substr(start, comma - start));
    words.push_back(info.affinity.substr(start));
    const size_t word = static_cast<size_t>(cpu) / 32;
    if (word >= words.size()) continue;
    const std::string& text = words[words.size() - 1 - word];
    char* end = nullptr;
    unsigned long bits = std::strtoul(text.c_str(), &end, 16);
    if (end != text.c_str() && ((bits >> (cpu % 32)) & 1) != 0) return info.numaId;
  }
  return -1;
}

Result<TopoSystem> loadLocalSystem() {
  XmlNode xml;
  const std::string& file = kTopoFile.get();
  if (!file.empty()) {
    PLAIT_ASSIGN_OR_RETURN(xml, readXmlFile(file));
    if (kTopoDetect.get() != 0) {
      PLAIT_ASSIGN_OR_RETURN(XmlNode detected, detectSystemXml());
      mergeSystemXml(xml, detected);
    }
    PLAIT_INFO(kInit, "Topology from NCCL_TOPO_FILE=%s%s", file.c_str(),
               kTopoDetect.get() != 0 ? " completed by detection" : "");
  } else {
    PLAIT_ASSIGN_OR_RETURN(xml, detectSystemXml());
  }
  if (!kTopoDumpFile.get().empty()) {
    PLAIT_RETURN_IF_ERROR(writeXmlFile(kTopoDumpFile.get(), xml));
    PLAIT_INFO(kInit, "Topology written to NCCL_TOPO_DUMP_FILE=%s", kTopoDumpFile.get().c_str());
  }
  Result<TopoSystem> system = buildSystem(xml);
  if (system) {
    PLAIT_INFO(kGraph, "Topology: %d CPU, %d GPU, %d NIC port(s)", system->count(NodeType::kCpu),
               system->count(NodeType::kGpu), system->count(NodeType::kNet));
  }
  return system;
}

namespace {

Result<NodeGraphs> graphsFromFile(const TopoSystem& system, const std::string& path, bool multiNode) {
  PLAIT_ASSIGN_OR_RETURN(XmlNode xml, readXmlFile(path));
  PLAIT_ASSIGN_OR_RETURN(std::vector<NodeGraph> graphs, graphsFromXml(system, xml));
  NodeGraphs out;
  bool haveRing = false, haveTree = false;
  for (NodeGraph& g : graphs) {
    if (g.id == 0) {
      out.ring = g;
      haveRing = true;
    } else if (g.id == 1) {
      out.tree = g;
      haveTree = true;
    }
  }
  if (!haveRing) return invalidArgument("NCCL_GRAPH_FILE " + path + " has no ring graph (id 0)");
  if (!haveTree) out.tree = treeGraphFromRing(out.ring);
  PLAIT_RETURN_IF_ERROR(validateGraph(system, out.ring, multiNode).withContext("NCCL_GRAPH_FILE " + path));
  PLAIT_RETURN_IF_ERROR(validateGraph(system, out.tree, multiNode).withContext("NCCL_GRAPH_FILE " + path));
  return out;
}

}  // namespace

Result<NodeGraphs> computeNodeGraphs(const TopoSystem& system, const PathTable& paths, bool multiNode) {
  NodeGraphs out;
  if (!kGraphFile.get().empty()) {
    PLAIT_ASSIGN_OR_RETURN(out, graphsFromFile(system, kGraphFile.get(), multiNode));
    PLAIT_INFO(kGraph, "Graphs read from NCCL_GRAPH_FILE=%s", kGraphFile.get().c_str());
  } else {
    SearchOptions opts = searchOptionsFromEnv();
    opts.useNet = multiNode;
    PLAIT_ASSIGN_OR_RETURN(out.ring, searchRingGraph(system, paths, opts));
    out.tree = treeGraphFromRing(out.ring);
  }
  if (!kGraphDumpFile.get().empty()) {
    PLAIT_RETURN_IF_ERROR(writeXmlFile(kGraphDumpFile.get(), graphsToXml(system, {out.ring, out.tree})));
  }
  return out;
}

}  // namespace plait::topo
