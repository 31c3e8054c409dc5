// comm.h — a communicator of the simulated cluster: its GPUs, and the rings
// and trees Plait would build for it.
//
// NCCL searches a communicator's graphs on its own GPUs only (the others
// are trimmed from the system first), so a data-parallel group that holds
// GPU 3 of every host gets rings through GPU 3's NIC, and a tensor-parallel
// group inside a host gets NVLink rings. makeComm does the same with the
// topology layer: each of the communicator's hosts is trimmed to its GPUs
// (topo::keepGpus), then computeClusterGraphs searches and assembles.
#pragma once

#include <vector>

#include "plait/status.hpp"
#include "sim/fabric.h"
#include "topology/cluster.h"

namespace plait::sim {

struct SimComm {
  std::vector<GpuRef> members;  // GPUs in graph rank order (host by host, as the search numbers them)
  topo::Cluster sub;            // the communicator's hosts, trimmed to its GPUs
  topo::ClusterGraphs graphs;   // rings and trees over `members`' indices
  std::vector<int> hosts;       // sub host -> cluster host
  int nranks() const { return static_cast<int>(members.size()); }
  // NET ordinals channel c enters and leaves sub host h by (0 when the
  // communicator has one host).
  int netIn(int h, int c) const;
  int netOut(int h, int c) const;
};

// A communicator over `gpus` (any order, no repeats). Errors: a repeated or
// unknown GPU, or a failed search.
Result<SimComm> makeComm(const topo::Cluster& cluster, const std::vector<GpuRef>& gpus);

}  // namespace plait::sim
