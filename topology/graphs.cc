// graphs.cc — rings and trees over ranks grouped by host: the double binary
// tree across hosts, chains inside hosts, and host-rank ordering.
//
// The double binary tree: lay the hosts out on positions 0..n-1. In tree 0,
// position p > 0 with lowest set bit b has children p - b/2 and p + b/2 (when
// they exist), so odd positions are leaves; position 0 is the root and has one
// child, the largest power of two below n. Tree 1 is tree 0 with positions
// mirrored (p -> n-1-p, even n) or shifted by one (odd n), which turns tree 0's
// leaves (odd positions) into tree 1's interior nodes. Each host then sends and
// receives about one tree's worth of traffic in total, and the depth of both
// trees is about log2(n).
#include <algorithm>
#include <cstdio>
#include <map>
#include <sstream>

#include "base/log.h"
#include "topology/topology.h"

namespace plait::topo {

std::vector<int> doubleBinaryTreeParents(int n, bool mirror) {
  std::vector<int> parentAt(std::max(n, 0), -1);  // by position
  for (int p = 1; p < n; ++p) {
    int b = p & -p;
    int x = p / (2 * b);
    parentAt[p] = ((x & 1) || p + b >= n) ? p - b : p + b;
  }
  if (!mirror) return parentAt;
  // Host at position p of tree 1.
  auto hostAt = [n](int p) { return (n % 2 == 0) ? n - 1 - p : (p + 1) % n; };
  std::vector<int> parents(std::max(n, 0), -1);
  for (int p = 0; p < n; ++p) parents[hostAt(p)] = parentAt[p] < 0 ? -1 : hostAt(parentAt[p]);
  return parents;
}

int TreeChannel::depth() const {
  int deepest = 0;
  for (size_t r = 0; r < nodes.size(); ++r) {
    int d = 0;
    for (int u = nodes[r].up; u >= 0 && d <= static_cast<int>(nodes.size()); u = nodes[u].up) ++d;
    deepest = std::max(deepest, d);
  }
  return deepest;
}

namespace {

void addDown(TreeNode& node, int child) {
  for (int& d : node.down) {
    if (d < 0) {
      d = child;
      return;
    }
  }
}

TreeChannel makeTree(const std::vector<std::vector<int>>& hosts, int nRanks, bool mirror) {
  TreeChannel tree;
  tree.nodes.assign(nRanks, TreeNode{});
  const int nHosts = static_cast<int>(hosts.size());
  for (const std::vector<int>& chain : hosts) {
    for (size_t i = 1; i < chain.size(); ++i) {
      tree.nodes[chain[i]].up = chain[i - 1];
      tree.nodes[chain[i - 1]].down[0] = chain[i];
    }
  }
  std::vector<int> parents = doubleBinaryTreeParents(nHosts, mirror);
  for (int h = 0; h < nHosts; ++h) {
    int head = hosts[h].front();
    if (parents[h] < 0) {
      tree.root = head;
      continue;
    }
    int up = hosts[parents[h]].front();
    tree.nodes[head].up = up;
    addDown(tree.nodes[up], head);
  }
  for (int h = 0; h < nHosts; ++h) {
    int d = 0;
    for (int p = parents[h]; p >= 0; p = parents[p]) ++d;
    tree.hostDepth = std::max(tree.hostDepth, d);
  }
  return tree;
}

}  // namespace

Result<CommGraphs> assembleGraphs(const std::vector<std::vector<std::vector<int>>>& hostOrders) {
  if (hostOrders.empty() || hostOrders[0].empty()) return invalidArgument("no channels or no hosts to assemble");
  int nRanks = 0;
  for (const auto& host : hostOrders[0]) nRanks += static_cast<int>(host.size());
  CommGraphs graphs;
  for (size_t c = 0; c < hostOrders.size(); ++c) {
    std::vector<int> ring;
    std::vector<char> seen(nRanks, 0);
    for (const auto& host : hostOrders[c]) {
      if (host.empty()) return invalidArgument("channel " + std::to_string(c) + " has an empty host");
      for (int r : host) {
        if (r < 0 || r >= nRanks || seen[r]++) {
          return invalidArgument("channel " + std::to_string(c) + " lists rank " + std::to_string(r) +
                                 " twice or out of range");
        }
        ring.push_back(r);
      }
    }
    if (static_cast<int>(ring.size()) != nRanks) return invalidArgument("channels list different ranks");
    graphs.rings.push_back(std::move(ring));
    graphs.trees.push_back(makeTree(hostOrders[c], nRanks, c % 2 == 1));
  }
  return graphs;
}

Result<CommGraphs> buildHostGraphs(const std::vector<RankPlacement>& ranks, int nChannels) {
  const int n = static_cast<int>(ranks.size());
  if (n == 0) return invalidArgument("buildHostGraphs: no ranks");
  if (nChannels < 1 || nChannels > 64) return invalidArgument("buildHostGraphs: nChannels " + std::to_string(nChannels) + " not in 1..64");
  std::vector<const RankPlacement*> byRank(n, nullptr);
  for (const RankPlacement& p : ranks) {
    if (p.rank < 0 || p.rank >= n) return invalidArgument("buildHostGraphs: rank " + std::to_string(p.rank) + " out of range");
    if (byRank[p.rank]) return invalidArgument("buildHostGraphs: rank " + std::to_string(p.rank) + " reported twice");
    byRank[p.rank] = &p;
  }
  // Hosts in order of their lowest rank; inside, NUMA blocks.
  std::vector<uint64_t> hostOrder;
  std::map<uint64_t, std::map<int, std::vector<const RankPlacement*>>> blocks;
  for (const RankPlacement* p : byRank) {
    if (!blocks.count(p->hostHash)) hostOrder.push_back(p->hostHash);
    blocks[p->hostHash][p->numaNode].push_back(p);
  }
  for (auto& [hash, numas] : blocks) {
    for (auto& [numa, list] : numas) {
      std::stable_sort(list.begin(), list.end(), [](const RankPlacement* a, const RankPlacement* b) {
        return a->cpu != b->cpu ? a->cpu < b->cpu : a->rank < b->rank;
      });
    }
  }
  std::vector<std::vector<std::vector<int>>> orders(nChannels);
  for (int c = 0; c < nChannels; ++c) {
    for (uint64_t hash : hostOrder) {
      std::vector<int> host;
      for (auto& [numa, list] : blocks[hash]) {
        const int k = static_cast<int>(list.size());
        for (int i = 0; i < k; ++i) host.push_back(list[(i + c) % k]->rank);
      }
      orders[c].push_back(std::move(host));
    }
  }
  PLAIT_ASSIGN_OR_RETURN(CommGraphs graphs, assembleGraphs(orders));
  if (log::enabled(log::Level::kInfo, log::kInit)) {
    std::istringstream lines(graphs.describe());
    for (std::string line; std::getline(lines, line);) PLAIT_INFO(kInit, "%s", line.c_str());
  }
  return graphs;
}

std::string CommGraphs::describe() const {
  std::ostringstream out;
  char head[64];
  for (size_t c = 0; c < rings.size(); ++c) {
    std::snprintf(head, sizeof head, "Ring %02zu/%02zu :", c, rings.size());
    out << head;
    for (int r : rings[c]) out << " " << r;
    if (ringBw > 0) out << "  (" << ringBw << " GB/s)";
    out << "\n";
  }
  for (size_t c = 0; c < trees.size(); ++c) {
    const TreeChannel& t = trees[c];
    std::snprintf(head, sizeof head, "Tree %02zu (root %d, depth %d, host depth %d) :", c, t.root, t.depth(),
                  t.hostDepth);
    out << head;
    // NCCL's form: down0/down1/down2->rank->up
    for (size_t r = 0; r < t.nodes.size(); ++r) {
      const TreeNode& node = t.nodes[r];
      out << " " << node.down[0] << "/" << node.down[1] << "/" << node.down[2] << "->" << r << "->" << node.up;
    }
    out << "\n";
  }
  return out.str();
}

}  // namespace plait::topo
