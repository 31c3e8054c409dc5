// cost_model.cc — see cost_model.h.
#include "core/cost_model.h"

#include <algorithm>
#include <array>

namespace plait {
namespace {

// Base latency per protocol, µs (NCCL's ring and tree figures, REFERENCE.md).
constexpr std::array<double, kProtocolCount> kBaseUs{6.6, 14.0, 8.4};
constexpr std::array<double, kProtocolCount> kTreeBaseUs{6.8, 14.0, 8.4};

// Per-hop latency, µs, [class][protocol]. NVLink: NCCL's published ring
// figures. PCIe and network: estimates of the same order (a PCIe hop costs
// about twice an NVLink hop; a network hop adds the proxy's hand-offs).
constexpr std::array<std::array<double, kProtocolCount>, kHopClassCount> kHopUs{{
    {0.6, 1.9, 3.4},   // NVLink
    {1.0, 2.5, 5.7},   // PCIe
    {2.7, 4.0, 14.0},  // network
}};

// Simple's efficiency per link class: the busbw published for 8 × A100 on
// NVSwitch (231.5 GB/s over 240 GB/s of NVLink per GPU) and for 2 × 8 A100
// over 8 HDR NICs (183.8 GB/s over 8 × 25 GB/s).
constexpr std::array<double, kHopClassCount> kSimpleEfficiency{0.965, 0.96, 0.92};

}  // namespace

int defaultHostChannels(int cores, int localRanks) {
  return std::clamp(cores / std::max(localRanks, 1), 1, 4);
}

const char* protocolName(Protocol p) {
  switch (p) {
    case Protocol::kLL: return "LL";
    case Protocol::kLL128: return "LL128";
    case Protocol::kSimple: return "Simple";
  }
  return "unknown";
}

const char* hopClassName(HopClass c) {
  switch (c) {
    case HopClass::kNvlink: return "NVLink";
    case HopClass::kPcie: return "PCIe";
    case HopClass::kNet: return "NET";
  }
  return "unknown";
}

int ringSteps(CollType coll, int nranks) {
  if (coll == CollType::kAllReduce) return 2 * (nranks - 1);
  if (coll == CollType::kSend || coll == CollType::kRecv) return 1;
  return nranks - 1;
}

double ringBytesPerLink(CollType coll, int nranks) {
  const double n = nranks;
  switch (coll) {
    case CollType::kAllReduce: return 2.0 * (n - 1) / n;
    case CollType::kAllGather:
    case CollType::kReduceScatter:
    case CollType::kAlltoAll:
    case CollType::kGather:
    case CollType::kScatter: return (n - 1) / n;
    default: return 1.0;
  }
}

HopCounts ringHops(int steps, int nranks, int netHopsPerLoop, HopClass intra) {
  HopCounts h;
  const double net = nranks > 0 ? static_cast<double>(steps) * netHopsPerLoop / nranks : 0;
  const double local = steps - net;
  if (intra == HopClass::kPcie) h.pcie = local;
  else if (intra == HopClass::kNet) h.net = local;
  else h.nvlink = local;
  h.net += net;
  return h;
}

namespace {
double hopsUs(Protocol p, const HopCounts& hops, double netLatencyUs) {
  const int i = static_cast<int>(p);
  return hops.nvlink * kHopUs[0][i] + hops.pcie * kHopUs[1][i] + hops.net * (kHopUs[2][i] + netLatencyUs);
}
}  // namespace

double ringLatencyUs(Protocol p, const HopCounts& hops, double netLatencyUs) {
  return kBaseUs[static_cast<int>(p)] + hopsUs(p, hops, netLatencyUs);
}

// Per-hop latencies of trees: the ring's (NCCL publishes tree figures of the
// same order; a tree's hop count, not its hop cost, is what sets it apart).
double treeLatencyUs(Protocol p, const HopCounts& hops, double netLatencyUs) {
  return kTreeBaseUs[static_cast<int>(p)] + hopsUs(p, hops, netLatencyUs);
}

double protocolEfficiency(Protocol p, HopClass c) {
  const double simple = kSimpleEfficiency[static_cast<int>(c)];
  switch (p) {
    case Protocol::kLL: return 0.5 * simple;
    case Protocol::kLL128: return (120.0 / 128.0) * simple;
    case Protocol::kSimple: return simple;
  }
  return simple;
}

double protocolChannelCeilingGBs(Protocol p) {
  switch (p) {
    case Protocol::kLL: return 8.0;
    case Protocol::kLL128: return 18.0;
    case Protocol::kSimple: return 0;
  }
  return 0;
}

double nvlsEfficiency(int sm) {
  if (sm >= 100) return 0.74;
  if (sm >= 90) return 0.85;
  return 0;
}

double nvlsLatencyUs() { return 25.0; }

int nvlsHeads(int n) { return std::min(n, 32); }

uint64_t protocolMaxBytes(Protocol p) {
  switch (p) {
    case Protocol::kLL: return uint64_t(1) << 20;
    case Protocol::kLL128: return uint64_t(64) << 20;
    case Protocol::kSimple: return ~uint64_t(0);
  }
  return 0;
}

}  // namespace plait
