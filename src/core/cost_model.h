// cost_model.h — the GPU side of the tuner's model: what one hop of a ring
// costs per protocol and link class, and how much of a link's bandwidth each
// protocol's payload gets.
//
// NCCL's form (REFERENCE.md, "Tuning model"): time = latency + bytes /
// bandwidth, latency = base + Σ hops × per-hop latency of the hop's link
// class. The device executor (core/tuner.h devicePlan) prices its ring plans
// with it, and plait-sim (sim/) prices every step it simulates with it, so
// the simulator answers with the library's own model and not a second copy.
//
// Sources of the numbers, per constant below: NCCL's published ring figures
// (REFERENCE.md) for the base and NVLink hop latencies; the PCIe and network
// hop latencies and the protocols' per-channel ceilings are our estimates of
// the same order as NCCL's; the link-class efficiencies of the Simple
// protocol are calibrated on two published nccl-tests results (8 × A100 on
// NVSwitch, 2 × 8 A100 over 8 HDR NICs) and checked against the others in
// tests/sim. None of it is measured by Plait on a GPU (no GPU here).
//
// Pure functions of their arguments: thread-safe, no state.
#pragma once

#include <cstdint>

#include "core/task.h"

namespace plait {

// NCCL's three protocols. Plait's CUDA executor runs Simple only (large FIFO
// steps, a flag per step); LL and LL128 are modelled so that the simulator can
// say what they would change.
enum class Protocol : uint8_t { kLL = 0, kLL128 = 1, kSimple = 2 };
inline constexpr int kProtocolCount = 3;
const char* protocolName(Protocol p);

// The link class a hop crosses: NVLink (or C2C) inside a host, PCIe inside a
// host, or the network between hosts.
enum class HopClass : uint8_t { kNvlink = 0, kPcie = 1, kNet = 2 };
inline constexpr int kHopClassCount = 3;
const char* hopClassName(HopClass c);

struct HopCounts {
  double nvlink = 0;  // hops on the critical path, per class (fractional when averaged)
  double pcie = 0;
  double net = 0;
};

// Host ranks (CPU memory, shared-memory FIFOs): the costs plait-calibrate
// measured on this project's machine class (2-core VM, 2 ranks; each the
// median of 3 runs of perf/host/calibrate.sh, 2026-11-27; the earlier
// estimates, 0.05 / 0.25 / 12000 / 0.30 / 8000, made the ring look 2.5x
// faster than it is and chose it from 2 KiB where one-shot is 1.2-2.5x
// faster up to 32 KiB). PLAIT_HOST_COSTS replaces them with a machine's own
// (core/host_costs.h). The host tuner (core/tuner.h) and plait-sim's host
// mode price with these.
struct HostCosts {
  double callUs = 0.51;              // a call's fixed cost
  double hopUs = 0.32;               // one FIFO step handed to the next rank
  double ringBytesPerUs = 4700;      // per channel, bus bandwidth of a fused ring pass
  double oneShotBytesPerUs = 10000;  // one-shot AllReduce: copy in + n reads, in cache
  double oneShotUs = 0.67;           // one-shot AllReduce's fixed cost (a call and one line hand-off)
};
inline constexpr HostCosts kHostCosts{};

// The communicator's host defaults (src/core/comm.cc's tunables start from
// these; plait-sim's host mode plans with them): shared-memory FIFO shapes,
// and how many channels a host's ranks get.
struct HostShmDefaults {
  int ringStepBytes = 128 << 10;  // PLAIT_SHM_STEP_BYTES
  int ringSteps = 8;              // PLAIT_SHM_STEPS
  int meshStepBytes = 32 << 10;   // PLAIT_SHM_MESH_STEP_BYTES
  int meshMaxRanks = 16;          // PLAIT_SHM_MESH_MAX_RANKS
};
inline constexpr HostShmDefaults kHostShmDefaults{};

// Channels when PLAIT_NCHANNELS is unset: one per core each local rank can
// have to itself, 1 to 4.
int defaultHostChannels(int cores, int localRanks);

// Steps on a ring collective's critical path: AllReduce 2(n-1) (a
// reduce-scatter, then an all-gather); AllGather, ReduceScatter, Broadcast
// and Reduce n-1 (Broadcast and Reduce are chains); AlltoAll, Gather and
// Scatter n-1 exchanges; Send and Recv 1.
int ringSteps(CollType coll, int nranks);

// Bytes each ring link carries per byte of the collective's size (nccl-tests'
// size: the whole buffer; for AllGather and ReduceScatter the gathered one):
// AllReduce 2(n-1)/n; AllGather, ReduceScatter, AlltoAll, Gather, Scatter
// (n-1)/n; Broadcast, Reduce, Send, Recv 1. Equal to nccl-tests'
// bus-bandwidth factor.
double ringBytesPerLink(CollType coll, int nranks);

// The critical path of a ring of `nranks` that crosses the network
// `netHopsPerLoop` times per loop (its host boundaries), inside hosts over
// links of class `intra`: `steps` hops, the network's share of them
// proportional.
HopCounts ringHops(int steps, int nranks, int netHopsPerLoop, HopClass intra);

// Latency of a ring collective in microseconds: the protocol's base latency
// plus each hop on the critical path. `netLatencyUs` is the NIC's own
// latency (the topology's <net latency>), added per network hop.
double ringLatencyUs(Protocol p, const HopCounts& hops, double netLatencyUs = 0);

// Latency of a tree AllReduce (reduce up, broadcast down, pipelined): the
// tree's base latency plus the hops of the way up and down its deepest
// branch (`hops` counts both ways).
double treeLatencyUs(Protocol p, const HopCounts& hops, double netLatencyUs = 0);

// The fraction of a link's bandwidth that carries payload under protocol `p`
// on a link of class `c` (LL: 4 of every 8 bytes; LL128: 120 of 128; Simple:
// the measured efficiency of large transfers).
double protocolEfficiency(Protocol p, HopClass c);

// The most one channel moves under protocol `p`, GB/s (LL and LL128 are
// bounded by the threads of one block polling flags; 0: no ceiling).
double protocolChannelCeilingGBs(Protocol p);

// The largest message (bytes, whole collective) for which the tuner considers
// the protocol at all (NCCL keeps LL to small and LL128 to medium sizes).
uint64_t protocolMaxBytes(Protocol p);

// NVLink SHARP (NVLS): an AllReduce reduced inside the NVSwitches of one
// NVLink domain (each GPU loads its 1/n of the buffer reduced over every
// GPU by the switch, then stores it once for the switch to multicast).
// Each GPU's links to the switches carry S (1 + 1/n) bytes each way for a
// buffer of S bytes, against 2 S (n-1)/n for a ring. Plait's executors do
// not run it (no multimem kernels); the simulator models it because NCCL's
// tuner picks it on NVSwitch systems from Hopper on.
//
// The fraction of an NVLink's bandwidth (the topology's per-link figure)
// that NVLS traffic gets, by compute capability × 10: NCCL's own constants,
// 0.85 on Hopper, 0.74 on Blackwell; 0 before Hopper (no NVLS).
double nvlsEfficiency(int sm);
// NVLS latency on one NVLink domain, µs: NCCL's 25 (no per-hop term: every
// GPU is one switch away).
double nvlsLatencyUs();
// The GPUs of an n-GPU NVLS AllReduce that reduce and multicast a share of
// the buffer each ("heads"): all of them up to NCCL's NVLS arity of 32
// (NCCL_MAX_NVLS_ARITY), then 32. A head's links carry S (1 + 1/heads) each
// way; the others' S.
int nvlsHeads(int n);

}  // namespace plait
