// search.h — graph search inside one host: the channels (rings) that carry a
// collective through the host's GPUs, and in a multi-node job the NICs each
// channel enters and leaves by.
//
// What the search maximises. A channel moves data at `speed` GB/s over every
// link of every hop it takes (GPU -> GPU paths, NIC -> first GPU, last GPU ->
// NIC), and links are directed: a ring uses each GPU's outgoing bandwidth once.
// The search looks, from the strictest path types to the loosest (intra-host
// NVL, NVB, C2C, PIX, PXB, PHB, SYS; NIC paths PIX, PXB, P2C, PXN, PHB, SYS),
// for the first type limits that admit a ring; within them it tries per-channel
// speeds from the highest down and keeps the largest total (channels × speed),
// preferring fewer, faster channels on ties. Links are a budget: placing a
// channel subtracts its speed from each link it crosses (× 1.2 through an Intel
// CPU), so rings that share an NVLink must fit in it together. Hence on an
// NVLink machine rings use NVLink only, on a hybrid cube mesh the rings use
// disjoint NVLinks, and NICs are spread: each channel enters through the least
// used NIC and starts at the GPU closest to it.
//
// Cost: a depth-first search with a step budget per attempt (first-fit, then
// a full search with backtracking only when first-fit falls short of the
// bound the link budget allows). Eight GPUs take milliseconds.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plait/status.hpp"
#include "topology/paths.h"
#include "topology/system.h"

namespace plait::topo {

// NCCL's graph pattern codes.
enum class GraphPattern : int { kBalancedTree = 1, kSplitTree = 2, kTree = 3, kRing = 4 };

struct GraphChannel {
  int netIn = -1;         // NET ordinal the channel enters by; -1 inside one host
  std::vector<int> gpus;  // GPU ordinals in channel order
  int netOut = -1;        // NET ordinal the channel leaves by; -1 inside one host
};

// One host's graph, the content of one <graph> in NCCL's graph XML.
struct NodeGraph {
  int id = 0;  // 0 ring, 1 tree (NCCL's ids)
  GraphPattern pattern = GraphPattern::kRing;
  int crossNic = 0;       // 1 when some channel leaves by another NIC than it entered
  double speedIntra = 0;  // GB/s per channel inside the host
  double speedInter = 0;  // GB/s per channel over the network
  double latencyInter = 0;
  PathType typeIntra = PathType::kLoc;
  PathType typeInter = PathType::kLoc;
  int sameChannels = 0;
  std::vector<GraphChannel> channels;

  double totalBw() const { return static_cast<double>(channels.size()) * speedIntra; }
  // "Ring graph: 6 channels x 20.0 GB/s, NVL/PIX" then one line per channel.
  std::string describe() const;
};

struct SearchOptions {
  int maxChannels = 16;   // NCCL_MAX_CHANNELS caps the total at 32; one graph uses half
  int crossNic = 2;       // NCCL_CROSS_NIC: 0 never, 1 allowed, 2 allowed when it helps
  bool useNet = true;     // search NIC -> GPUs -> NIC channels (false: a single host)
  int64_t stepBudget = 50000;  // DFS steps per attempt
};

// Defaults, then NCCL_CROSS_NIC and NCCL_MAX_CHANNELS (halved) from the environment.
SearchOptions searchOptionsFromEnv();

struct SearchStats {
  int64_t steps = 0;
  int attempts = 0;
};

// Searches rings over every GPU of the host. Returns an empty graph (no
// channels) when the host has no GPU; InternalError if GPUs exist but no ring
// fits even at the lowest speed (a disconnected description).
Result<NodeGraph> searchRingGraph(const TopoSystem& system, const PathTable& paths,
                                  const SearchOptions& options, SearchStats* stats = nullptr);

// The tree graph that goes with a ring graph: per channel, a chain through the
// host's GPUs in ring order, headed by the GPU next to the channel's NIC
// (NCCL's balanced-tree pattern inside a host; the tree across hosts is built
// by the cluster layer).
NodeGraph treeGraphFromRing(const NodeGraph& ring);

// Checks a graph against a system: GPU and NET ordinals exist, each channel
// visits every GPU exactly once, NIC ends are set iff `multiNode`.
Status validateGraph(const TopoSystem& system, const NodeGraph& graph, bool multiNode);

}  // namespace plait::topo
