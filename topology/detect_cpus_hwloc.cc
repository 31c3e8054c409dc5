// detect_cpus_hwloc.cc — CPU/NUMA domains from hwloc (built when
// PLAIT_WITH_HWLOC is ON; detect_cpus_sysfs.cc otherwise).
#include <hwloc.h>

#include <cstdio>
#include <sys/utsname.h>

#include "base/log.h"
#include "topology/detect.h"

namespace plait::topo {

namespace {

// NCCL's cpuset text: 32-bit words, most significant first, comma separated.
std::string cpusetText(hwloc_const_bitmap_t set) {
  int last = hwloc_bitmap_last(set);
  if (last < 0) return "";
  int words = last / 32 + 1;
  std::string out;
  for (int w = words - 1; w >= 0; --w) {
    unsigned long word = hwloc_bitmap_to_ith_ulong(set, static_cast<unsigned>(w * 32 / (8 * sizeof(unsigned long))));
    unsigned shift = static_cast<unsigned>((w * 32) % (8 * sizeof(unsigned long)));
    char buf[16];
    std::snprintf(buf, sizeof buf, "%08lx", (word >> shift) & 0xffffffffUL);
    out += buf;
    if (w) out += ",";
  }
  return out;
}

std::string info(hwloc_obj_t obj, const char* name) {
  for (hwloc_obj_t o = obj; o; o = o->parent) {
    if (const char* v = hwloc_obj_get_info_by_name(o, name)) return v;
  }
  return "";
}

}  // namespace

const char* cpuDetectionSource() { return "hwloc " HWLOC_VERSION; }

std::vector<DetectedCpu> detectCpus() {
  std::vector<DetectedCpu> cpus;
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) return cpus;
  if (hwloc_topology_load(topo) != 0) {
    hwloc_topology_destroy(topo);
    return cpus;
  }
  struct utsname uts {};
  uname(&uts);
  std::string arch = uts.machine;
  if (arch == "aarch64") arch = "arm64";
  if (arch == "ppc64le") arch = "ppc64";
  int n = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_NUMANODE);
  for (int i = 0; i < n; ++i) {
    hwloc_obj_t numa = hwloc_get_obj_by_type(topo, HWLOC_OBJ_NUMANODE, static_cast<unsigned>(i));
    DetectedCpu c;
    c.numaId = static_cast<int>(numa->os_index);
    c.affinity = cpusetText(numa->cpuset);
    c.arch = arch;
    hwloc_obj_t pkg = hwloc_get_next_obj_covering_cpuset_by_type(topo, numa->cpuset, HWLOC_OBJ_PACKAGE, nullptr);
    hwloc_obj_t at = pkg ? pkg : numa;
    c.vendor = info(at, "CPUVendor");
    c.familyId = std::atoi(info(at, "CPUFamilyNumber").c_str());
    c.modelId = std::atoi(info(at, "CPUModelNumber").c_str());
    cpus.push_back(std::move(c));
  }
  if (cpus.empty()) {
    DetectedCpu c;
    c.affinity = cpusetText(hwloc_topology_get_topology_cpuset(topo));
    c.arch = arch;
    cpus.push_back(c);
  }
  PLAIT_INFO(kGraph, "hwloc: %d NUMA node(s), %d package(s), %d core(s)", static_cast<int>(cpus.size()),
             hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE), hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE));
  hwloc_topology_destroy(topo);
  return cpus;
}

}  // namespace plait::topo
