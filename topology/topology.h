// topology.h — what the communicator asks of the topology layer.
//
// Two questions, one per kind of rank:
//
//  * Host ranks (CPU memory): at init every rank reports where it runs
//    (RankPlacement, allgathered over the bootstrap ring); every rank then
//    calls buildHostGraphs() on the same vector and gets the same rings and
//    trees. Ranks of one host are contiguous in every ring, and within a host
//    ranks of one NUMA node are contiguous, so each host boundary (and each
//    socket boundary) is crossed the fewest times a ring allows. Trees are
//    a double binary tree over hosts with a chain inside each host.
//
//  * GPU ranks: detectSystem() (or NCCL_TOPO_FILE) describes this host,
//    computeNodeGraphs() searches its rings, and assembleClusterGraphs()
//    (cluster.h) joins identical per-host graphs across hosts.
//
// Everything here is plain data and pure functions of their arguments unless
// said otherwise: thread-compatible, no global state, nothing blocks.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "plait/status.hpp"
#include "topology/paths.h"
#include "topology/search.h"
#include "topology/system.h"

namespace plait::topo {

// What a rank reports about itself at init.
struct RankPlacement {
  int rank = -1;          // 0 .. nRanks-1, each exactly once across the vector
  uint64_t hostHash = 0;  // equal for ranks on the same host
  int numaNode = -1;      // NUMA node of the rank's memory/CPU, -1 if unknown
  int cpu = -1;           // CPU the rank runs on, -1 if unknown (tie-break only)
};

// One rank's place in one tree channel. -1 means none.
struct TreeNode {
  int up = -1;
  std::array<int, 3> down{-1, -1, -1};  // chain successor first, then child hosts' heads
};

struct TreeChannel {
  int root = -1;
  std::vector<TreeNode> nodes;  // indexed by rank
  // Longest root-to-leaf path, in hops (0 for a single rank).
  int depth() const;
  // Depth of the tree between hosts only (hops between host heads).
  int hostDepth = 0;
};

struct CommGraphs {
  // Per channel: every rank once, in ring order; rank rings[c][i] sends to
  // rings[c][(i+1) % n].
  std::vector<std::vector<int>> rings;
  std::vector<TreeChannel> trees;  // as many as rings
  double ringBw = 0;  // GB/s per channel from the graph search; 0 when not searched (host ranks)
  double treeBw = 0;
  // NCCL_DEBUG=INFO-style text: "Ring 00 : 0 1 2 3", "Tree 00 : 1/-1/-1->0->-1 ...".
  std::string describe() const;
};

// Host-rank graphs.
//
// Contract: `ranks` holds each rank 0..n-1 exactly once (any order);
// 1 <= nChannels <= 64. Hosts are ordered by their lowest rank; inside a host
// ranks are ordered by (numaNode, cpu, rank). Channel c rotates the order
// inside each NUMA block by c so that different ranks carry the traffic that
// crosses host boundaries, without adding crossings. Tree channel c uses tree
// (c even) or its mirror (c odd) of the double binary tree over hosts; each
// host is a chain whose head is the first rank of that channel's host order.
// Returns InvalidArgument naming the problem (duplicate or missing rank, bad
// channel count). Logs the chosen rings and trees at INFO (subsystem INIT).
Result<CommGraphs> buildHostGraphs(const std::vector<RankPlacement>& ranks, int nChannels);

// The same assembly from explicit orders, shared by host and GPU graphs:
// hostOrders[c][h] lists the ranks of host h in channel c's order (hosts in
// ring order). Every channel must list the same ranks. InvalidArgument
// otherwise.
Result<CommGraphs> assembleGraphs(const std::vector<std::vector<std::vector<int>>>& hostOrders);

// The double binary tree over `n` hosts (positions 0..n-1): parent of each
// position in tree 0 (mirror = false) or tree 1 (mirror = true), -1 at the
// root. Tree 1 mirrors (even n) or shifts (odd n) tree 0 so that a host that
// is interior in one tree is a leaf in the other.
std::vector<int> doubleBinaryTreeParents(int n, bool mirror);

// ---- GPU hosts -------------------------------------------------------------
//
// Flow for GPU ranks: every rank calls loadLocalSystem(), builds a PathTable,
// and computeNodeGraphs() (identical hosts find identical graphs; NCCL's
// graph file pins them). The communicator allgathers each host's ring graph
// (channel GPU orders, a few hundred bytes) with the global rank of each of
// its GPUs, then every rank calls assembleGpuGraphs() on the same inputs.

// This host's system: NCCL_TOPO_FILE when set (detection completes it: nodes
// it lacks are added, attributes it lacks are filled), otherwise detection;
// NCCL_TOPO_DUMP_FILE, when set, receives the result. Logs what was found at
// INFO (subsystem GRAPH/INIT). Errors: unreadable or malformed topology file.
Result<TopoSystem> loadLocalSystem();

// Whether NCCL_TOPO_FILE or NCCL_TOPO_DUMP_FILE is set: communicator init
// then loads the local system (so a bad file fails init, naming it) and takes
// host ranks' NUMA nodes from it.
bool localTopologyConfigured();

// The numaid of the <cpu> whose affinity mask holds logical CPU `cpu`; -1
// when none does (or the masks are empty).
int numaNodeOfCpu(const TopoSystem& system, int cpu);

struct NodeGraphs {
  NodeGraph ring;
  NodeGraph tree;
};

// Ring and tree graphs for one host: read from NCCL_GRAPH_FILE when set
// (validated against the system), otherwise searched; written to
// NCCL_GRAPH_DUMP_FILE when set. `multiNode` asks for NIC-terminated channels.
Result<NodeGraphs> computeNodeGraphs(const TopoSystem& system, const PathTable& paths, bool multiNode);

// Joins per-host graphs into global rings and trees. hostGraphs[h] is host
// h's graph (hosts in ring order), hostRanks[h][g] the global rank driving
// GPU ordinal g of host h. Channel c of the result is channel c of every host
// (the fewest channels any host has); ringBw/treeBw are the slowest host's
// per-channel speed. Logs the result at INFO (INIT). InvalidArgument when a
// channel names a GPU without a rank or ranks repeat.
Result<CommGraphs> assembleGpuGraphs(const std::vector<NodeGraph>& hostGraphs,
                                     const std::vector<std::vector<int>>& hostRanks);

}  // namespace plait::topo
