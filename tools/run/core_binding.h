// core_binding.h — which CPU each local rank is bound to (plait-run
// --bind-to core, the default, as mpirun binds to cores for small jobs).
//
// A rank bound to a core of its own keeps that core when another process
// competes for the machine: the scheduler cannot stack two ranks on one CPU
// (a spinning rank would then hold the CPU its peer needs), and Plait, seeing
// every local rank on CPUs of its own (src/base/cpu_mask.h), waits by
// spinning instead of yielding the core to the competitor.
#pragma once

#include <string>
#include <vector>

namespace plait::run {

struct CpuInfo {
  int cpu = 0;
  int package = 0;  // physical_package_id
  int core = 0;     // core_id within the package
};

// The CPUs of `allowed` ordered for binding: one hardware thread of every
// core first (package by package, core by core), then the second threads,
// and so on. Pure: `allowed` carries the topology.
std::vector<int> bindingOrder(std::vector<CpuInfo> allowed);

// One CPU per rank from this process's affinity and the topology under
// /sys/devices/system/cpu, or an empty plan (no binding) when there are more
// ranks than CPUs; `why` says which and is meant for --report-bindings.
std::vector<int> planCoreBinding(int nranks, std::string* why);

}  // namespace plait::run
