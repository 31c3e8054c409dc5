// paths.h — the best path between every pair of nodes of one system, with its
// type (LOC ... SYS, see PathType) and bottleneck bandwidth, as NCCL defines
// them:
//
//   * a path's bandwidth is the smallest link bandwidth along it;
//   * its type is the worst hop type along it: an NVLink hop is NVL (NVB when
//     it leaves an intermediate GPU), a PCIe hop is PIX, PXB between two PCIe
//     switches, PHB when it touches a CPU; the CPU-CPU link is SYS; a C2C link
//     is C2C; NIC -> port hops are LOC;
//   * routes never pass through a GPU, except one NVLink hop GPU -> GPU -> GPU
//     (NVB; NCCL_NVB_DISABLE=1 forbids it);
//   * among candidate routes the better type wins, then the higher bandwidth,
//     then fewer hops.
// Afterwards, GPU pairs beyond NCCL_P2P_LEVEL are routed through the first
// GPU's CPU (their transports must stage through host memory), GPU -> NIC
// paths worse than PXB go through an NVLink peer close to the NIC when one
// exists (PXN; NCCL_PXN_DISABLE=1 forbids it), and GPU -> C2C -> CPU -> NIC
// paths are labelled P2C.
#pragma once

#include <vector>

#include "topology/system.h"

namespace plait::topo {

struct TopoPath {
  PathType type = PathType::kDis;
  double bw = 0;           // GB/s, bottleneck
  std::vector<int> links;  // link ids from source to destination
};

struct PathOptions {
  // Highest path type over which GPUs may talk directly (NCCL_P2P_LEVEL).
  // Default: SYS, or PXB when the CPUs are Intel, ARM or Zhaoxin (their
  // bridges forward peer traffic badly).
  PathType p2pLevel = PathType::kSys;
  // NCCL_P2P_DISABLE=1: no direct GPU peer access at all (p2pLevel is then
  // LOC too, so paths route through the CPU).
  bool p2pDisable = false;
  bool nvbDisable = false;  // NCCL_NVB_DISABLE
  bool pxnDisable = false;  // NCCL_PXN_DISABLE
  // Highest GPU -> NIC path type for GPUDirect RDMA (NCCL_NET_GDR_LEVEL).
  PathType gdrLevel = PathType::kPxb;
};

// Defaults for this system, then NCCL_P2P_LEVEL / NCCL_P2P_DISABLE,
// NCCL_NVB_DISABLE, NCCL_PXN_DISABLE and NCCL_NET_GDR_LEVEL from the
// environment (also as PLAIT_*). P2P_LEVEL accepts LOC, NVL, NVB, PIX, PXB,
// PHB, SYS or NCCL's legacy integers 0..5.
PathOptions pathOptionsFromEnv(const TopoSystem& system);

class PathTable {
 public:
  PathTable() = default;
  // Computes all paths. Pure function of its inputs; thread-compatible.
  PathTable(const TopoSystem& system, const PathOptions& options);

  const TopoPath& get(int fromNode, int toNode) const { return paths_[fromNode * n_ + toNode]; }
  const TopoPath& gpuToGpu(int a, int b) const { return get(gpus_[a], gpus_[b]); }
  // Whether GPU ordinals a and b may use a direct (P2P) transport: their
  // best physical path is within the P2P level.
  bool p2pAllowed(int a, int b) const { return p2p_[a * nGpus_ + b]; }
  // Whether GPU ordinal g may use GPUDirect RDMA with NET ordinal n.
  bool gdrAllowed(int g, int n) const;
  const PathOptions& options() const { return options_; }

 private:
  int n_ = 0;
  int nGpus_ = 0;
  std::vector<int> gpus_;
  std::vector<TopoPath> paths_;
  std::vector<char> p2p_;
  std::vector<char> gdr_;
  int nNets_ = 0;
  PathOptions options_;
};

// One-line form of a path: "PIX/24.0 GPU0 -> PCI .. -> GPU1".
std::string describePath(const TopoSystem& system, const TopoPath& path);

// The `nvidia-smi topo -m` style matrix between GPUs, NICs (NET ports) and,
// for machines without GPUs, CPUs: path type per cell, then a legend.
std::string pathMatrix(const TopoSystem& system, const PathTable& paths);

}  // namespace plait::topo
