// detect.h — describing the running host in NCCL's topology XML.
//
// Sources: CPU packages, NUMA nodes and their CPU sets from hwloc (or, when
// built without hwloc, from /sys/devices/system/node and /proc/cpuinfo); the
// PCI path of each device from sysfs; NICs from /sys/class/net (interfaces
// backed by a PCI device, with their speed) and /sys/class/infiniband; GPUs
// and NVLinks from NVML, loaded at run time with dlopen("libnvidia-ml.so.1")
// (absent: no GPUs, said once at INFO). Detection never fails because a
// source is missing; it fails only when nothing at all can be read.
#pragma once

#include <string>
#include <vector>

#include "plait/status.hpp"
#include "topology/xml.h"

namespace plait::topo {

// A CPU/NUMA domain as detection sees it.
struct DetectedCpu {
  int numaId = 0;
  std::string affinity;  // NCCL cpuset text
  std::string arch, vendor;
  int familyId = 0, modelId = 0;
};

struct DetectedNvlink {
  std::string target;  // remote bus id
  int count = 0;
  std::string tclass;  // remote PCI class: 0x030200 GPU, 0x068000 NVSwitch, 0x068001 CPU
};

struct DetectedGpu {
  std::string busId;
  int dev = 0;
  int sm = 0;
  int gdr = 0;
  std::vector<DetectedNvlink> nvlinks;
};

// CPUs/NUMA domains (hwloc or sysfs, whichever this build has). Never empty:
// a machine without NUMA information is one domain with every CPU.
std::vector<DetectedCpu> detectCpus();
// Which CPU source this build uses: "hwloc 2.9.0" or "sysfs".
const char* cpuDetectionSource();

// GPUs through NVML. Empty, with one INFO line, when NVML is not there.
std::vector<DetectedGpu> detectNvmlGpus();

// The whole host as a <system> document.
Result<XmlNode> detectSystemXml();

// Completes `user` (an NCCL_TOPO_FILE) with `detected`: elements are matched
// by key (cpu numaid, pci busid, net name, gpu and nic by parent); missing
// elements are appended (a detected GPU or NET whose dev the file already
// uses gets the next free one), missing attributes filled; the user's values win.
void mergeSystemXml(XmlNode& user, const XmlNode& detected);

}  // namespace plait::topo
