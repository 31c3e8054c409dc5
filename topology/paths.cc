// paths.cc — best paths between all node pairs (see paths.h for the rules).
#include "topology/paths.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <sstream>

#include "base/config.h"
#include "base/log.h"

namespace plait::topo {

PLAIT_PARAM_STRING(kP2pLevel, "P2P_LEVEL", "", "highest path type for direct GPU peer access (LOC..SYS)");
PLAIT_PARAM_INT(kP2pDisable, "P2P_DISABLE", 0, "1: never use direct GPU peer access");
PLAIT_PARAM_INT(kNvbDisable, "NVB_DISABLE", 0, "1: do not route GPU traffic through an intermediate GPU's NVLinks");
PLAIT_PARAM_INT(kPxnDisable, "PXN_DISABLE", 0, "1: do not reach a NIC through an NVLink peer GPU (PXN)");
PLAIT_PARAM_STRING(kNetGdrLevel, "NET_GDR_LEVEL", "", "highest GPU-NIC path type for GPUDirect RDMA (default PXB)");

namespace {

// NCCL's legacy integer levels: 0 LOC, 1 PIX, 2 PXB, 3 PHB, 4 SYS, 5 SYS.
std::optional<PathType> parseLevel(const std::string& text) {
  if (text.empty()) return std::nullopt;
  if (auto t = parsePathType(text)) return t;
  char* end = nullptr;
  long v = std::strtol(text.c_str(), &end, 10);
  if (end == text.c_str()) return std::nullopt;
  static const PathType kLegacy[] = {PathType::kLoc, PathType::kPix, PathType::kPxb,
                                     PathType::kPhb, PathType::kSys, PathType::kSys};
  return kLegacy[std::clamp<long>(v, 0, 5)];
}

}  // namespace

PathOptions pathOptionsFromEnv(const TopoSystem& system) {
  PathOptions opts;
  for (int cpu : system.of(NodeType::kCpu)) {
    const CpuInfo& c = system.nodes[cpu].cpu;
    if (c.arch == "arm64" || (c.arch == "x86_64" && (c.vendor == "GenuineIntel" || c.vendor == "CentaurHauls"))) {
      opts.p2pLevel = PathType::kPxb;
    }
  }
  if (auto level = parseLevel(kP2pLevel.get())) {
    opts.p2pLevel = *level;
  } else if (!kP2pLevel.get().empty()) {
    PLAIT_WARN(kEnv, "NCCL_P2P_LEVEL=%s is not a path type; keeping %s", kP2pLevel.get().c_str(),
               pathTypeName(opts.p2pLevel));
  }
  if (kP2pDisable.get() != 0) {
    opts.p2pDisable = true;
    opts.p2pLevel = PathType::kLoc;
  }
  opts.nvbDisable = kNvbDisable.get() != 0;
  opts.pxnDisable = kPxnDisable.get() != 0;
  if (auto level = parseLevel(kNetGdrLevel.get())) opts.gdrLevel = *level;
  return opts;
}

namespace {

// The type of one hop over link l on a path that started at `source`.
PathType hopType(const TopoSystem& sys, const TopoLink& l, int source) {
  const TopoNode& u = sys.nodes[l.from];
  const TopoNode& v = sys.nodes[l.to];
  switch (l.type) {
    case LinkType::kLoc:
    case LinkType::kNet: return PathType::kLoc;
    case LinkType::kNvl: return (u.type == NodeType::kGpu && l.from != source) ? PathType::kNvb : PathType::kNvl;
    case LinkType::kC2c: return PathType::kC2c;
    case LinkType::kSys: return PathType::kSys;
    case LinkType::kPci:
      if (u.type == NodeType::kCpu || v.type == NodeType::kCpu) return PathType::kPhb;
      if (u.type == NodeType::kPci && v.type == NodeType::kPci) return PathType::kPxb;
      return PathType::kPix;
  }
  return PathType::kSys;
}

bool better(PathType type, double bw, size_t hops, const TopoPath& old) {
  if (type != old.type) return type < old.type;
  if (bw != old.bw) return bw > old.bw;
  return hops < old.links.size();
}

// Label-correcting search from one source; row[v] is the path source -> v.
void pathsFrom(const TopoSystem& sys, int source, bool nvbDisable, TopoPath* row) {
  row[source] = TopoPath{PathType::kLoc, kBwLoc, {}};
  std::deque<int> queue{source};
  std::vector<char> queued(sys.nodes.size(), 0);
  queued[source] = 1;
  while (!queue.empty()) {
    int u = queue.front();
    queue.pop_front();
    queued[u] = 0;
    const TopoPath pu = row[u];
    for (int id : sys.nodes[u].links) {
      const TopoLink& l = sys.links[id];
      if (l.to == source) continue;
      if (u != source && sys.nodes[u].type == NodeType::kGpu) {
        // Only GPU -> GPU -> GPU over two NVLinks may pass through a GPU.
        bool nvb = !nvbDisable && l.type == LinkType::kNvl && sys.nodes[l.to].type == NodeType::kGpu &&
                   pu.links.size() == 1 && sys.nodes[source].type == NodeType::kGpu;
        if (!nvb) continue;
      }
      if (u != source && sys.nodes[u].type == NodeType::kNet) continue;
      PathType type = std::max(pu.type, hopType(sys, l, source));
      double bw = std::min(pu.bw, l.bw);
      if (!better(type, bw, pu.links.size() + 1, row[l.to])) continue;
      TopoPath& pv = row[l.to];
      pv.type = type;
      pv.bw = bw;
      pv.links = pu.links;
      pv.links.push_back(id);
      if (!queued[l.to]) {
        queued[l.to] = 1;
        queue.push_back(l.to);
      }
    }
  }
}

TopoPath concat(const TopoPath& a, const TopoPath& b, PathType type) {
  TopoPath out;
  out.type = type;
  out.bw = std::min(a.bw, b.bw);
  out.links = a.links;
  out.links.insert(out.links.end(), b.links.begin(), b.links.end());
  return out;
}

// The CPU node closest to `node` (its own NUMA domain for PCI devices).
int localCpu(const TopoSystem& sys, const std::vector<TopoPath>& paths, int node) {
  int best = -1;
  const int n = static_cast<int>(sys.nodes.size());
  for (int cpu : sys.of(NodeType::kCpu)) {
    const TopoPath& p = paths[node * n + cpu];
    if (p.type == PathType::kDis) continue;
    if (best < 0 || better(p.type, p.bw, p.links.size(), paths[node * n + best])) best = cpu;
  }
  return best;
}

}  // namespace

PathTable::PathTable(const TopoSystem& sys, const PathOptions& options)
    : n_(static_cast<int>(sys.nodes.size())),
      nGpus_(sys.count(NodeType::kGpu)),
      gpus_(sys.of(NodeType::kGpu)),
      paths_(static_cast<size_t>(n_) * n_),
      p2p_(static_cast<size_t>(nGpus_) * nGpus_, 1),
      nNets_(sys.count(NodeType::kNet)),
      options_(options) {
  for (int s = 0; s < n_; ++s) pathsFrom(sys, s, options.nvbDisable, &paths_[static_cast<size_t>(s) * n_]);
  // GPU pairs beyond the P2P level stage through the sender's CPU.
  for (int a = 0; a < nGpus_; ++a) {
    for (int b = 0; b < nGpus_; ++b) {
      TopoPath& p = paths_[gpus_[a] * n_ + gpus_[b]];
      if (a == b || p.type <= options.p2pLevel) continue;
      p2p_[a * nGpus_ + b] = 0;
      int cpu = localCpu(sys, paths_, gpus_[a]);
      if (cpu < 0) continue;
      const TopoPath& up = get(gpus_[a], cpu);
      const TopoPath& down = get(cpu, gpus_[b]);
      p = concat(up, down, std::max({up.type, down.type, PathType::kPhb}));
    }
  }
  const std::vector<int>& nets = sys.of(NodeType::kNet);
  for (int g = 0; g < nGpus_; ++g) {
    for (int net : nets) {
      TopoPath& p = paths_[gpus_[g] * n_ + net];
      // P2C: GPU -> C2C -> CPU -> PCIe -> NIC.
      if (p.type == PathType::kPhb && !p.links.empty() && sys.links[p.links[0]].type == LinkType::kC2c) {
        p.type = PathType::kP2c;
      }
      if (options.pxnDisable || p.type <= PathType::kPxb) continue;
      // PXN: hand the data over NVLink to a peer that sits next to the NIC.
      int bestPeer = -1;
      for (int q = 0; q < nGpus_; ++q) {
        if (q == g || get(gpus_[g], gpus_[q]).type > PathType::kNvl) continue;
        const TopoPath& pn = get(gpus_[q], net);
        if (pn.type > PathType::kPxb) continue;
        if (bestPeer < 0 || pn.bw > get(gpus_[bestPeer], net).bw) bestPeer = q;
      }
      if (bestPeer >= 0) p = concat(get(gpus_[g], gpus_[bestPeer]), get(gpus_[bestPeer], net), PathType::kPxn);
    }
  }
  gdr_.assign(static_cast<size_t>(nGpus_) * nNets_, 0);
  for (int g = 0; g < nGpus_; ++g) {
    for (int k = 0; k < nNets_; ++k) {
      const TopoNode& gpu = sys.nodes[gpus_[g]];
      const TopoNode& net = sys.nodes[nets[k]];
      PathType t = get(gpus_[g], nets[k]).type;
      PathType limit = t == PathType::kP2c ? PathType::kP2c : options.gdrLevel;
      gdr_[g * nNets_ + k] = gpu.gpu.gdr && net.net.gdr && t <= limit;
    }
  }
}

bool PathTable::gdrAllowed(int g, int n) const { return gdr_[g * nNets_ + n] != 0; }

std::string describePath(const TopoSystem& sys, const TopoPath& path) {
  char head[48];
  std::snprintf(head, sizeof head, "%s/%.1f", pathTypeName(path.type), path.bw);
  std::string out = head;
  if (path.links.empty()) return out;
  out += " " + sys.nodes[sys.links[path.links[0]].from].label();
  for (int id : path.links) out += " -> " + sys.nodes[sys.links[id].to].label();
  return out;
}

std::string pathMatrix(const TopoSystem& sys, const PathTable& paths) {
  std::vector<int> cols = sys.of(NodeType::kGpu);
  for (int net : sys.of(NodeType::kNet)) cols.push_back(net);
  if (sys.count(NodeType::kGpu) == 0) {
    cols = sys.of(NodeType::kCpu);
    for (int net : sys.of(NodeType::kNet)) cols.push_back(net);
  }
  std::ostringstream out;
  char cell[32];
  out << "        ";
  for (int c : cols) {
    std::snprintf(cell, sizeof cell, "%-7s", sys.nodes[c].label().c_str());
    out << cell;
  }
  out << "CPU Affinity\n";
  for (int r : cols) {
    std::snprintf(cell, sizeof cell, "%-8s", sys.nodes[r].label().c_str());
    out << cell;
    for (int c : cols) {
      std::snprintf(cell, sizeof cell, "%-7s", r == c ? "X" : pathTypeName(paths.get(r, c).type));
      out << cell;
    }
    int cpu = -1;
    for (int cand : sys.of(NodeType::kCpu)) {
      if (cpu < 0 || paths.get(r, cand).type < paths.get(r, cpu).type) cpu = cand;
    }
    if (cpu >= 0) out << "NUMA " << sys.nodes[cpu].cpu.numaId << " " << sys.nodes[cpu].cpu.affinity;
    out << "\n";
  }
  out << "\nLegend:\n"
         "  X   = self\n"
         "  SYS = through PCIe and the interconnect between NUMA nodes (QPI/UPI/Infinity Fabric)\n"
         "  PHB = through PCIe and a PCIe host bridge (the CPU)\n"
         "  PXN = GPU to NIC through an NVLink peer GPU\n"
         "  P2C = GPU to NIC through the C2C link and the CPU\n"
         "  PXB = through several PCIe switches, no host bridge\n"
         "  PIX = through at most one PCIe switch\n"
         "  C2C = chip-to-chip link\n"
         "  NVB = NVLink through an intermediate GPU\n"
         "  NVL = NVLink (direct or through NVSwitch)\n";
  return out.str();
}

}  // namespace plait::topo
