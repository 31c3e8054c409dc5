// Graph search on described machines: the properties a reviewer checks.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include <catch2/catch.hpp>

#include "machines.h"
#include "topology/graph_xml.h"
#include "topology/search.h"
#include "topology/topology.h"

using namespace plait::topo;
using namespace plait::topo::test;

namespace {

struct Searched {
  TopoSystem sys;
  PathTable paths;
  NodeGraph ring;
};

Searched search(const std::string& machine, bool multiNode) {
  Searched s{loadMachine(machine), {}, {}};
  s.paths = PathTable(s.sys, pathOptionsFromEnv(s.sys));
  SearchOptions opts;
  opts.useNet = multiNode;
  auto ring = searchRingGraph(s.sys, s.paths, opts);
  INFO(ring.status().toString());
  REQUIRE(ring.isOk());
  s.ring = std::move(ring).value();
  INFO(s.ring.describe());
  REQUIRE(validateGraph(s.sys, s.ring, multiNode).isOk());
  return s;
}

// Every path a channel takes, in order.
std::vector<const TopoPath*> channelPaths(const Searched& s, const GraphChannel& ch) {
  std::vector<const TopoPath*> out;
  const auto& gpus = s.sys.of(NodeType::kGpu);
  const auto& nets = s.sys.of(NodeType::kNet);
  if (ch.netIn >= 0) out.push_back(&s.paths.get(nets[ch.netIn], gpus[ch.gpus.front()]));
  for (size_t i = 0; i + 1 < ch.gpus.size(); ++i) out.push_back(&s.paths.gpuToGpu(ch.gpus[i], ch.gpus[i + 1]));
  if (ch.netOut >= 0) out.push_back(&s.paths.get(gpus[ch.gpus.back()], nets[ch.netOut]));
  if (ch.netIn < 0 && ch.gpus.size() > 1) out.push_back(&s.paths.gpuToGpu(ch.gpus.back(), ch.gpus.front()));
  return out;
}

// Bandwidth each link carries with every channel at the graph's speed
// (paths through Intel CPUs cost 1.2x, as the search counts them).
std::vector<double> linkLoad(const Searched& s) {
  std::vector<double> load(s.sys.links.size(), 0);
  for (const GraphChannel& ch : s.ring.channels) {
    for (const TopoPath* p : channelPaths(s, ch)) {
      bool intel = false;
      for (int id : p->links) {
        const TopoNode& n = s.sys.nodes[s.sys.links[id].to];
        intel |= p->type >= PathType::kPhb && n.type == NodeType::kCpu && n.cpu.isIntel();
      }
      const double cost = s.ring.speedIntra * (intel ? kIntelP2pOverhead : 1.0);
      for (int id : p->links) load[id] += cost;
    }
  }
  return load;
}

void requireWithinBudget(const Searched& s) {
  std::vector<double> load = linkLoad(s);
  for (size_t i = 0; i < load.size(); ++i) {
    CAPTURE(i, describePath(s.sys, TopoPath{PathType::kLoc, 0, {static_cast<int>(i)}}));
    CHECK(load[i] <= s.sys.links[i].bw + 1e-6);
  }
}

}  // namespace

TEST_CASE("DGX-1 cube mesh: six NVLink-only rings on disjoint NVLinks", "[topology][search]") {
  Searched s = search("dgx1_v100.xml", false);
  CHECK(s.ring.typeIntra == PathType::kNvl);
  CHECK(s.ring.channels.size() == 6);
  CHECK(s.ring.speedIntra == Approx(20));  // one NVLink 2 lane per ring and GPU
  for (const GraphChannel& ch : s.ring.channels) {
    for (const TopoPath* p : channelPaths(s, ch)) {
      CHECK(p->type == PathType::kNvl);
      CHECK(p->links.size() == 1);  // direct NVLink, no NVB detour
    }
  }
  requireWithinBudget(s);
  // Every lane is used exactly once: 6 x 20 GB/s = each GPU's 6 NVLinks.
  std::vector<double> load = linkLoad(s);
  for (size_t i = 0; i < load.size(); ++i) {
    if (s.sys.links[i].type == LinkType::kNvl) CHECK(load[i] == Approx(s.sys.links[i].bw));
  }
}

TEST_CASE("NVSwitch machines: ring count and speed match the NVLink budget", "[topology][search]") {
  struct Case {
    const char* machine;
    double perGpuNvl;
  };
  for (Case c : {Case{"dgx_a100.xml", 12 * 20.0}, Case{"hgx_h100.xml", 18 * 20.6}}) {
    CAPTURE(c.machine);
    Searched s = search(c.machine, false);
    CHECK(s.ring.typeIntra == PathType::kNvl);
    for (const GraphChannel& ch : s.ring.channels) {
      for (const TopoPath* p : channelPaths(s, ch)) CHECK(p->type == PathType::kNvl);
    }
    const double total = s.ring.totalBw();
    CHECK(total <= c.perGpuNvl + 1e-6);
    // No speed tried could have fitted one more channel.
    CHECK((s.ring.channels.size() + 1) * s.ring.speedIntra > c.perGpuNvl);
    CHECK(total >= 0.95 * c.perGpuNvl);
    requireWithinBudget(s);
  }
}

TEST_CASE("PCIe box: rings cross the socket link only twice", "[topology][search]") {
  Searched s = search("pcie_4gpu_2socket.xml", false);
  CHECK(s.ring.typeIntra == PathType::kSys);
  REQUIRE_FALSE(s.ring.channels.empty());
  for (const GraphChannel& ch : s.ring.channels) {
    int crossings = 0;
    for (const TopoPath* p : channelPaths(s, ch)) crossings += p->type == PathType::kSys;
    CHECK(crossings == 2);  // once each way: the minimum for a ring spanning both sockets
  }
  requireWithinBudget(s);
  // The socket link (10 GB/s, 1.2x for Intel peer traffic) is the budget.
  CHECK(s.ring.totalBw() * kIntelP2pOverhead <= kBwSklQpi + 1e-6);
}

TEST_CASE("multi-node: channels spread over NICs and start next to them", "[topology][search][net]") {
  struct Case {
    const char* machine;
    size_t channels;
  };
  for (Case c : {Case{"dgx_a100.xml", 8}, Case{"hgx_h100.xml", 8}, Case{"dgx1_v100.xml", 4}}) {
    CAPTURE(c.machine);
    Searched s = search(c.machine, true);
    CHECK(s.ring.channels.size() == c.channels);
    const int nNets = s.sys.count(NodeType::kNet);
    std::map<int, int> in, out;
    for (const GraphChannel& ch : s.ring.channels) {
      ++in[ch.netIn];
      ++out[ch.netOut];
      const auto& gpus = s.sys.of(NodeType::kGpu);
      const auto& nets = s.sys.of(NodeType::kNet);
      // The NIC's own GPU receives: the closest path there is.
      CHECK(s.paths.get(nets[ch.netIn], gpus[ch.gpus.front()]).type <= PathType::kPix);
      CHECK(s.paths.get(gpus[ch.gpus.back()], nets[ch.netOut]).type <= PathType::kPxn);
      for (size_t i = 0; i + 1 < ch.gpus.size(); ++i) CHECK(s.paths.gpuToGpu(ch.gpus[i], ch.gpus[i + 1]).type == PathType::kNvl);
    }
    // Each NIC carries its share: the channel count divided evenly.
    for (int n = 0; n < nNets; ++n) {
      CHECK(in[n] == static_cast<int>(c.channels) / nNets);
      CHECK(out[n] == static_cast<int>(c.channels) / nNets);
    }
    // Per-channel speed fits a NIC.
    CHECK(s.ring.speedInter <= s.sys.net(0).net.bw + 1e-6);
    requireWithinBudget(s);
  }
}

TEST_CASE("search is deterministic and trees follow the rings", "[topology][search]") {
  Searched a = search("hgx_h100.xml", true);
  Searched b = search("hgx_h100.xml", true);
  REQUIRE(a.ring.channels.size() == b.ring.channels.size());
  for (size_t c = 0; c < a.ring.channels.size(); ++c) CHECK(a.ring.channels[c].gpus == b.ring.channels[c].gpus);
  NodeGraph tree = treeGraphFromRing(a.ring);
  CHECK(tree.pattern == GraphPattern::kBalancedTree);
  for (size_t c = 0; c < tree.channels.size(); ++c) {
    CHECK(tree.channels[c].gpus == a.ring.channels[c].gpus);
    CHECK(tree.channels[c].netOut == tree.channels[c].netIn);  // a chain goes up and down one NIC
  }
}

TEST_CASE("NCCL_GRAPH_FILE replaces the search; NCCL_GRAPH_DUMP_FILE writes it", "[topology][search][xml]") {
  TopoSystem sys = loadMachine("dgx_a100.xml");
  PathTable paths(sys, pathOptionsFromEnv(sys));
  std::string dump = "/tmp/plait_topo_graph_" + std::to_string(getpid()) + ".xml";
  NodeGraphs searched;
  {
    ScopedEnv out("NCCL_GRAPH_DUMP_FILE", dump.c_str());
    auto g = computeNodeGraphs(sys, paths, true);
    REQUIRE(g.isOk());
    searched = std::move(g).value();
  }
  // Edit the dump: reverse channel 0's GPU order; the file must win.
  auto xml = readXmlFile(dump);
  REQUIRE(xml.isOk());
  auto graphs = graphsFromXml(sys, *xml);
  REQUIRE(graphs.isOk());
  NodeGraph edited = (*graphs)[0];
  std::reverse(edited.channels[0].gpus.begin(), edited.channels[0].gpus.end());
  REQUIRE(writeXmlFile(dump, graphsToXml(sys, {edited})).isOk());
  {
    ScopedEnv in("NCCL_GRAPH_FILE", dump.c_str());
    auto g = computeNodeGraphs(sys, paths, true);
    REQUIRE(g.isOk());
    CHECK(g->ring.channels[0].gpus == edited.channels[0].gpus);
    CHECK(g->ring.channels.size() == searched.ring.channels.size());
    CHECK(g->tree.channels.size() == searched.ring.channels.size());
  }
  // A graph that visits a GPU twice is refused.
  edited.channels[0].gpus[1] = edited.channels[0].gpus[0];
  REQUIRE(writeXmlFile(dump, graphsToXml(sys, {edited})).isOk());
  {
    ScopedEnv in("NCCL_GRAPH_FILE", dump.c_str());
    auto g = computeNodeGraphs(sys, paths, true);
    REQUIRE_FALSE(g.isOk());
    CHECK(g.status().message().find("twice") != std::string::npos);
  }
  std::remove(dump.c_str());
}
