// fabric.cc — see fabric.h.
#include "sim/fabric.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

namespace plait::sim {

using topo::LinkType;
using topo::NodeType;

const char* linkClassName(LinkClass c) {
  switch (c) {
    case LinkClass::kNvlink: return "NVLink";
    case LinkClass::kPcie: return "PCIe";
    case LinkClass::kCpu: return "CPU";
    case LinkClass::kNic: return "NIC-leaf";
    case LinkClass::kSpine: return "leaf-spine";
    case LinkClass::kLocal: return "local";
  }
  return "unknown";
}

Result<NetworkSpec> parseNetworkSpec(const topo::XmlNode& e) {
  NetworkSpec s;
  const std::string kind = e.attrOr("kind", "rail-fat-tree");
  if (kind == "rail-fat-tree") {
    s.kind = NetworkSpec::Kind::kRailFatTree;
  } else if (kind == "single-switch") {
    s.kind = NetworkSpec::Kind::kSingleSwitch;
  } else {
    return invalidArgument("<network kind=\"" + kind + "\">: expected rail-fat-tree or single-switch");
  }
  PLAIT_ASSIGN_OR_RETURN(int64_t perLeaf, e.intAttrIn("hosts-per-leaf", s.hostsPerLeaf, 1, 1 << 20));
  s.hostsPerLeaf = static_cast<int>(perLeaf);
  PLAIT_ASSIGN_OR_RETURN(s.oversubscription, e.floatAttrIn("oversubscription", s.oversubscription, 1.0, 1e3));
  PLAIT_ASSIGN_OR_RETURN(double gbps, e.floatAttrIn("nic-gbps", 0, 0, 1e6));
  s.nicGBs = gbps / 8.0;
  PLAIT_ASSIGN_OR_RETURN(s.switchLatencyUs, e.floatAttrIn("switch-latency-us", s.switchLatencyUs, 0, 1e6));
  PLAIT_ASSIGN_OR_RETURN(int64_t spines, e.intAttrIn("spines", 0, 0, 1 << 16));
  s.spines = static_cast<int>(spines);
  const std::string pxn = e.attrOr("pxn", "1");
  if (pxn != "0" && pxn != "1") return invalidArgument("<network pxn=\"" + pxn + "\">: expected 0 or 1");
  s.pxn = pxn == "1";
  return s;
}

std::string describeNetwork(const NetworkSpec& s) {
  char buf[200];
  if (s.kind == NetworkSpec::Kind::kSingleSwitch) {
    snprintf(buf, sizeof(buf), "one non-blocking switch, %.2f us per switch", s.switchLatencyUs);
  } else {
    snprintf(buf, sizeof(buf), "rail-optimised fat tree, %d hosts per leaf, oversubscription %.2g:1, %.2f us per switch",
             s.hostsPerLeaf, s.oversubscription, s.switchLatencyUs);
    if (s.spines > 0) snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf), ", %d spines, ECMP by hash", s.spines);
  }
  std::string out = buf;
  if (!s.pxn) out += ", no PXN";
  if (s.nicGBs > 0) out += ", NICs at " + std::to_string(static_cast<int>(s.nicGBs * 8 + 0.5)) + " Gb/s";
  return out;
}

namespace {

LinkClass classOf(LinkType t) {
  switch (t) {
    case LinkType::kNvl:
    case LinkType::kC2c: return LinkClass::kNvlink;
    case LinkType::kPci: return LinkClass::kPcie;
    case LinkType::kSys: return LinkClass::kCpu;
    case LinkType::kNet: return LinkClass::kNic;
    case LinkType::kLoc: return LinkClass::kLocal;
  }
  return LinkClass::kLocal;
}

}  // namespace

Result<Fabric> Fabric::build(const topo::Cluster& cluster, const std::vector<topo::PathTable>& paths,
                             const NetworkSpec& spec) {
  if (paths.size() != cluster.systems.size()) return invalidArgument("Fabric: one path table per distinct system");
  Fabric f;
  f.cluster_ = &cluster;
  f.paths_ = &paths;
  f.spec_ = spec;
  const int hosts = cluster.hosts();
  for (int h = 0; h < hosts; ++h) {
    f.hostBase_.push_back(static_cast<int>(f.links_.size()));
    for (const topo::TopoLink& l : cluster.host(h).links) f.links_.push_back({l.bw, classOf(l.type), h});
  }
  // NIC ports: up (host -> leaf) and down, at the NIC's speed.
  f.nicBase_ = static_cast<int>(f.links_.size());
  int nics = 0;
  for (int h = 0; h < hosts; ++h) {
    const topo::TopoSystem& sys = cluster.host(h);
    f.nicIndex_.push_back(nics);
    f.rails_ = std::max(f.rails_, sys.count(NodeType::kNet));
    for (int k = 0; k < sys.count(NodeType::kNet); ++k) {
      const double gbs = spec.nicGBs > 0 ? spec.nicGBs : sys.net(k).net.bw;
      if (!(gbs > 0)) return invalidArgument("host " + std::to_string(h) + " NET" + std::to_string(k) + " has no speed");
      f.links_.push_back({gbs, LinkClass::kNic, h});
      f.links_.push_back({gbs, LinkClass::kNic, h});
      ++nics;
    }
  }
  if (hosts > 1 && f.rails_ == 0) return invalidArgument("a cluster of several hosts needs NICs in its topology");
  for (size_t s = 0; s < cluster.systems.size(); ++s) {
    const topo::TopoSystem& sys = cluster.systems[s];
    std::vector<int>& best = f.nearestNet_.emplace_back(sys.count(NodeType::kGpu), 0);
    for (int g = 0; g < sys.count(NodeType::kGpu); ++g)
      for (int k = 1; k < sys.count(NodeType::kNet); ++k) {
        const topo::TopoPath& now = paths[s].get(sys.of(NodeType::kGpu)[g], sys.of(NodeType::kNet)[best[g]]);
        const topo::TopoPath& cand = paths[s].get(sys.of(NodeType::kGpu)[g], sys.of(NodeType::kNet)[k]);
        if (cand.type < now.type || (cand.type == now.type && cand.bw > now.bw)) best[g] = k;
      }
  }
  // Leaves: per rail, one per group of hostsPerLeaf hosts; uplinks carry the
  // group's NIC bandwidth over the oversubscription ratio.
  f.leafBase_ = static_cast<int>(f.links_.size());
  if (spec.kind == NetworkSpec::Kind::kRailFatTree && hosts > 1) {
    f.groups_ = (hosts + spec.hostsPerLeaf - 1) / spec.hostsPerLeaf;
    if (static_cast<int64_t>(f.rails_) * f.groups_ * std::max(spec.spines, 1) > (int64_t(1) << 24))
      return invalidArgument(std::to_string(f.rails_) + " rails x " + std::to_string(f.groups_) + " leaves x " +
                             std::to_string(spec.spines) + " spines is more spine links than plait-sim models (2^24)");
    for (int rail = 0; rail < f.rails_; ++rail) {
      for (int g = 0; g < f.groups_; ++g) {
        double down = 0;
        for (int h = g * spec.hostsPerLeaf; h < std::min(hosts, (g + 1) * spec.hostsPerLeaf); ++h)
          if (rail < cluster.host(h).count(NodeType::kNet)) down += f.links_[f.nicBase_ + 2 * (f.nicIndex_[h] + rail)].gbs;
        const int perLeaf = std::max(spec.spines, 1);
        const double up = std::max(down, 1e-9) / spec.oversubscription / perLeaf;
        for (int sp = 0; sp < perLeaf; ++sp) {
          f.links_.push_back({up, LinkClass::kSpine, -1});
          f.links_.push_back({up, LinkClass::kSpine, -1});
        }
      }
    }
  }
  return f;
}

int Fabric::nicLink(int host, int net, bool up) const {
  if (host < 0 || host >= hosts() || net < 0 || net >= cluster_->host(host).count(NodeType::kNet)) return -1;
  return nicBase_ + 2 * (nicIndex_[host] + net) + (up ? 0 : 1);
}

int Fabric::leafLink(int rail, int group, bool up, int spine) const {
  if (rail < 0 || rail >= rails_ || group < 0 || group >= leafGroups() || spine < 0 || spine >= spineLinksPerLeaf())
    return -1;
  return leafBase_ + 2 * ((rail * groups_ + group) * spineLinksPerLeaf() + spine) + (up ? 0 : 1);
}

bool Fabric::nvlinkPeers(int host, int a, int b) const {
  const topo::PathTable& p = (*paths_)[cluster_->hostSystem[host]];
  return a != b && p.gpuToGpu(a, b).type <= topo::PathType::kNvb;
}

int Fabric::nearestNet(GpuRef g) const { return nearestNet_[cluster_->hostSystem[g.host]][g.ordinal]; }

int Fabric::leafOf(int host, int net) const {
  if (spec_.kind == NetworkSpec::Kind::kSingleSwitch) return 0;
  return net * groups_ + host / spec_.hostsPerLeaf;
}

int Fabric::appendRoute(GpuRef a, GpuRef b, int netOut, int netIn, std::vector<int>* out) const {
  const topo::TopoSystem& sa = cluster_->host(a.host);
  const topo::PathTable& pa = (*paths_)[cluster_->hostSystem[a.host]];
  if (a.host == b.host) {
    for (int l : pa.gpuToGpu(a.ordinal, b.ordinal).links) out->push_back(hostBase_[a.host] + l);
    return 0;
  }
  const topo::TopoSystem& sb = cluster_->host(b.host);
  const topo::PathTable& pb = (*paths_)[cluster_->hostSystem[b.host]];
  netOut = std::clamp(netOut, 0, sa.count(NodeType::kNet) - 1);
  netIn = std::clamp(netIn, 0, sb.count(NodeType::kNet) - 1);
  for (int l : pa.get(sa.of(NodeType::kGpu)[a.ordinal], sa.of(NodeType::kNet)[netOut]).links)
    out->push_back(hostBase_[a.host] + l);
  out->push_back(nicBase_ + 2 * (nicIndex_[a.host] + netOut));  // up to the leaf
  int switches = 1;
  const int la = leafOf(a.host, netOut), lb = leafOf(b.host, netIn);
  if (la != lb) {
    // The spine: all of them (ideal ECMP), or the one a hash of the flow's
    // ends picks, as a switch's ECMP does per flow.
    int spine = 0;
    if (spec_.spines > 0) {
      uint64_t key = (uint64_t(a.host) << 40) ^ (uint64_t(a.ordinal) << 32) ^ (uint64_t(b.host) << 12) ^
                     (uint64_t(b.ordinal) << 4) ^ uint64_t(netOut * 131 + netIn);
      key += 0x9e3779b97f4a7c15ULL;  // splitmix64
      key = (key ^ (key >> 30)) * 0xbf58476d1ce4e5b9ULL;
      key = (key ^ (key >> 27)) * 0x94d049bb133111ebULL;
      key ^= key >> 31;
      spine = static_cast<int>(key % static_cast<uint64_t>(spec_.spines));
    }
    out->push_back(leafBase_ + 2 * (la * spineLinksPerLeaf() + spine));      // leaf up to the spine
    out->push_back(leafBase_ + 2 * (lb * spineLinksPerLeaf() + spine) + 1);  // spine down to the other leaf
    switches = 3;
  }
  out->push_back(nicBase_ + 2 * (nicIndex_[b.host] + netIn) + 1);  // down to the NIC
  for (int l : pb.get(sb.of(NodeType::kNet)[netIn], sb.of(NodeType::kGpu)[b.ordinal]).links)
    out->push_back(hostBase_[b.host] + l);
  return switches;
}

std::string Fabric::linkName(int link) const {
  if (link < nicBase_) {
    int h = static_cast<int>(std::upper_bound(hostBase_.begin(), hostBase_.end(), link) - hostBase_.begin()) - 1;
    const topo::TopoSystem& sys = cluster_->host(h);
    const topo::TopoLink& l = sys.links[link - hostBase_[h]];
    return "host " + std::to_string(h) + " " + sys.nodes[l.from].label() + "->" + sys.nodes[l.to].label();
  }
  if (link < leafBase_) {
    const int nic = (link - nicBase_) / 2;
    int h = static_cast<int>(std::upper_bound(nicIndex_.begin(), nicIndex_.end(), nic) - nicIndex_.begin()) - 1;
    return "host " + std::to_string(h) + " NET" + std::to_string(nic - nicIndex_[h]) +
           ((link - nicBase_) % 2 == 0 ? " up" : " down");
  }
  const int pair = (link - leafBase_) / 2, leaf = pair / spineLinksPerLeaf();
  const std::string spine = spec_.spines > 0 ? " " + std::to_string(pair % spineLinksPerLeaf()) : "";
  return "leaf rail " + std::to_string(leaf / groups_) + " group " + std::to_string(leaf % groups_) +
         ((link - leafBase_) % 2 == 0 ? " to spine" : " from spine") + spine;
}

}  // namespace plait::sim
