// cluster.h — several hosts described together: for the tool, the tests and
// anyone who wants to see the graphs a multi-node job would get without
// running one.
//
// A cluster is a list of hosts, each with a TopoSystem. Identical hosts share
// one system, so their graph search runs once: the cost of 64 hosts is one
// search plus a linear assembly.
#pragma once

#include <string>
#include <vector>

#include "plait/status.hpp"
#include "topology/topology.h"

namespace plait::topo {

struct Cluster {
  std::vector<TopoSystem> systems;  // distinct host descriptions
  std::vector<int> hostSystem;      // per host: index into systems

  int hosts() const { return static_cast<int>(hostSystem.size()); }
  const TopoSystem& host(int h) const { return systems[hostSystem[h]]; }
};

// The most hosts a cluster file may describe (the graphs of a million hosts
// still assemble in seconds; more is a typo or an attack on memory).
inline constexpr int64_t kMaxClusterHosts = int64_t(1) << 20;

// `hosts` copies of one system.
Cluster replicateSystem(TopoSystem system, int hosts);

// The system as a communicator over some of its GPUs sees it (NCCL trims
// the GPUs a communicator does not use before its graph search): `ordinals`
// lists the GPUs kept (GPU ordinals of `system`, any order, no repeats);
// the others and the NVLinks that end at them are removed, everything else
// (CPUs, switches, NICs and their order) stays. InvalidArgument on an
// ordinal out of range or repeated.
Result<TopoSystem> keepGpus(const TopoSystem& system, const std::vector<int>& ordinals);

// Reads a cluster description. Either an NCCL <system> file, replicated
// `hosts` times (0 counts as 1), or a Plait <cluster> file listing hosts as
// <node file="host.xml" count="N"/> (paths relative to the cluster file;
// `hosts` must then be 0 or match the total). InvalidArgument / SystemError
// name the file at fault.
Result<Cluster> loadCluster(const std::string& path, int hosts);

struct ClusterGraphs {
  CommGraphs comm;                    // ranks = GPUs, host by host, GPU ordinal order inside
  std::vector<NodeGraphs> perSystem;  // per distinct system
  std::vector<PathTable> paths;       // per distinct system
};

// Searches each distinct system's graphs (NIC-terminated when there is more
// than one host) and joins channel c of every host into ring c; trees are the
// double binary tree over hosts with each host's chain in that channel's
// order. Channels: the fewest any host found. Uses NCCL_GRAPH_FILE /
// NCCL_GRAPH_DUMP_FILE like computeNodeGraphs. Errors: a host without GPUs
// (use buildHostGraphs) or a failed search.
Result<ClusterGraphs> computeClusterGraphs(const Cluster& cluster);

// Placements for `ranksPerHost` host ranks on every host, dealt round-robin
// over each host's NUMA nodes (rank r of host h is h * ranksPerHost + r): what
// a CPU-only job would report at init.
std::vector<RankPlacement> hostPlacements(const Cluster& cluster, int ranksPerHost);

}  // namespace plait::topo
