// fabric.h — every link of a simulated cluster, and the route between two GPUs.
//
// A fabric is the links of each host (its TopoSystem's directed links: NVLink
// to GPUs and NVSwitches, PCIe, the CPU interconnect), instanced once per host,
// plus the network between hosts. The network is a rail-optimised two-level
// fat tree, the layout of DGX-class clusters: NIC k of every host plugs into a
// leaf switch of rail k, `hostsPerLeaf` hosts per leaf; leaves connect through
// a spine layer whose bandwidth is the leaves' downlink bandwidth divided by
// the oversubscription ratio. ECMP over the spines is ideal by default (each
// leaf's uplinks are one link of their total bandwidth); with `spines` > 0
// each leaf has one uplink and one downlink per spine, and every flow takes
// the spine a hash of its ends picks, so flows can collide as they do on a
// real fabric. `kSingleSwitch` puts every NIC on one non-blocking switch
// (two hosts back to back, or a small lab).
//
// Routes inside a host are the topology layer's paths (topology/paths.h), so
// the simulator moves data where Plait's graph search assumed it would.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "plait/status.hpp"
#include "topology/cluster.h"
#include "topology/xml.h"

namespace plait::sim {

enum class LinkClass : uint8_t {
  kNvlink = 0,  // NVLink or C2C inside a host
  kPcie = 1,    // PCIe inside a host
  kCpu = 2,     // the CPU interconnect, host bridges
  kNic = 3,     // NIC <-> leaf switch
  kSpine = 4,   // leaf <-> spine layer
  kLocal = 5,   // inside a device (NIC to its port): not a bottleneck
};
inline constexpr int kLinkClassCount = 6;
const char* linkClassName(LinkClass c);

struct NetworkSpec {
  enum class Kind : uint8_t { kRailFatTree, kSingleSwitch };
  Kind kind = Kind::kRailFatTree;
  int hostsPerLeaf = 32;          // hosts under one leaf switch of each rail
  double oversubscription = 1.0;  // leaf downlink : uplink bandwidth (>= 1)
  double nicGBs = 0;              // per NIC port, GB/s; 0: the topology's <net speed>
  double switchLatencyUs = 0.3;   // per switch a network hop crosses
  int spines = 0;                 // 0: ideal ECMP; else spine switches, one hashed path per flow
  // Point-to-point between hosts through the NVLink peer on the receiver's
  // rail (NCCL's PXN, on by default where GPUs share NVLink).
  bool pxn = true;
};

// <network kind="rail-fat-tree|single-switch" hosts-per-leaf="32"
// oversubscription="1" nic-gbps="400" switch-latency-us="0.3"/>: every
// attribute optional. InvalidArgument names the attribute at fault.
Result<NetworkSpec> parseNetworkSpec(const topo::XmlNode& element);
std::string describeNetwork(const NetworkSpec& spec);

struct SimLink {
  double gbs = 0;  // capacity, GB/s (1e9 bytes/s), this direction
  LinkClass cls = LinkClass::kLocal;
  int host = -1;   // the host whose link it is; -1 for switch links
};

// One GPU of the cluster.
struct GpuRef {
  int host = 0;
  int ordinal = 0;  // GPU ordinal inside the host (topology's order)
};

class Fabric {
 public:
  // Errors: a network that hosts' NICs cannot attach to (multi-host cluster
  // whose hosts have no NET), a bad spec value.
  static Result<Fabric> build(const topo::Cluster& cluster, const std::vector<topo::PathTable>& paths,
                              const NetworkSpec& spec);

  const std::vector<SimLink>& links() const { return links_; }
  int hosts() const { return static_cast<int>(hostBase_.size()); }
  const NetworkSpec& spec() const { return spec_; }
  // Human-readable name of a link ("host 3 GPU2->NVS", "host 3 NET1 up",
  // "leaf rail 1 group 0 up").
  std::string linkName(int link) const;

  // Appends the links from GPU `a` to GPU `b` (same host: the topology's
  // path; different hosts: GPU -> NET `netOut` of a's host -> network -> NET
  // `netIn` of b's host -> GPU). Returns the switches crossed (0 inside a
  // host).
  int appendRoute(GpuRef a, GpuRef b, int netOut, int netIn, std::vector<int>* out) const;

  // The network's links by position: host h's NET k up (to its leaf) or
  // down; the uplink (to spine `spine`, or to all of them with ideal ECMP)
  // or downlink of leaf `group` of `rail`. -1 when the fabric has no such link.
  int nicLink(int host, int net, bool up) const;
  // The fabric's id of host `host`'s topology link `topoLink`.
  int hostLink(int host, int topoLink) const { return hostBase_[host] + topoLink; }
  int leafLink(int rail, int group, bool up, int spine = 0) const;
  int spineLinksPerLeaf() const { return std::max(spec_.spines, 1); }
  int rails() const { return rails_; }
  int leafGroups() const { return spec_.kind == NetworkSpec::Kind::kRailFatTree && hosts() > 1 ? groups_ : 0; }

  // Whether GPUs a and b of `host` reach each other over NVLink (directly,
  // through NVSwitches, or through one GPU).
  bool nvlinkPeers(int host, int a, int b) const;

  // The NET ordinal a GPU reaches best (path type, then bandwidth, then the
  // lowest ordinal): where its point-to-point traffic leaves and enters.
  int nearestNet(GpuRef g) const;

 private:
  const topo::Cluster* cluster_ = nullptr;
  const std::vector<topo::PathTable>* paths_ = nullptr;
  NetworkSpec spec_;
  std::vector<SimLink> links_;
  std::vector<int> hostBase_;  // first link id of each host's topology links
  int nicBase_ = 0;            // 2 links (up, down) per (host, NET ordinal)
  std::vector<int> nicIndex_;  // per host: index of its NET 0 among all NICs
  int leafBase_ = 0;           // 2 links (up, down) per leaf and spine
  int groups_ = 1;             // leaf groups per rail
  int rails_ = 0;
  std::vector<std::vector<int>> nearestNet_;  // per distinct system, per GPU ordinal

  int leafOf(int host, int net) const;
};

}  // namespace plait::sim
