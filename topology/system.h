// system.h — the machine model: nodes (GPU, PCI switch, NVSwitch, CPU/NUMA
// domain, NIC, network port) and directed links with bandwidths, built from
// NCCL's topology XML schema.
//
// One TopoSystem describes one host. Its `xml` member is the document it was
// built from (a user's NCCL_TOPO_FILE, detection, or both merged), so a dump
// writes back exactly what was read plus what detection added.
//
// Units: bandwidths in GB/s (NCCL's convention), latencies in microseconds.
// Bandwidth figures are NCCL's published constants (see kBw*), so paths and
// graphs come out the same as NCCL's on the same description.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "plait/status.hpp"
#include "topology/xml.h"

namespace plait::topo {

// Numbering follows NCCL so that dumps and logs read the same.
enum class NodeType : int { kGpu = 0, kPci = 1, kNvs = 2, kCpu = 3, kNic = 4, kNet = 5 };
inline constexpr int kNodeTypeCount = 6;

enum class LinkType : int { kLoc = 0, kNvl = 1, kC2c = 3, kPci = 4, kSys = 9, kNet = 10 };

// Best to worst; the order is what the search compares.
enum class PathType : int {
  kLoc = 0,  // the node itself
  kNvl = 1,  // NVLink (direct, or through NVSwitches)
  kNvb = 2,  // NVLink through one intermediate GPU
  kC2c = 3,  // chip-to-chip link between a GPU and its CPU
  kPix = 4,  // at most one PCIe switch
  kPxb = 5,  // several PCIe switches, no host bridge
  kP2c = 6,  // GPU -> C2C -> CPU -> PCIe -> NIC
  kPxn = 7,  // GPU -> NVLink -> peer GPU -> PCIe -> NIC
  kPhb = 8,  // through a PCIe host bridge (the CPU)
  kSys = 9,  // through the inter-socket interconnect
  kNet = 10, // through the network
  kDis = 11, // disconnected
};

const char* nodeTypeName(NodeType type);
const char* linkTypeName(LinkType type);
const char* pathTypeName(PathType type);
// Accepts the names above (any case); nullopt otherwise.
std::optional<PathType> parsePathType(std::string_view text);

// NCCL's bandwidth constants (GB/s).
inline constexpr double kBwLoc = 5000.0;
inline constexpr double kBwPciGen3x16 = 12.0;
inline constexpr double kBwQpi = 6.0;        // Intel before Skylake
inline constexpr double kBwSklQpi = 10.0;    // Intel Skylake and later
inline constexpr double kBwAmdFabric = 16.0; // AMD Infinity Fabric between sockets
inline constexpr double kBwZpi = 6.0;
inline constexpr double kBwYongfengZpi = 9.0;
inline constexpr double kBwPower9 = 32.0;
inline constexpr double kBwArm = 6.0;
// Intel CPUs turn GPU peer traffic into 64 B TLPs: a path through one costs
// this much more bandwidth than it carries.
inline constexpr double kIntelP2pOverhead = 1.2;

// Per-link NVLink bandwidth for a compute capability (sm 60 -> 18, 70/80 ->
// 20, 86 -> 12, 90 -> 20.6, 100 and later -> 40.1).
double nvlinkBw(int sm);
// PCIe bandwidth from sysfs-style text ("16.0 GT/s PCIe", "8 GT/s") and lane
// count: per-lane rate in units of 100 Mb/s × width / 80. Unknown text counts
// as Gen3; width 0 counts as 16 (NCCL's fallbacks).
double pciBw(std::string_view linkSpeed, int width);

struct GpuInfo {
  int dev = -1;   // CUDA device index
  int rank = -1;  // the rank driving it, local to the host
  int sm = 0;     // compute capability × 10
  int gdr = 0;    // GPUDirect RDMA capable
};

struct CpuInfo {
  int numaId = -1;
  std::string arch;    // x86_64, arm64, ppc64
  std::string vendor;  // GenuineIntel, AuthenticAMD, ...
  int familyId = 0;
  int modelId = 0;
  std::string affinity;  // NCCL's cpuset text: comma-separated 32-bit hex words
  bool isIntel() const { return arch == "x86_64" && vendor == "GenuineIntel"; }
};

struct NetInfo {
  std::string name;
  int dev = -1;
  double bw = 0;       // GB/s (speed attribute in Mb/s / 8000)
  double latency = 0;  // µs
  int port = 0;
  uint64_t guid = 0;
  int maxConn = 0;
  int gdr = 0;
  int coll = 0;
};

struct TopoLink {
  LinkType type = LinkType::kLoc;
  int from = -1;  // node index
  int to = -1;    // node index
  double bw = 0;  // GB/s, this direction
};

struct TopoNode {
  NodeType type = NodeType::kPci;
  std::string busId;  // PCI bus id (lower case) for GPU/PCI/NIC nodes
  uint64_t pciDevice = 0;  // vendor<<48 | device<<32 | subsystem vendor<<16 | subsystem device
  GpuInfo gpu;
  CpuInfo cpu;
  NetInfo net;
  std::vector<int> links;  // outgoing link ids, bandwidth descending
  // A short label: "GPU0", "CPU1", "NET2", "PCI 0000:1c:00.0", "NVS".
  std::string label() const;
};

struct TopoSystem {
  XmlNode xml;                     // the document this model was built from
  std::vector<TopoNode> nodes;
  std::vector<TopoLink> links;
  // Node indices per type. GPUs are ordered by local rank (then dev), NETs by
  // dev, CPUs by NUMA id: "GPU ordinal i" means nodes[byType[kGpu][i]].
  std::array<std::vector<int>, kNodeTypeCount> byType;

  const std::vector<int>& of(NodeType type) const { return byType[static_cast<int>(type)]; }
  int count(NodeType type) const { return static_cast<int>(of(type).size()); }
  const TopoNode& gpu(int ordinal) const { return nodes[of(NodeType::kGpu)[ordinal]]; }
  const TopoNode& net(int ordinal) const { return nodes[of(NodeType::kNet)[ordinal]]; }
  // The id of the first link from -> to, or -1.
  int findLink(int from, int to) const;
  // Sum of outgoing link bandwidth of a node by link type.
  double outBw(int node, LinkType type) const;
};

// Builds the model from a <system> document. InvalidArgument names the
// element when the document is not NCCL's schema (wrong root, an <nvlink>
// whose target GPU is missing, a <pci> without busid).
Result<TopoSystem> buildSystem(const XmlNode& root);

// Multi-line description, one line per node with its links (NCCL's
// "=== System ===" dump, in Plait's words).
std::string describeSystem(const TopoSystem& system);

}  // namespace plait::topo
