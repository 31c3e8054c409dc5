// detect.cc — the running host as NCCL topology XML: PCI paths and NICs from
// sysfs, CPUs from detect_cpus_*.cc, GPUs from nvml.cc.
#include "topology/detect.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>

#include "base/log.h"

namespace plait::topo {

namespace fs = std::filesystem;

namespace {

std::string readLine(const fs::path& path) {
  std::ifstream in(path);
  std::string line;
  if (in) std::getline(in, line);
  while (!line.empty() && (line.back() == '\n' || line.back() == ' ')) line.pop_back();
  return line;
}

bool isBusId(const std::string& s) {
  static const std::regex kBusId("[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\\.[0-9a-fA-F]");
  return std::regex_match(s, kBusId);
}

std::string lowerBusId(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Bus ids from the root down to the device that owns `sysfsDevice` (a path
// under /sys/devices, possibly a non-PCI child such as virtio2).
std::vector<std::string> pciChain(const fs::path& sysfsDevice) {
  std::error_code ec;
  fs::path real = fs::canonical(sysfsDevice, ec);
  std::vector<std::string> chain;
  if (ec) return chain;
  for (const fs::path& part : real) {
    if (isBusId(part.string())) chain.push_back(lowerBusId(part.string()));
  }
  return chain;
}

void setPciAttrs(XmlNode& pci, const std::string& busId) {
  fs::path dev = fs::path("/sys/bus/pci/devices") / busId;
  pci.initAttr("busid", busId);
  pci.initAttr("class", readLine(dev / "class"));
  pci.initAttr("vendor", readLine(dev / "vendor"));
  pci.initAttr("device", readLine(dev / "device"));
  pci.initAttr("subsystem_vendor", readLine(dev / "subsystem_vendor"));
  pci.initAttr("subsystem_device", readLine(dev / "subsystem_device"));
  pci.initAttr("link_speed", readLine(dev / "max_link_speed"));
  pci.initAttr("link_width", readLine(dev / "max_link_width"));
}

int numaOf(const std::string& busId) {
  std::string text = readLine(fs::path("/sys/bus/pci/devices") / busId / "numa_node");
  int numa = text.empty() ? -1 : std::atoi(text.c_str());
  return numa;
}

// The <cpu> for a NUMA id (the first one when unknown).
XmlNode& cpuFor(XmlNode& system, int numa) {
  for (XmlNode& c : system.children) {
    if (c.name == "cpu" && c.intAttr("numaid", -1) == numa) return c;
  }
  for (XmlNode& c : system.children) {
    if (c.name == "cpu") return c;
  }
  return system.addChild("cpu");
}

// Finds or creates the nested <pci> elements for a bus-id chain.
XmlNode& pciNode(XmlNode& cpu, const std::vector<std::string>& chain) {
  XmlNode* parent = &cpu;
  for (const std::string& busId : chain) {
    XmlNode* found = nullptr;
    for (XmlNode& c : parent->children) {
      if (c.name == "pci" && c.attrOr("busid", "") == busId) found = &c;
    }
    if (!found) {
      found = &parent->addChild("pci");
      setPciAttrs(*found, busId);
    }
    parent = found;
  }
  return *parent;
}

struct DetectedNet {
  std::string name;
  std::vector<std::string> chain;
  int64_t speedMbps = -1;
  int port = 0;
  std::string guid;
  int gdr = 0;
  int maxConn = 65536;
};

std::vector<DetectedNet> detectNets() {
  std::vector<DetectedNet> nets;
  std::error_code ec;
  for (const auto& ib : fs::directory_iterator("/sys/class/infiniband", ec)) {
    for (const auto& port : fs::directory_iterator(ib.path() / "ports", ec)) {
      DetectedNet n;
      n.name = ib.path().filename().string();
      n.chain = pciChain(ib.path() / "device");
      n.port = std::atoi(port.path().filename().c_str());
      // "100 Gb/sec (4X EDR)"
      n.speedMbps = static_cast<int64_t>(std::atof(readLine(port.path() / "rate").c_str()) * 1000);
      n.guid = "0x" + readLine(ib.path() / "node_guid");
      n.guid.erase(std::remove(n.guid.begin(), n.guid.end(), ':'), n.guid.end());
      n.gdr = fs::exists("/sys/module/nvidia_peermem") ? 1 : 0;
      n.maxConn = 131072;
      if (!n.chain.empty()) nets.push_back(std::move(n));
    }
  }
  std::vector<std::string> ifnames;
  for (const auto& e : fs::directory_iterator("/sys/class/net", ec)) ifnames.push_back(e.path().filename().string());
  std::sort(ifnames.begin(), ifnames.end());
  for (const std::string& name : ifnames) {
    fs::path dev = fs::path("/sys/class/net") / name / "device";
    if (!fs::exists(dev)) continue;  // lo, bridges, ifb, veth: no hardware behind them
    if (fs::exists(fs::path("/sys/class/net") / name / "device" / "infiniband")) continue;  // IPoIB: counted above
    DetectedNet n;
    n.name = name;
    n.chain = pciChain(dev);
    std::string speed = readLine(fs::path("/sys/class/net") / name / "speed");
    n.speedMbps = speed.empty() ? -1 : std::atoll(speed.c_str());
    if (!n.chain.empty()) nets.push_back(std::move(n));
  }
  return nets;
}

void addCpus(XmlNode& system) {
  for (const DetectedCpu& c : detectCpus()) {
    XmlNode& cpu = system.addChild("cpu");
    cpu.setAttr("numaid", std::to_string(c.numaId));
    cpu.setAttr("affinity", c.affinity);
    cpu.setAttr("arch", c.arch);
    cpu.setAttr("vendor", c.vendor);
    cpu.setAttr("familyid", std::to_string(c.familyId));
    cpu.setAttr("modelid", std::to_string(c.modelId));
  }
}

void addGpus(XmlNode& system) {
  for (const DetectedGpu& g : detectNvmlGpus()) {
    std::vector<std::string> chain = pciChain(fs::path("/sys/bus/pci/devices") / g.busId);
    if (chain.empty()) chain.push_back(g.busId);
    XmlNode& pci = pciNode(cpuFor(system, numaOf(g.busId)), chain);
    XmlNode& gpu = pci.child("gpu") ? *pci.child("gpu") : pci.addChild("gpu");
    gpu.initAttr("dev", std::to_string(g.dev));
    gpu.initAttr("sm", std::to_string(g.sm));
    gpu.initAttr("rank", std::to_string(g.dev));
    gpu.initAttr("gdr", std::to_string(g.gdr));
    for (const DetectedNvlink& l : g.nvlinks) {
      XmlNode& nv = gpu.addChild("nvlink");
      nv.setAttr("target", l.target);
      nv.setAttr("count", std::to_string(l.count));
      nv.setAttr("tclass", l.tclass);
    }
  }
}

}  // namespace

Result<XmlNode> detectSystemXml() {
  XmlNode system;
  system.name = "system";
  system.setAttr("version", "1");
  addCpus(system);
  addGpus(system);
  int dev = 0;
  for (const DetectedNet& n : detectNets()) {
    XmlNode& pci = pciNode(cpuFor(system, numaOf(n.chain.back())), n.chain);
    XmlNode& nic = pci.child("nic") ? *pci.child("nic") : pci.addChild("nic");
    XmlNode& net = nic.addChild("net");
    net.setAttr("name", n.name);
    net.setAttr("dev", std::to_string(dev++));
    net.setAttr("speed", std::to_string(n.speedMbps));
    net.setAttr("port", std::to_string(n.port));
    net.setAttr("latency", "0.000000");
    net.setAttr("guid", n.guid.empty() ? "0x" + std::to_string(dev - 1) : n.guid);
    net.setAttr("maxconn", std::to_string(n.maxConn));
    net.setAttr("gdr", std::to_string(n.gdr));
  }
  PLAIT_INFO(kGraph, "Topology detected with %s CPUs, sysfs PCI/NICs (%d NET devices)", cpuDetectionSource(), dev);
  return system;
}

namespace {

// The key that identifies an element among its siblings.
std::string keyOf(const XmlNode& n) {
  if (n.name == "cpu") return "cpu/" + n.attrOr("numaid", "");
  if (n.name == "pci") return "pci/" + lowerBusId(n.attrOr("busid", ""));
  if (n.name == "net") return "net/" + n.attrOr("name", "");
  if (n.name == "nvlink") return "nvlink/" + lowerBusId(n.attrOr("target", "")) + n.attrOr("tclass", "");
  return n.name;  // gpu, nic, c2c: one per parent
}

}  // namespace

namespace {

// The GPU and NET dev numbers a document uses: graph files name devices by
// them, so two devices may not share one (topology/system.cc refuses it).
struct DevNumbers {
  std::set<int64_t> gpu, net;
  std::set<int64_t>* of(const XmlNode& n) { return n.name == "gpu" ? &gpu : n.name == "net" ? &net : nullptr; }
  void collect(const XmlNode& n) {
    if (std::set<int64_t>* used = of(n); used && n.hasAttr("dev")) used->insert(n.intAttr("dev", -1));
    for (const XmlNode& c : n.children) collect(c);
  }
  // A detected device appended beside the file's: the next free number when
  // its own is taken (the file's devices keep theirs).
  void renumber(XmlNode& n) {
    if (std::set<int64_t>* used = of(n); used && n.hasAttr("dev")) {
      int64_t dev = n.intAttr("dev", -1);
      if (used->count(dev)) {
        dev = 0;
        while (used->count(dev)) ++dev;
        n.setAttr("dev", std::to_string(dev));
      }
      used->insert(dev);
    }
    for (XmlNode& c : n.children) renumber(c);
  }
};

void mergeInto(XmlNode& user, const XmlNode& detected, DevNumbers& devs) {
  for (const auto& [k, v] : detected.attrs) user.initAttr(k, v);
  for (const XmlNode& d : detected.children) {
    std::string key = keyOf(d);
    XmlNode* match = nullptr;
    for (XmlNode& u : user.children) {
      if (keyOf(u) == key) match = &u;
    }
    if (match) {
      mergeInto(*match, d, devs);
    } else {
      user.children.push_back(d);
      devs.renumber(user.children.back());
    }
  }
}

}  // namespace

void mergeSystemXml(XmlNode& user, const XmlNode& detected) {
  DevNumbers devs;
  devs.collect(user);
  mergeInto(user, detected, devs);
}

}  // namespace plait::topo
