// host.h — plait-sim for host ranks (CPU memory): what Plait's host path
// would take on hosts like this one, to tie the simulator to runs this
// project can measure (perf/sim/validate.sh).
//
// The model is the library's own: the rings topo::buildHostGraphs builds,
// the channel count the communicator picks (cores / local ranks, 1..4), the
// host tuner's plan (core/tuner.h: one-shot or ring, channels per size) and
// its host costs (core/cost_model.h kHostCosts, or a machine's calibration:
// core/host_costs.h). The flow part: a channel
// is one thread per rank, placed round-robin on the host's cores; a ring
// channel is one flow through every thread it runs on (each moves the
// channel's bytes once: a fused receive-reduce-send) at most
// costs.ringBytesPerUs per core, threads on one core sharing it, and
// through each host's NIC where the ring leaves and enters it.
// Latency: the plan's call cost plus, per step, a hand-off (costs.hopUs
// while every thread has a core of its own, `wakeUs` when threads outnumber
// cores: a hand-off then waits for a wake-up) or, across hosts, `netHopUs`.
#pragma once

#include <cstdint>

#include "core/cost_model.h"
#include "core/task.h"
#include "plait/status.hpp"
#include "sim/collective.h"

namespace plait::sim {

struct HostRunSpec {
  int hosts = 1;           // hosts alike, joined by one switch
  int ranksPerHost = 2;
  int cores = 2;           // CPUs per host the ranks share
  double nicGBs = 0;       // each host's link to the switch, GB/s per direction (needed when hosts > 1)
  double netHopUs = 30;    // one step across the network (the socket transport, its proxy)
  double wakeUs = 10;      // one step when threads outnumber cores
  // Memory: when the ranks' buffers (2 × bytes per rank) outgrow `cacheBytes`,
  // every ring step also copies its bytes through the host's DRAM, shared by
  // all its ranks at `memGBs` (a memcpy's rate at that size: perf/memcpy).
  // 0: not modelled (every size in cache).
  double memGBs = 0;
  double cacheBytes = 0;
  HostCosts costs = kHostCosts;  // the tuner's and the cores' figures (plait-sim --host-costs FILE)
};

// AllReduce, AllGather, ReduceScatter, Broadcast or Reduce on host ranks.
// InvalidArgument names a bad spec or collective.
Result<CollectiveResult> simulateHostRanks(const HostRunSpec& spec, CollType coll, uint64_t bytes);

}  // namespace plait::sim
