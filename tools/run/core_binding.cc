#include "core_binding.h"

#include <sched.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <tuple>

namespace plait::run {

namespace {

int readTopologyInt(int cpu, const char* name, int fallback) {
  std::ifstream f("/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/" + name);
  int v = fallback;
  if (!(f >> v)) return fallback;
  return v;
}

}  // namespace

std::vector<int> bindingOrder(std::vector<CpuInfo> allowed) {
  // A CPU's thread index: how many CPUs of the same core precede it.
  std::sort(allowed.begin(), allowed.end(), [](const CpuInfo& a, const CpuInfo& b) { return a.cpu < b.cpu; });
  std::map<std::pair<int, int>, int> seen;
  std::vector<std::tuple<int, int, int, int>> keyed;  // thread, package, core, cpu
  for (const CpuInfo& c : allowed) keyed.emplace_back(seen[{c.package, c.core}]++, c.package, c.core, c.cpu);
  std::sort(keyed.begin(), keyed.end());
  std::vector<int> order;
  for (const auto& k : keyed) order.push_back(std::get<3>(k));
  return order;
}

std::vector<int> planCoreBinding(int nranks, std::string* why) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) {
    *why = "not bound: the launcher's CPU affinity cannot be read";
    return {};
  }
  std::vector<CpuInfo> allowed;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    allowed.push_back(
        CpuInfo{cpu, readTopologyInt(cpu, "physical_package_id", 0), readTopologyInt(cpu, "core_id", cpu)});
  }
  if (nranks > static_cast<int>(allowed.size())) {
    *why = "not bound: " + std::to_string(nranks) + " ranks on " + std::to_string(allowed.size()) + " CPUs";
    return {};
  }
  std::vector<int> order = bindingOrder(std::move(allowed));
  order.resize(static_cast<size_t>(nranks));
  *why = "bound one CPU per rank";
  return order;
}

}  // namespace plait::run
