// flows.h — links shared between flows: max-min fair rates, and an
// event-driven flow-level simulation over them.
//
// A flow is a stream of bytes that crosses a set of links, each `weight`
// times per byte (a ring channel is one flow over every hop of the ring: its
// pipeline moves at one rate, and a link two of its hops share carries that
// rate twice). Max-min fairness: rates rise together until a link fills or a
// flow reaches its ceiling; the flows through a full link stop there and the
// others go on rising (progressive filling). Flow-level means no packets: a
// flow holds its rate until the set of active flows changes.
//
// Pure functions: thread-safe.
#pragma once

#include <vector>

namespace plait::sim {

struct FlowUse {
  int link = 0;
  double weight = 1;  // bytes on this link per byte of the flow
};

struct Flow {
  std::vector<FlowUse> uses;
  double ceilingGBs = 0;  // the most this flow moves alone (0: no ceiling)
};

// Each flow's max-min fair rate in GB/s over links of `capacityGBs`. A flow
// with neither links nor ceiling gets +infinity.
std::vector<double> maxMinRates(const std::vector<double>& capacityGBs, const std::vector<Flow>& flows);

struct TimedFlow {
  Flow flow;
  double bytes = 0;
  double startUs = 0;
};

// Runs every flow from its start until its bytes are through, rates
// recomputed whenever a flow starts or ends. Returns each flow's finish time
// in microseconds.
std::vector<double> simulateFlows(const std::vector<double>& capacityGBs, const std::vector<TimedFlow>& flows);

// Merges repeated links of `uses` into one entry each (weights added), sorted
// by link.
void mergeUses(std::vector<FlowUse>* uses);

}  // namespace plait::sim
