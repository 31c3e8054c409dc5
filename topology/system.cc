// system.cc — TopoSystem from NCCL's topology XML.
//
// The build mirrors NCCL's reading of the schema: CPUs first with their PCI
// subtrees (GPUs, NICs and switches), then NVLinks, C2C links and extra PCI
// links in a second pass (their targets must exist first), then every pair of
// CPUs joined by the inter-socket link.
#include "topology/system.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <sstream>

namespace plait::topo {

namespace {

constexpr const char* kPciBridgeClass = "0x060400";
constexpr const char* kNvSwitchClass = "0x068000";
constexpr const char* kCpuClass = "0x068001";
// Bounds for numbers read from a topology file: device ordinals and ids, and
// link speeds in Mb/s (a terabit NIC is 10^6).
constexpr int64_t kMaxId = int64_t(1) << 20;
constexpr int64_t kMaxMbps = int64_t(1) << 40;

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

const char* nodeTypeName(NodeType type) {
  static const char* kNames[] = {"GPU", "PCI", "NVS", "CPU", "NIC", "NET"};
  return kNames[static_cast<int>(type)];
}

const char* linkTypeName(LinkType type) {
  switch (type) {
    case LinkType::kLoc: return "LOC";
    case LinkType::kNvl: return "NVL";
    case LinkType::kC2c: return "C2C";
    case LinkType::kPci: return "PCI";
    case LinkType::kSys: return "SYS";
    case LinkType::kNet: return "NET";
  }
  return "?";
}

const char* pathTypeName(PathType type) {
  static const char* kNames[] = {"LOC", "NVL", "NVB", "C2C", "PIX", "PXB",
                                 "P2C", "PXN", "PHB", "SYS", "NET", "DIS"};
  return kNames[static_cast<int>(type)];
}

std::optional<PathType> parsePathType(std::string_view text) {
  std::string upper(text);
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  for (int t = 0; t <= static_cast<int>(PathType::kDis); ++t) {
    if (upper == pathTypeName(static_cast<PathType>(t))) return static_cast<PathType>(t);
  }
  return std::nullopt;
}

double nvlinkBw(int sm) {
  if (sm >= 100) return 40.1;
  if (sm >= 90) return 20.6;
  if (sm >= 86) return 12.0;
  if (sm >= 70) return 20.0;
  if (sm >= 60) return 18.0;
  return 20.0;
}

double pciBw(std::string_view linkSpeed, int width) {
  // Per-lane rate in units of 100 Mb/s after encoding overhead, by generation.
  double gts = std::strtod(std::string(linkSpeed).c_str(), nullptr);
  double perLane = 60;  // unknown: Gen3
  if (gts > 0) {
    if (gts < 3) perLane = 15;
    else if (gts < 6) perLane = 30;
    else if (gts < 10) perLane = 60;
    else if (gts < 20) perLane = 120;
    else if (gts < 40) perLane = 240;
    else perLane = 480;
  }
  if (width <= 0) width = 16;
  return width * perLane / 80.0;
}

std::string TopoNode::label() const {
  switch (type) {
    case NodeType::kGpu: return "GPU" + std::to_string(gpu.rank >= 0 ? gpu.rank : gpu.dev);
    case NodeType::kCpu: return "CPU" + std::to_string(cpu.numaId);
    case NodeType::kNet: return "NET" + std::to_string(net.dev);
    case NodeType::kNic: return "NIC " + busId;
    case NodeType::kNvs: return "NVS";
    case NodeType::kPci: return "PCI " + busId;
  }
  return "?";
}

int TopoSystem::findLink(int from, int to) const {
  for (int id : nodes[from].links) {
    if (links[id].to == to) return id;
  }
  return -1;
}

double TopoSystem::outBw(int node, LinkType type) const {
  double sum = 0;
  for (int id : nodes[node].links) {
    if (links[id].type == type) sum += links[id].bw;
  }
  return sum;
}

namespace {

// Accumulates nodes and links while walking the document.
class SystemBuilder {
 public:
  Result<TopoSystem> build(const XmlNode& root);

 private:
  int addNode(NodeType type) {
    sys_.nodes.emplace_back();
    sys_.nodes.back().type = type;
    return static_cast<int>(sys_.nodes.size()) - 1;
  }
  // Adds bandwidth to an existing from->to link of the same type (NVLinks
  // declared several times aggregate), or creates it.
  void connect(int from, int to, LinkType type, double bw);
  Status addCpu(const XmlNode& xml);
  Status addPci(const XmlNode& xml, int parent);
  Result<int> addNic(const XmlNode& xmlNic, int parent, double bw);
  // Registers a GPU / PCI / NIC node under its bus id; a bus id seen twice is an error.
  Status claimBusId(const std::string& busId, int node);
  Status addSecondPass(const XmlNode& xml, int gpu, int cpu);
  void connectCpus();
  void finish();

  // Registers a GPU's or NET's `dev`; one seen twice is an error: graph files
  // (graph_xml.h) name devices by it, so a duplicate would make them mean
  // another device than the one written.
  Status claimDev(std::set<int64_t>& seen, const char* kind, int64_t dev);

  TopoSystem sys_;
  std::map<std::string, int> byBusId_;  // GPU / PCI / NIC node by bus id
  std::set<int64_t> gpuDevs_, netDevs_;
  int nvs_ = -1;
};

Status SystemBuilder::claimBusId(const std::string& busId, int node) {
  if (!byBusId_.emplace(busId, node).second)
    return invalidArgument("bus id " + busId + " appears twice in the topology");
  return Status::ok();
}

Status SystemBuilder::claimDev(std::set<int64_t>& seen, const char* kind, int64_t dev) {
  if (!seen.insert(dev).second)
    return invalidArgument(std::string(kind) + " dev=" + std::to_string(dev) + " appears twice in the topology");
  return Status::ok();
}

void SystemBuilder::connect(int from, int to, LinkType type, double bw) {
  for (int id : sys_.nodes[from].links) {
    TopoLink& l = sys_.links[id];
    if (l.to == to && l.type == type) {
      l.bw += bw;
      return;
    }
  }
  sys_.links.push_back(TopoLink{type, from, to, bw});
  sys_.nodes[from].links.push_back(static_cast<int>(sys_.links.size()) - 1);
}

Status SystemBuilder::addCpu(const XmlNode& xml) {
  int cpu = addNode(NodeType::kCpu);
  CpuInfo& info = sys_.nodes[cpu].cpu;
  PLAIT_ASSIGN_OR_RETURN(int64_t numa, xml.intAttrIn("numaid", sys_.count(NodeType::kCpu), -1, kMaxId));
  PLAIT_ASSIGN_OR_RETURN(int64_t family, xml.intAttrIn("familyid", 0, 0, INT32_MAX));
  PLAIT_ASSIGN_OR_RETURN(int64_t model, xml.intAttrIn("modelid", 0, 0, INT32_MAX));
  info.numaId = static_cast<int>(numa);
  info.arch = xml.attrOr("arch", "");
  info.vendor = xml.attrOr("vendor", "");
  info.familyId = static_cast<int>(family);
  info.modelId = static_cast<int>(model);
  info.affinity = xml.attrOr("affinity", "");
  sys_.byType[static_cast<int>(NodeType::kCpu)].push_back(cpu);
  for (const XmlNode& c : xml.children) {
    if (c.name == "pci") {
      PLAIT_RETURN_IF_ERROR(addPci(c, cpu));
    } else if (c.name == "nic") {
      PLAIT_RETURN_IF_ERROR(addNic(c, cpu, kBwLoc).status());  // no PCI information: hangs off its CPU
    }
  }
  return Status::ok();
}

Result<int> SystemBuilder::addNic(const XmlNode& xmlNic, int parent, double bw) {
  int nic = addNode(NodeType::kNic);
  sys_.byType[static_cast<int>(NodeType::kNic)].push_back(nic);
  connect(nic, parent, LinkType::kPci, bw);
  connect(parent, nic, LinkType::kPci, bw);
  for (const XmlNode& xmlNet : xmlNic.children) {
    if (xmlNet.name != "net" || !xmlNet.hasAttr("dev")) continue;
    PLAIT_ASSIGN_OR_RETURN(int64_t dev, xmlNet.intAttrIn("dev", -1, 0, kMaxId));
    PLAIT_RETURN_IF_ERROR(claimDev(netDevs_, "<net>", dev));
    PLAIT_ASSIGN_OR_RETURN(int64_t mbps, xmlNet.intAttrIn("speed", 0, -1, kMaxMbps));
    PLAIT_ASSIGN_OR_RETURN(double latency, xmlNet.floatAttrIn("latency", 0, 0, 1e9));
    PLAIT_ASSIGN_OR_RETURN(int64_t port, xmlNet.intAttrIn("port", 0, 0, 65535));
    PLAIT_ASSIGN_OR_RETURN(int64_t maxConn, xmlNet.intAttrIn("maxconn", 32, 0, kMaxId));
    PLAIT_ASSIGN_OR_RETURN(int64_t gdr, xmlNet.intAttrIn("gdr", 0, 0, 1));
    PLAIT_ASSIGN_OR_RETURN(int64_t coll, xmlNet.intAttrIn("coll", 0, 0, 1));
    int net = addNode(NodeType::kNet);
    NetInfo& info = sys_.nodes[net].net;
    info.name = xmlNet.attrOr("name", "");
    info.dev = static_cast<int>(dev);
    if (mbps <= 0) mbps = 10000;  // NICs that report -1 count as 10 Gb/s
    info.bw = static_cast<double>(mbps) / 8000.0;
    info.latency = latency;
    info.port = static_cast<int>(port);
    info.guid = static_cast<uint64_t>(xmlNet.intAttr("guid", info.dev));  // an identifier: any 64 bits
    info.maxConn = static_cast<int>(maxConn);
    info.gdr = static_cast<int>(gdr);
    info.coll = static_cast<int>(coll);
    sys_.byType[static_cast<int>(NodeType::kNet)].push_back(net);
    connect(nic, net, LinkType::kNet, info.bw);
    connect(net, nic, LinkType::kNet, info.bw);
  }
  return nic;
}

Status SystemBuilder::addPci(const XmlNode& xml, int parent) {
  const std::string* busIdText = xml.attr("busid");
  if (!busIdText) return invalidArgument("<pci> element without busid");
  std::string busId = lower(*busIdText);
  std::string cls = lower(xml.attrOr("class", ""));
  PLAIT_ASSIGN_OR_RETURN(int64_t width, xml.intAttrIn("link_width", 0, 0, 1024));
  double bw = pciBw(xml.attrOr("link_speed", ""), static_cast<int>(width));
  int node = -1;
  if (const XmlNode* xmlGpu = xml.child("gpu")) {
    PLAIT_ASSIGN_OR_RETURN(int64_t dev, xmlGpu->intAttrIn("dev", sys_.count(NodeType::kGpu), 0, kMaxId));
    PLAIT_RETURN_IF_ERROR(claimDev(gpuDevs_, "<gpu>", dev));
    PLAIT_ASSIGN_OR_RETURN(int64_t rank, xmlGpu->intAttrIn("rank", dev, 0, INT32_MAX));
    PLAIT_ASSIGN_OR_RETURN(int64_t sm, xmlGpu->intAttrIn("sm", 0, 0, 10000));
    PLAIT_ASSIGN_OR_RETURN(int64_t gdr, xmlGpu->intAttrIn("gdr", 0, 0, 1));
    node = addNode(NodeType::kGpu);
    GpuInfo& g = sys_.nodes[node].gpu;
    g.dev = static_cast<int>(dev);
    g.rank = static_cast<int>(rank);
    g.sm = static_cast<int>(sm);
    g.gdr = static_cast<int>(gdr);
    sys_.byType[static_cast<int>(NodeType::kGpu)].push_back(node);
  } else if (const XmlNode* xmlNic = xml.child("nic")) {
    PLAIT_ASSIGN_OR_RETURN(node, addNic(*xmlNic, parent, bw));
    sys_.nodes[node].busId = busId;
    return claimBusId(busId, node);
  } else if (cls.rfind(kPciBridgeClass, 0) == 0 || !xml.children.empty()) {
    node = addNode(NodeType::kPci);
    sys_.byType[static_cast<int>(NodeType::kPci)].push_back(node);
  } else {
    return Status::ok();  // an endpoint NCCL's model has no use for
  }
  uint64_t pciDevice = 0;
  for (const char* key : {"vendor", "device", "subsystem_vendor", "subsystem_device"}) {
    PLAIT_ASSIGN_OR_RETURN(int64_t id, xml.intAttrIn(key, 0, 0, 0xffff));
    pciDevice = (pciDevice << 16) | static_cast<uint64_t>(id);
  }
  TopoNode& n = sys_.nodes[node];
  n.busId = busId;
  n.pciDevice = pciDevice;
  PLAIT_RETURN_IF_ERROR(claimBusId(busId, node));
  connect(node, parent, LinkType::kPci, bw);
  connect(parent, node, LinkType::kPci, bw);
  if (n.type == NodeType::kPci) {
    for (const XmlNode& c : xml.children) {
      if (c.name == "pci") PLAIT_RETURN_IF_ERROR(addPci(c, node));
      if (c.name == "nic") PLAIT_RETURN_IF_ERROR(addNic(c, node, bw).status());
    }
  }
  return Status::ok();
}

// NVLinks, C2C links and <pcilink>s, once every GPU and switch exists.
Status SystemBuilder::addSecondPass(const XmlNode& xml, int gpu, int cpu) {
  for (const XmlNode& c : xml.children) {
    int childGpu = gpu, childCpu = cpu;
    if (c.name == "cpu") {
      childCpu = -1;
      for (int idx : sys_.of(NodeType::kCpu)) {
        if (sys_.nodes[idx].cpu.numaId == c.intAttr("numaid", -2)) childCpu = idx;
      }
    }
    if (c.name == "pci" && c.child("gpu")) {
      auto it = byBusId_.find(lower(c.attrOr("busid", "")));
      childGpu = it == byBusId_.end() ? -1 : it->second;
    }
    if (c.name == "nvlink" && gpu >= 0) {
      PLAIT_ASSIGN_OR_RETURN(int64_t count, c.intAttrIn("count", 1, 1, 1024));
      double bw = static_cast<double>(count) * nvlinkBw(sys_.nodes[gpu].gpu.sm);
      std::string tclass = lower(c.attrOr("tclass", ""));
      int remote = -1;
      if (tclass == kNvSwitchClass) {
        if (nvs_ < 0) {
          nvs_ = addNode(NodeType::kNvs);
          sys_.byType[static_cast<int>(NodeType::kNvs)].push_back(nvs_);
        }
        remote = nvs_;
      } else if (tclass == kCpuClass) {
        remote = cpu;
      } else {
        auto it = byBusId_.find(lower(c.attrOr("target", "")));
        if (it == byBusId_.end() || sys_.nodes[it->second].type != NodeType::kGpu) {
          return invalidArgument("<nvlink target=\"" + c.attrOr("target", "") + "\"> names no GPU");
        }
        remote = it->second;
      }
      connect(gpu, remote, LinkType::kNvl, bw);
      if (sys_.nodes[remote].type != NodeType::kGpu) connect(remote, gpu, LinkType::kNvl, bw);
    } else if (c.name == "c2c" && gpu >= 0 && cpu >= 0) {
      PLAIT_ASSIGN_OR_RETURN(int64_t linkBw, c.intAttrIn("bw", 0, 0, kMaxMbps));
      PLAIT_ASSIGN_OR_RETURN(int64_t count, c.intAttrIn("count", 1, 1, 1024));
      double bw = static_cast<double>(linkBw) * static_cast<double>(count) / 1000.0;
      connect(gpu, cpu, LinkType::kC2c, bw);
      connect(cpu, gpu, LinkType::kC2c, bw);
    } else if (c.name == "pcilink") {
      auto self = byBusId_.find(lower(xml.attrOr("busid", "")));
      auto remote = byBusId_.find(lower(c.attrOr("target", "")));
      if (self != byBusId_.end() && remote != byBusId_.end()) {
        connect(self->second, remote->second, LinkType::kLoc, kBwLoc);
      }
    }
    PLAIT_RETURN_IF_ERROR(addSecondPass(c, childGpu, childCpu));
  }
  return Status::ok();
}

double interCpuBw(const CpuInfo& cpu) {
  if (cpu.arch == "ppc64") return kBwPower9;
  if (cpu.arch == "arm64") return kBwArm;
  if (cpu.arch == "x86_64") {
    if (cpu.vendor == "GenuineIntel") return (cpu.familyId == 6 && cpu.modelId >= 0x55) ? kBwSklQpi : kBwQpi;
    if (cpu.vendor == "AuthenticAMD") return kBwAmdFabric;
    if (cpu.vendor == "CentaurHauls" || cpu.vendor == "  Shanghai  ") {
      return (cpu.familyId == 7 && cpu.modelId == 0x5b) ? kBwYongfengZpi : kBwZpi;
    }
  }
  return kBwLoc;
}

void SystemBuilder::connectCpus() {
  for (int a : sys_.of(NodeType::kCpu)) {
    for (int b : sys_.of(NodeType::kCpu)) {
      if (a != b) connect(a, b, LinkType::kSys, interCpuBw(sys_.nodes[a].cpu));
    }
  }
}

void SystemBuilder::finish() {
  auto& gpus = sys_.byType[static_cast<int>(NodeType::kGpu)];
  std::stable_sort(gpus.begin(), gpus.end(), [&](int a, int b) {
    const GpuInfo &ga = sys_.nodes[a].gpu, &gb = sys_.nodes[b].gpu;
    return ga.rank != gb.rank ? ga.rank < gb.rank : ga.dev < gb.dev;
  });
  auto& nets = sys_.byType[static_cast<int>(NodeType::kNet)];
  std::stable_sort(nets.begin(), nets.end(),
                   [&](int a, int b) { return sys_.nodes[a].net.dev < sys_.nodes[b].net.dev; });
  auto& cpus = sys_.byType[static_cast<int>(NodeType::kCpu)];
  std::stable_sort(cpus.begin(), cpus.end(),
                   [&](int a, int b) { return sys_.nodes[a].cpu.numaId < sys_.nodes[b].cpu.numaId; });
  // Fastest links first: the search tries them first.
  for (TopoNode& n : sys_.nodes) {
    std::stable_sort(n.links.begin(), n.links.end(),
                     [&](int a, int b) { return sys_.links[a].bw > sys_.links[b].bw; });
  }
}

Result<TopoSystem> SystemBuilder::build(const XmlNode& root) {
  if (root.name != "system") return invalidArgument("topology XML root is <" + root.name + ">, expected <system>");
  sys_.xml = root;
  for (const XmlNode& c : root.children) {
    if (c.name == "cpu") PLAIT_RETURN_IF_ERROR(addCpu(c));
  }
  PLAIT_RETURN_IF_ERROR(addSecondPass(root, -1, -1));
  connectCpus();
  finish();
  return std::move(sys_);
}

}  // namespace

Result<TopoSystem> buildSystem(const XmlNode& root) { return SystemBuilder().build(root); }

std::string describeSystem(const TopoSystem& system) {
  std::ostringstream out;
  out << "System: " << system.count(NodeType::kCpu) << " CPU, " << system.count(NodeType::kGpu) << " GPU, "
      << system.count(NodeType::kNvs) << " NVS, " << system.count(NodeType::kPci) << " PCI switch, "
      << system.count(NodeType::kNic) << " NIC, " << system.count(NodeType::kNet) << " NET\n";
  for (int t = 0; t < kNodeTypeCount; ++t) {
    for (int idx : system.byType[t]) {
      const TopoNode& n = system.nodes[idx];
      out << "  " << n.label();
      if (n.type == NodeType::kGpu) out << " (dev " << n.gpu.dev << ", sm " << n.gpu.sm << ", " << n.busId << ")";
      if (n.type == NodeType::kCpu) out << " (" << n.cpu.arch << " " << n.cpu.vendor << ")";
      if (n.type == NodeType::kNet) out << " (" << n.net.name << ", " << n.net.bw << " GB/s)";
      out << "\n";
      for (int id : n.links) {
        const TopoLink& l = system.links[id];
        char bw[32];
        std::snprintf(bw, sizeof bw, "%.1f", l.bw);
        out << "    + " << linkTypeName(l.type) << "[" << bw << "] -> " << system.nodes[l.to].label() << "\n";
      }
    }
  }
  return out.str();
}

}  // namespace plait::topo
