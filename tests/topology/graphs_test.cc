// Rings and trees over hosts: double binary trees, host-rank graphs,
// multi-node GPU clusters.
#include <cmath>
#include <set>

#include <catch2/catch.hpp>

#include "machines.h"
#include "topology/topology.h"

using namespace plait::topo;
using namespace plait::topo::test;

namespace {

int depthOf(const std::vector<int>& parents, int node) {
  int d = 0;
  for (int p = parents[node]; p >= 0; p = parents[p]) ++d;
  return d;
}

// up/down agree, one root, every rank reaches it.
void requireConsistentTree(const TreeChannel& t) {
  int roots = 0;
  for (size_t r = 0; r < t.nodes.size(); ++r) {
    const TreeNode& n = t.nodes[r];
    if (n.up < 0) {
      ++roots;
      CHECK(static_cast<int>(r) == t.root);
    } else {
      const auto& d = t.nodes[n.up].down;
      CHECK(std::find(d.begin(), d.end(), static_cast<int>(r)) != d.end());
    }
    for (int c : n.down) {
      if (c >= 0) CHECK(t.nodes[c].up == static_cast<int>(r));
    }
  }
  CHECK(roots == 1);
  CHECK(t.depth() < static_cast<int>(t.nodes.size()) + 1);
}

// Ranks of each host form one contiguous run of the ring (cyclically).
int hostBoundaryCrossings(const std::vector<int>& ring, const std::vector<int>& hostOf) {
  int crossings = 0;
  for (size_t i = 0; i < ring.size(); ++i) crossings += hostOf[ring[i]] != hostOf[ring[(i + 1) % ring.size()]];
  return crossings;
}

}  // namespace

TEST_CASE("double binary tree: two trees, depth about log2(n), interior nodes complementary", "[topology][tree]") {
  for (int n = 1; n <= 130; ++n) {
    CAPTURE(n);
    std::vector<int> t0 = doubleBinaryTreeParents(n, false);
    std::vector<int> t1 = doubleBinaryTreeParents(n, true);
    const int maxDepth = static_cast<int>(std::floor(std::log2(n))) + 1;
    std::vector<int> kids0(n, 0), kids1(n, 0);
    int roots0 = 0, roots1 = 0;
    for (int h = 0; h < n; ++h) {
      if (t0[h] < 0) ++roots0; else ++kids0[t0[h]];
      if (t1[h] < 0) ++roots1; else ++kids1[t1[h]];
      CHECK(depthOf(t0, h) <= maxDepth);
      CHECK(depthOf(t1, h) <= maxDepth);
    }
    CHECK(roots0 == 1);
    CHECK(roots1 == 1);
    int interiorInBoth = 0;
    for (int h = 0; h < n; ++h) {
      CHECK(kids0[h] <= 2);
      CHECK(kids1[h] <= 2);
      interiorInBoth += kids0[h] > 0 && kids1[h] > 0;
    }
    CHECK(interiorInBoth <= 1);
  }
}

TEST_CASE("host ranks: hosts and NUMA nodes contiguous, boundaries crossed minimally", "[topology][host]") {
  // 4 hosts x 8 ranks, ranks dealt round-robin over hosts and over 2 NUMA
  // nodes inside each host: the worst order a launcher could give.
  std::vector<RankPlacement> ranks;
  std::vector<int> hostOf(32), numaOf(32);
  for (int r = 0; r < 32; ++r) {
    hostOf[r] = r % 4;
    numaOf[r] = (r / 4) % 2;
    ranks.push_back({r, 1000u + static_cast<uint64_t>(hostOf[r]), numaOf[r], r});
  }
  auto graphs = buildHostGraphs(ranks, 4);
  REQUIRE(graphs.isOk());
  REQUIRE(graphs->rings.size() == 4);
  REQUIRE(graphs->trees.size() == 4);
  for (const std::vector<int>& ring : graphs->rings) {
    std::set<int> unique(ring.begin(), ring.end());
    CHECK(unique.size() == 32);
    CHECK(hostBoundaryCrossings(ring, hostOf) == 4);  // one per host: the minimum for a ring
    // Inside each host the ring changes NUMA node once.
    int numaCrossings = 0;
    for (size_t i = 0; i < ring.size(); ++i) {
      int a = ring[i], b = ring[(i + 1) % ring.size()];
      numaCrossings += hostOf[a] == hostOf[b] && numaOf[a] != numaOf[b];
    }
    CHECK(numaCrossings == 4);
  }
  // Different channels hand the host boundary to different ranks.
  std::set<int> boundaryRanks;
  for (const std::vector<int>& ring : graphs->rings) {
    for (size_t i = 0; i < ring.size(); ++i) {
      if (hostOf[ring[i]] != hostOf[ring[(i + 1) % ring.size()]]) boundaryRanks.insert(ring[i]);
    }
  }
  CHECK(boundaryRanks.size() > 4);
  for (const TreeChannel& t : graphs->trees) {
    requireConsistentTree(t);
    CHECK(t.hostDepth <= 3);  // log2(4) + 1
  }
  CHECK(graphs->trees[0].root != graphs->trees[1].root);
  CHECK(graphs->describe().find("Ring 00/04 :") != std::string::npos);
}

TEST_CASE("host ranks: contract violations are reported", "[topology][host]") {
  std::vector<RankPlacement> dup{{0, 1, 0, 0}, {0, 1, 0, 1}};
  CHECK(buildHostGraphs(dup, 1).status().code() == plait::Code::kInvalidArgument);
  std::vector<RankPlacement> gap{{0, 1, 0, 0}, {2, 1, 0, 1}};
  CHECK_FALSE(buildHostGraphs(gap, 1).isOk());
  std::vector<RankPlacement> one{{0, 1, 0, 0}};
  CHECK_FALSE(buildHostGraphs(one, 0).isOk());
  CHECK_FALSE(buildHostGraphs({}, 1).isOk());
  auto single = buildHostGraphs(one, 2);
  REQUIRE(single.isOk());
  CHECK(single->rings[0] == std::vector<int>{0});
  CHECK(single->trees[0].root == 0);
  CHECK(single->trees[0].depth() == 0);
}

TEST_CASE("CPU-only cluster: placements from the model, graphs per host", "[topology][host]") {
  auto cluster = loadCluster(dataPath("cluster_cpu_x4.xml"), 0);
  REQUIRE(cluster.isOk());
  CHECK(cluster->hosts() == 4);
  std::vector<RankPlacement> ranks = hostPlacements(*cluster, 6);
  REQUIRE(ranks.size() == 24);
  CHECK(ranks[1].numaNode == 1);  // dealt over the two sockets
  auto graphs = buildHostGraphs(ranks, 2);
  REQUIRE(graphs.isOk());
  std::vector<int> hostOf(24);
  for (int r = 0; r < 24; ++r) hostOf[r] = r / 6;
  for (const auto& ring : graphs->rings) CHECK(hostBoundaryCrossings(ring, hostOf) == 4);
}

TEST_CASE("GPU clusters: global rings per channel, trees of depth about log2(hosts)", "[topology][cluster]") {
  struct Case {
    const char* file;
    int hosts;
  };
  for (Case c : {Case{"cluster_a100_x8.xml", 8}, Case{"cluster_h100_x16.xml", 16}, Case{"cluster_dgx1_x4.xml", 4},
                 Case{"cluster_pcie_x2.xml", 2}}) {
    CAPTURE(c.file);
    auto cluster = loadCluster(dataPath(c.file), 0);
    REQUIRE(cluster.isOk());
    REQUIRE(cluster->hosts() == c.hosts);
    auto graphs = computeClusterGraphs(*cluster);
    INFO(graphs.status().toString());
    REQUIRE(graphs.isOk());
    const int gpus = cluster->host(0).count(NodeType::kGpu);
    const int n = gpus * c.hosts;
    std::vector<int> hostOf(n);
    for (int r = 0; r < n; ++r) hostOf[r] = r / gpus;
    const NodeGraph& ring = graphs->perSystem[0].ring;
    for (size_t ch = 0; ch < graphs->comm.rings.size(); ++ch) {
      const auto& r = graphs->comm.rings[ch];
      CHECK(std::set<int>(r.begin(), r.end()).size() == static_cast<size_t>(n));
      CHECK(hostBoundaryCrossings(r, hostOf) == c.hosts);
      // Each host is entered at the GPU next to the channel's NIC.
      CHECK(r[0] == ring.channels[ch].gpus.front());
      const TreeChannel& t = graphs->comm.trees[ch];
      requireConsistentTree(t);
      CHECK(t.hostDepth <= static_cast<int>(std::log2(c.hosts)) + 1);
      CHECK(t.hostDepth >= static_cast<int>(std::ceil(std::log2(c.hosts))) - 1);
      CHECK(t.depth() <= t.hostDepth + gpus);
    }
    CHECK(graphs->comm.ringBw == Approx(ring.speedIntra));
  }
}

TEST_CASE("assembleGpuGraphs maps GPU ordinals to the ranks each host reported", "[topology][cluster]") {
  NodeGraph a, b;
  a.speedIntra = 40;
  b.speedIntra = 20;
  a.channels = {{0, {1, 0}, 0}, {1, {0, 1}, 1}};
  b.channels = {{0, {0, 1}, 0}};
  // Host 0 drives ranks 3 and 1, host 1 ranks 0 and 2 (a launcher's order).
  auto graphs = assembleGpuGraphs({a, b}, {{3, 1}, {0, 2}});
  REQUIRE(graphs.isOk());
  REQUIRE(graphs->rings.size() == 1);  // the fewest any host has
  CHECK(graphs->rings[0] == std::vector<int>{1, 3, 0, 2});
  CHECK(graphs->ringBw == Approx(20));
  CHECK(graphs->trees[0].root == 1);
  CHECK(graphs->trees[0].nodes[0].up == 1);
  CHECK_FALSE(assembleGpuGraphs({a, b}, {{3}, {0, 2}}).isOk());
  CHECK_FALSE(assembleGpuGraphs({a, b}, {{3, 1}, {3, 2}}).isOk());
}
