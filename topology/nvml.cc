// nvml.cc — GPUs and NVLinks through NVML, loaded with dlopen so that Plait
// has no link-time dependency on the driver: a machine without it simply has
// no GPUs. Only the few NVML entry points below are used; their types are
// declared here as NVML's ABI defines them.
#include <dlfcn.h>

#include <cstdio>
#include <map>
#include <string>

#include "base/log.h"
#include "topology/detect.h"

namespace plait::topo {

namespace {

using NvmlDevice = void*;
constexpr int kNvmlSuccess = 0;
constexpr unsigned kMaxNvlinks = 18;

// nvmlPciInfo_t
struct NvmlPciInfo {
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};

struct Nvml {
  void* handle = nullptr;
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  int (*count)(unsigned*) = nullptr;
  int (*byIndex)(unsigned, NvmlDevice*) = nullptr;
  int (*pciInfo)(NvmlDevice, NvmlPciInfo*) = nullptr;
  int (*computeCap)(NvmlDevice, int*, int*) = nullptr;
  int (*linkState)(NvmlDevice, unsigned, int*) = nullptr;
  int (*remotePci)(NvmlDevice, unsigned, NvmlPciInfo*) = nullptr;
  int (*remoteType)(NvmlDevice, unsigned, int*) = nullptr;  // optional (NVML 11.x+)

  template <typename F>
  bool bind(F& fn, const char* name) {
    fn = reinterpret_cast<F>(dlsym(handle, name));
    return fn != nullptr;
  }
  bool load() {
    handle = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!handle) return false;
    bool ok = bind(init, "nvmlInit_v2") && bind(shutdown, "nvmlShutdown") && bind(count, "nvmlDeviceGetCount_v2") &&
              bind(byIndex, "nvmlDeviceGetHandleByIndex_v2") && bind(pciInfo, "nvmlDeviceGetPciInfo_v3") &&
              bind(computeCap, "nvmlDeviceGetCudaComputeCapability") && bind(linkState, "nvmlDeviceGetNvLinkState") &&
              bind(remotePci, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
    bind(remoteType, "nvmlDeviceGetNvLinkRemoteDeviceType");
    return ok;
  }
  ~Nvml() {
    if (handle) dlclose(handle);
  }
};

// NVML prints bus ids as "00000000:1D:00.0"; NCCL's form is "0000:1d:00.0".
std::string normalizeBusId(const char* raw) {
  std::string s(raw);
  if (s.size() > 12) s = s.substr(s.size() - 12);
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::vector<DetectedGpu> detectNvmlGpus() {
  std::vector<DetectedGpu> gpus;
  Nvml nvml;
  if (!nvml.load()) {
    PLAIT_INFO(kInit, "NVML (libnvidia-ml.so.1) not available: no GPUs detected");
    return gpus;
  }
  if (nvml.init() != kNvmlSuccess) {
    PLAIT_INFO(kInit, "NVML present but nvmlInit failed: no GPUs detected");
    return gpus;
  }
  unsigned n = 0;
  if (nvml.count(&n) != kNvmlSuccess) n = 0;
  std::vector<NvmlDevice> handles(n, nullptr);
  for (unsigned i = 0; i < n; ++i) {
    DetectedGpu g;
    NvmlPciInfo pci{};
    if (nvml.byIndex(i, &handles[i]) != kNvmlSuccess || nvml.pciInfo(handles[i], &pci) != kNvmlSuccess) continue;
    g.busId = normalizeBusId(pci.busId);
    g.dev = static_cast<int>(i);
    int major = 0, minor = 0;
    if (nvml.computeCap(handles[i], &major, &minor) == kNvmlSuccess) g.sm = major * 10 + minor;
    std::map<std::string, DetectedNvlink> byTarget;
    for (unsigned l = 0; l < kMaxNvlinks; ++l) {
      int active = 0;
      NvmlPciInfo remote{};
      if (nvml.linkState(handles[i], l, &active) != kNvmlSuccess || !active) continue;
      if (nvml.remotePci(handles[i], l, &remote) != kNvmlSuccess) continue;
      DetectedNvlink& link = byTarget[normalizeBusId(remote.busId)];
      link.target = normalizeBusId(remote.busId);
      ++link.count;
      int type = -1;  // 0 GPU, 1 IBM NPU (a CPU), 2 NVSwitch
      if (nvml.remoteType) nvml.remoteType(handles[i], l, &type);
      link.tclass = type == 2 ? "0x068000" : type == 1 ? "0x068001" : "0x030200";
    }
    for (auto& [target, link] : byTarget) g.nvlinks.push_back(link);
    gpus.push_back(std::move(g));
  }
  // Without the remote-type query, a link to a bus id that is no GPU of this
  // host goes to an NVSwitch.
  for (DetectedGpu& g : gpus) {
    for (DetectedNvlink& l : g.nvlinks) {
      bool isGpu = false;
      for (const DetectedGpu& other : gpus) isGpu |= other.busId == l.target;
      if (l.tclass == "0x030200" && !isGpu) l.tclass = "0x068000";
    }
  }
  nvml.shutdown();
  PLAIT_INFO(kInit, "NVML: %zu GPU(s)", gpus.size());
  return gpus;
}

}  // namespace plait::topo
