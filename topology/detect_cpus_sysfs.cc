// detect_cpus_sysfs.cc — CPU/NUMA domains from /sys/devices/system/node and
// /proc/cpuinfo, for builds without hwloc.
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sys/utsname.h>

#include "base/log.h"
#include "topology/detect.h"

namespace plait::topo {

namespace fs = std::filesystem;

namespace {

// The value of the first "key : value" line of /proc/cpuinfo with this key.
std::string cpuinfo(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string k = line.substr(0, colon);
    while (!k.empty() && (k.back() == ' ' || k.back() == '\t')) k.pop_back();
    if (k == key) return colon + 2 <= line.size() ? line.substr(colon + 2) : "";
  }
  return "";
}

}  // namespace

const char* cpuDetectionSource() { return "sysfs"; }

std::vector<DetectedCpu> detectCpus() {
  struct utsname uts {};
  uname(&uts);
  DetectedCpu proto;
  proto.arch = uts.machine;
  if (proto.arch == "aarch64") proto.arch = "arm64";
  if (proto.arch == "ppc64le") proto.arch = "ppc64";
  proto.vendor = cpuinfo("vendor_id");
  proto.familyId = std::atoi(cpuinfo("cpu family").c_str());
  proto.modelId = std::atoi(cpuinfo("model").c_str());
  std::vector<DetectedCpu> cpus;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/sys/devices/system/node", ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind("node", 0) != 0 || name.size() == 4 || !std::isdigit(static_cast<unsigned char>(name[4]))) continue;
    DetectedCpu c = proto;
    c.numaId = std::atoi(name.c_str() + 4);
    std::ifstream in(e.path() / "cpumap");  // already NCCL's cpuset text
    std::getline(in, c.affinity);
    cpus.push_back(std::move(c));
  }
  std::sort(cpus.begin(), cpus.end(), [](const DetectedCpu& a, const DetectedCpu& b) { return a.numaId < b.numaId; });
  if (cpus.empty()) cpus.push_back(proto);
  PLAIT_INFO(kGraph, "sysfs: %d NUMA node(s)", static_cast<int>(cpus.size()));
  return cpus;
}

}  // namespace plait::topo
