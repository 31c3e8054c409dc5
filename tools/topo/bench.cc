// plait-topo-bench — how long graph search and assembly take for a described
// machine replicated over many hosts. A benchmark, not a test: it reports the
// median of repeated runs and never fails on time.
//
//   plait-topo-bench tests/topology/data/hgx_h100.xml 64 [repeats]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "topology/cluster.h"

int main(int argc, char** argv) {
  using namespace plait::topo;
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s TOPO.xml HOSTS [REPEATS]\n", argv[0]);
    return 2;
  }
  int hosts = std::atoi(argv[2]);
  int repeats = argc > 3 ? std::atoi(argv[3]) : 11;
  auto cluster = loadCluster(argv[1], hosts);
  if (!cluster) {
    std::fprintf(stderr, "%s\n", cluster.status().toString().c_str());
    return 1;
  }
  std::vector<double> ms;
  size_t channels = 0, ranks = 0;
  for (int i = 0; i < repeats; ++i) {
    auto start = std::chrono::steady_clock::now();
    auto graphs = computeClusterGraphs(*cluster);
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    if (!graphs) {
      std::fprintf(stderr, "%s\n", graphs.status().toString().c_str());
      return 1;
    }
    channels = graphs->comm.rings.size();
    ranks = graphs->comm.rings.empty() ? 0 : graphs->comm.rings[0].size();
  }
  std::sort(ms.begin(), ms.end());
  std::printf("%s x %d hosts: %zu ranks, %zu channels; search+assembly median %.2f ms (min %.2f, max %.2f, %d runs)\n",
              argv[1], hosts, ranks, channels, ms[ms.size() / 2], ms.front(), ms.back(), repeats);
  return 0;
}
