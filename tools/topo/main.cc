// plait-topo — what Plait sees of a machine and which rings and trees it
// would build there.
//
//   plait-topo                                  this host, detected
//   plait-topo --topo-file dgx.xml --nodes 4    a described machine, 4 hosts
//   plait-topo --nranks-per-node 8 --nodes 2    CPU-only: 8 host ranks per host
//   plait-topo ... --dump-topo t.xml --graph-dump g.xml --dot m.dot
//
// Exit status: 0 on success, 1 on a topology or search error, 2 on bad flags.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>

#include <CLI/CLI.hpp>

#include "topology/cluster.h"
#include "topology/detect.h"
#include "topology/dot.h"
#include "topology/graph_xml.h"

namespace {

using namespace plait;
using namespace plait::topo;

struct Flags {
  std::string topoFile, dumpTopo, graphDump, graphFile, dot;
  int ranksPerNode = 0;
  int nodes = 0;  // 0: what the file says, else 1
  int channels = 2;
  int dotChannels = 4;
  bool quiet = false;
};

Result<Cluster> loadMachine(const Flags& f) {
  if (!f.topoFile.empty()) return loadCluster(f.topoFile, f.nodes);
  PLAIT_ASSIGN_OR_RETURN(XmlNode xml, detectSystemXml());
  PLAIT_ASSIGN_OR_RETURN(TopoSystem sys, buildSystem(xml));
  return replicateSystem(std::move(sys), std::max(f.nodes, 1));
}

Status writeText(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  return out ? Status::ok() : systemError("cannot write " + path);
}

// CPU-only hosts, or host ranks asked for explicitly: the host-rank graphs.
Status runHostRanks(const Cluster& cluster, const Flags& f) {
  int perHost = f.ranksPerNode > 0 ? f.ranksPerNode : std::max(1, cluster.host(0).count(NodeType::kCpu));
  PLAIT_ASSIGN_OR_RETURN(CommGraphs graphs, buildHostGraphs(hostPlacements(cluster, perHost), f.channels));
  std::printf("\nHost ranks: %d hosts x %d ranks, %d channels\n%s", cluster.hosts(), perHost, f.channels,
              graphs.describe().c_str());
  if (!f.dot.empty()) PLAIT_RETURN_IF_ERROR(writeText(f.dot, toDot(cluster.host(0), NodeGraph{}, {8, "host"})));
  return Status::ok();
}

Status runGpus(const Cluster& cluster, const Flags& f) {
  auto start = std::chrono::steady_clock::now();
  PLAIT_ASSIGN_OR_RETURN(ClusterGraphs graphs, computeClusterGraphs(cluster));
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const TopoSystem& sys = cluster.host(0);
  const NodeGraphs& g = graphs.perSystem[cluster.hostSystem[0]];
  std::printf("\n%s%s", g.ring.describe().c_str(), g.tree.describe().c_str());
  std::printf("\n%d hosts x %d GPUs: %zu ring channels x %.1f GB/s (search + assembly %.2f ms)\n", cluster.hosts(),
              sys.count(NodeType::kGpu), graphs.comm.rings.size(), graphs.comm.ringBw, ms);
  if (!f.quiet) std::printf("%s", graphs.comm.describe().c_str());
  if (!f.graphDump.empty()) PLAIT_RETURN_IF_ERROR(writeXmlFile(f.graphDump, graphsToXml(sys, {g.ring, g.tree})));
  if (!f.dot.empty()) {
    std::string title = f.topoFile.empty() ? "this host" : f.topoFile;
    PLAIT_RETURN_IF_ERROR(writeText(f.dot, toDot(sys, g.ring, {f.dotChannels, title + ": " + std::to_string(f.dotChannels) + " of " + std::to_string(g.ring.channels.size()) + " ring channels"})));
  }
  return Status::ok();
}

Status run(const Flags& f) {
  PLAIT_ASSIGN_OR_RETURN(Cluster cluster, loadMachine(f));
  const TopoSystem& sys = cluster.host(0);
  PathTable paths(sys, pathOptionsFromEnv(sys));
  std::printf("%s\n%s", describeSystem(sys).c_str(), pathMatrix(sys, paths).c_str());
  if (!f.dumpTopo.empty()) PLAIT_RETURN_IF_ERROR(writeXmlFile(f.dumpTopo, sys.xml));
  if (!f.graphFile.empty()) setenv("PLAIT_GRAPH_FILE", f.graphFile.c_str(), 1);
  if (sys.count(NodeType::kGpu) == 0 || f.ranksPerNode > 0) return runHostRanks(cluster, f);
  return runGpus(cluster, f);
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"plait-topo: the machine as Plait sees it, its paths, rings and trees"};
  app.add_option("--topo-file", f.topoFile, "NCCL topology XML (or a Plait <cluster> file) instead of detection");
  app.add_option("--nranks-per-node", f.ranksPerNode, "host ranks per host (CPU-only graphs)")->check(CLI::Range(1, 4096));
  app.add_option("--nodes", f.nodes, "hosts in the job (copies of the machine)")->check(CLI::Range(0, 65536));
  app.add_option("--channels", f.channels, "channels for host-rank graphs")->check(CLI::Range(1, 64));
  app.add_option("--dump-topo", f.dumpTopo, "write the topology XML here");
  app.add_option("--graph-dump", f.graphDump, "write the ring and tree graph XML here");
  app.add_option("--graph-file", f.graphFile, "read graphs from this graph XML instead of searching");
  app.add_option("--dot", f.dot, "write a Graphviz picture of the machine with its rings here");
  app.add_option("--dot-channels", f.dotChannels, "ring channels drawn in the --dot picture")->check(CLI::Range(0, 64));
  app.add_flag("--quiet", f.quiet, "do not print every rank of every ring and tree");
  CLI11_PARSE(app, argc, argv);
  plait::Status status = run(f);
  if (!status.isOk()) {
    std::fprintf(stderr, "plait-topo: %s\n", status.toString().c_str());
    return 1;
  }
  return 0;
}
