#include "core/tuner.h"

#include <strings.h>

#include <algorithm>
#include <cstdio>

#include "base/config.h"
#include "base/log.h"
#include "core/alg_selection.h"
#include "core/cost_model.h"

namespace plait {
namespace {

PLAIT_PARAM_STRING(kAlgo, "ALGO", "",
                   "algorithms the tuner may use, in NCCL_ALGO's syntax (\"ring\", \"^oneshot\", "
                   "\"allreduce:ring;allgather:ring\"); Plait's are ring, oneshot and tree (default: the cost model "
                   "decides)");
PLAIT_PARAM_STRING(kProto, "PROTO", "",
                   "protocols, in NCCL_PROTO's syntax (\"Simple\", \"^LL128\"); Plait runs only Simple, so a "
                   "setting that leaves it out is reported and ignored");
PLAIT_PARAM_INT(kSliceBytes, "SLICE_BYTES", 0, "bytes per ring FIFO step used by each primitive (0: tuned by size)");
PLAIT_PARAM_INT(kChunkBytes, "CHUNK_BYTES", 0, "bytes per rank per ring loop (0: tuned by size)");
PLAIT_PARAM_INT(kNtThreshold, "NT_STORE_THRESHOLD", 32 << 20,
                "message bytes above which outputs are written with non-temporal stores");

}  // namespace

const char* algorithmName(Algorithm algo) {
  switch (algo) {
    case Algorithm::kCopy: return "copy";
    case Algorithm::kOneShot: return "oneshot";
    case Algorithm::kRing: return "ring";
    case Algorithm::kTree: return "tree";
  }
  return "unknown";
}

std::string Plan::toString() const {
  char buf[160];
  snprintf(buf, sizeof(buf), "algo %s channels %d slice %zu B chunk %zu B%s predicted %.2f us", algorithmName(algo),
           nChannels, sliceBytes, chunkBytes, nonTemporal ? " nt-stores" : "", predictedUs);
  return buf;
}

namespace {

// NCCL_PROTO / PLAIT_PROTO: "[^]name[,name...]" over LL, LL128, Simple.
// Plait's executors run Simple only; a setting that excludes it cannot be
// honoured, and an unknown name is a mistake worth saying.
void checkProtocols(const std::string& text, const std::string& source) {
  std::string_view rest = text;
  const bool exclude = !rest.empty() && rest.front() == '^';
  if (exclude) rest.remove_prefix(1);
  bool simpleNamed = false;
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    std::string name(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    name.erase(0, name.find_first_not_of(" \t"));
    name.erase(name.find_last_not_of(" \t") + 1);
    if (strcasecmp(name.c_str(), "simple") == 0) {
      simpleNamed = true;
    } else if (strcasecmp(name.c_str(), "ll") != 0 && strcasecmp(name.c_str(), "ll128") != 0) {
      PLAIT_WARN(kTuning, "%s=\"%s\" names an unknown protocol \"%s\" (LL, LL128, Simple); ignoring the setting",
                 source.c_str(), text.c_str(), name.c_str());
      return;
    }
  }
  if (simpleNamed == exclude)
    PLAIT_WARN(kTuning, "%s=\"%s\" leaves out Simple, the only protocol Plait runs; ignoring it", source.c_str(),
               text.c_str());
}

}  // namespace

Tuner::Tuner(const TunerInputs& inputs) : in_(inputs) {
  for (size_t c = 0; c < trees_.size(); ++c)  // asked on every call: worked out once
    trees_[c].runs = computeTreeShape(static_cast<CollType>(c), &trees_[c].hops, &trees_[c].perByte);
  if (const std::string& proto = kProto.get(); !proto.empty()) checkProtocols(proto, kProto.source());
  const std::string& algo = kAlgo.get();
  if (algo.empty()) return;
  // Per collective: what the setting allows of Plait's ring, one-shot and tree
  // (direct and symmetric are the registered-buffer paths, not the tuner's).
  std::string refused;
  for (int c = 0; c <= static_cast<int>(CollType::kRecv); ++c) {
    auto sel = parseAlgSelection(algo.c_str(), static_cast<CollType>(c));
    if (!sel.isOk()) {
      PLAIT_WARN(kTuning, "%s: %s; ignoring it", kAlgo.source().c_str(), sel.status().message().c_str());
      envAlgos_.fill(0);
      return;
    }
    if (!sel->restricted) continue;
    const CollType coll = static_cast<CollType>(c);
    const bool hasTree = coll == CollType::kAllReduce || coll == CollType::kAllGather ||
                         coll == CollType::kBroadcast || coll == CollType::kReduce;
    envAlgos_[c] = sel->algos & (kAlgoRing | kAlgoOneShot | (hasTree ? kAlgoTree : 0));
    // AlltoAll, Gather, Scatter and Send/Recv are point-to-point: no tuner choice to restrict.
    const bool tuned = c <= static_cast<int>(CollType::kReduceScatter);
    if (envAlgos_[c] == 0 && tuned)
      refused += (refused.empty() ? "" : ", ") + std::string(collName(static_cast<CollType>(c)));
  }
  if (!refused.empty())
    PLAIT_WARN(kTuning,
               "%s=\"%s\" allows %s none of Plait's algorithms (ring, oneshot; tree but for ReduceScatter); the "
               "tuner chooses there",
               kAlgo.source().c_str(), algo.c_str(), refused.c_str());
}

// A FIFO hand-off. With a core per rank, hopUs; when ranks share cores, a
// hand-off of AllReduce, AllGather or ReduceScatter waits for the peer to be
// scheduled, and the peer may be waiting on another: hopUs / share^2, a fit
// to perf/host/log_depth.sh (the ring AllReduce at 4-32 KiB spends about
// 1.5 us per hop at 4 ranks on 2 cores and 3.5-5 us at 8; this gives 1.3 and
// 5.1). Broadcast and Reduce have no cycle (no rank waits for one that
// waits for it), so calls overlap their hand-offs: hopUs (their chain took
// 3.2 us per 4 KiB call through 7 hops at 8 ranks on 2 cores).
double Tuner::handOffUs(CollType coll) const {
  if (coll == CollType::kBroadcast || coll == CollType::kReduce) return in_.costs.hopUs;
  return in_.costs.hopUs / (in_.cpuShare * in_.cpuShare);
}

// Its one hand-off (in oneShotUs) waits like any other when cores are shared.
double Tuner::oneShotUs(CollType coll, size_t bytes) const {
  const HostCosts& c = in_.costs;
  return c.oneShotUs + (handOffUs(coll) - c.hopUs) +
         static_cast<double>(bytes) * in_.nranks / (c.oneShotBytesPerUs * in_.cpuShare);
}

// Halving-doubling AllReduce: 2 log2(p) exchanges (p the largest power of
// two in n) of about the ring's bytes, plus, when n is not one, a fold of
// the whole buffer each way. Binomial Broadcast and Reduce: ceil(log2 n)
// hops, the root moving the whole buffer once per child. Recursive-doubling
// AllGather (power-of-two n only): log2 n exchanges. One channel (the
// calling thread).
// Hops and bytes per byte of the buffer on the critical path; false where no
// log-depth schedule runs.
bool Tuner::treeShape(CollType coll, double* hops, double* perByte) const {
  const TreeShape& t = trees_[static_cast<size_t>(coll)];
  *hops = t.hops;
  *perByte = t.perByte;
  return t.runs;
}

bool Tuner::computeTreeShape(CollType coll, double* hops, double* perByte) const {
  const int n = in_.nranks;
  if (!in_.fullMesh || in_.meshStepBytes == 0 || n < 2) return false;
  int log2n = 0;
  while ((1 << (log2n + 1)) <= n) ++log2n;
  const bool pow2 = (1 << log2n) == n;
  if (coll == CollType::kAllReduce) {
    // The ring's bytes, and 15% more: each exchange copies what it sends
    // into the FIFO apart from reducing what it keeps, where the ring fuses
    // the two (perf/results/host/log_depth.md, 256 KiB on 2 cores, where hops
    // weigh little: 1.12x the ring's time at 8 ranks, 1.44x at 4).
    const double p = 1 << log2n;
    *hops = 2 * log2n + (pow2 ? 0 : 2);
    *perByte = 1.15 * 2 * (p - 1) / p + (pow2 ? 0 : 2);
    return true;
  }
  if (coll == CollType::kBroadcast || coll == CollType::kReduce) {
    *hops = log2n + (pow2 ? 0 : 1);
    *perByte = *hops;  // the root's children, one copy each
    return true;
  }
  if (coll == CollType::kAllGather && pow2) {
    // The ring's bytes at the ring's rate: the exchanges copy into and out
    // of the FIFO (4(n-1) accesses per element of a block in all, against
    // the ring's 3n-1), yet measured at one channel they were as fast or
    // faster at every size (perf/results/host/log_depth.md).
    *hops = log2n;
    *perByte = ringBytesPerLink(coll, n);
    return true;
  }
  return false;
}

double Tuner::treeUs(CollType coll, size_t bytes) const {
  double hops = 0, perByte = 0;
  if (!treeShape(coll, &hops, &perByte)) return 1e30;
  const HostCosts& c = in_.costs;
  return c.callUs + hops * handOffUs(coll) + perByte * static_cast<double>(bytes) / (c.ringBytesPerUs * in_.cpuShare);
}

// Bytes each link carries and hand-offs on the critical path, per
// collective (core/cost_model.h): a ring AllReduce is a reduce-scatter and an
// all-gather; Broadcast and Reduce are chains that carry the whole buffer once.
double Tuner::ringUs(CollType coll, size_t bytes, int nChannels) const {
  const int n = in_.nranks;
  const HostCosts& c = in_.costs;
  return c.callUs + ringSteps(coll, n) * handOffUs(coll) +
         ringBytesPerLink(coll, n) * static_cast<double>(bytes) / (c.ringBytesPerUs * nChannels * in_.cpuShare);
}

// A rank's share of a host ring channel: one block of the buffer, except in
// the chains (Broadcast, Reduce), which carry all of it through every link, so
// their slices are the whole share up to a step (perf/host/chain_slices.sh:
// 0.5-0.85x the time of slices of one block from 64 KiB, at 2 and 4 ranks).
// Below 16 KiB with a core per rank, a block still: two slices pipeline
// across the cores there (one 8 KiB slice took 1.15x as long). The device
// path keeps one block (its kernels' costs are not measured here).
size_t Tuner::hostSliceShare(CollType coll, size_t bytes, int nChannels) const {
  const bool chain = (coll == CollType::kBroadcast || coll == CollType::kReduce) &&
                     (in_.cpuShare < 1 || bytes / nChannels >= (size_t(16) << 10));
  return std::max<size_t>(1, bytes / (chain ? 1 : in_.nranks) / nChannels);
}

void Tuner::fillRingSlicing(size_t perRank, size_t bytes, Plan* plan, size_t step, int steps) const {
  if (step == 0) step = in_.ringStepBytes;
  if (steps == 0) steps = in_.ringSteps;
  // Slices as large as the step allows: each FIFO step costs a hand-off of
  // cache lines between cores, and measured here (perf/results) small slices
  // lose 3-4x to whole steps from 64 KiB up. Chunks are at most half the FIFO
  // so a rank can run ahead (and the ring cannot deadlock).
  size_t slice = std::clamp<size_t>(perRank, 4096, step);
  size_t chunk = std::clamp<size_t>(perRank, slice, slice * std::max(1, steps / 2));
  if (kSliceBytes.get() > 0) slice = std::min<size_t>(kSliceBytes.get(), step);
  if (kChunkBytes.get() > 0) chunk = std::max<size_t>(kChunkBytes.get(), slice);
  // The executor caps chunks at half the FIFO (deadlock freedom); say so here too.
  chunk = std::min(chunk, slice * std::max(1, steps / 2));
  plan->sliceBytes = slice & ~size_t(63);
  plan->chunkBytes = chunk & ~size_t(63);
  if (plan->sliceBytes == 0) plan->sliceBytes = 64;
  if (plan->chunkBytes == 0) plan->chunkBytes = plan->sliceBytes;
  plan->nonTemporal = bytes >= static_cast<size_t>(kNtThreshold.get());
}

Plan Tuner::plan(const Task& task, size_t bytes) const {
  Plan plan;
  if (in_.nranks == 1) {
    plan.algo = Algorithm::kCopy;
    plan.predictedUs = in_.costs.callUs + static_cast<double>(bytes) / in_.costs.oneShotBytesPerUs;
    return plan;
  }
  // The one-shot's reach (core/one_shot.cc): AllReduce up to the mesh's
  // message size; AllGather and ReduceScatter blocks, Broadcast and Reduce
  // buffers up to a line-FIFO message. Its cost is per byte a rank sends to
  // each peer: the block for AllGather and ReduceScatter.
  const bool blocked = task.coll == CollType::kAllGather || task.coll == CollType::kReduceScatter;
  const size_t message = blocked ? bytes / static_cast<size_t>(in_.nranks) : bytes;
  bool oneShotFits = false;
  if (task.coll == CollType::kAllReduce) oneShotFits = bytes <= std::max(in_.meshStepBytes, in_.lineMaxBytes);
  else if (blocked || task.coll == CollType::kBroadcast || task.coll == CollType::kReduce)
    oneShotFits = message <= in_.lineMaxBytes;
  oneShotFits = oneShotFits && in_.fullMesh;
  // The tuner's own choice for those four: the one-shot from 3 ranks, where
  // the ring takes n-1 hops to its one; at 2 ranks, where both take one, up
  // to 512 bytes: beyond, a FIFO step's single copy beats the lines' per-line
  // work (perf/results/host/one_shot.md). A selection may still ask for it.
  const bool ringFirst = task.coll != CollType::kAllReduce && in_.nranks == 2 && message > 512;
  const double tOne = oneShotFits ? oneShotUs(task.coll, message) : 1e30;
  auto oneShot = [&] {
    plan.algo = Algorithm::kOneShot;
    plan.predictedUs = tOne;
    plan.sliceBytes = bytes;
    plan.chunkBytes = bytes;
    return plan;
  };
  // The latency path: with no selection in force, a one-shot that beats even
  // the ring's fixed costs wins without the ring's plan being worked out
  // (a third of the tuner's time per small call).
  const bool unrestricted = task.algos == 0 && envAlgos_[static_cast<size_t>(task.coll)] == 0;
  // The binomial trees (Broadcast, Reduce) lost to the chains at every size
  // measured (perf/results/host/log_depth.md): only a selection runs them.
  const bool treeByDefault = task.coll == CollType::kAllReduce || task.coll == CollType::kAllGather;
  if (oneShotFits && unrestricted && !ringFirst) {
    double hops = ringSteps(task.coll, in_.nranks), treeHops = 0, perByte = 0;
    if (treeByDefault && treeShape(task.coll, &treeHops, &perByte)) hops = std::min(hops, treeHops);
    if (tOne <= in_.costs.callUs + hops * handOffUs(task.coll)) return oneShot();
  }
  const Plan ring = ringPlan(task, bytes);
  const double tTree = treeUs(task.coll, bytes);
  // What can run this call, and what the tuner would pick from on its own.
  const uint8_t fits = kAlgoRing | (oneShotFits ? kAlgoOneShot : 0) | (tTree < 1e30 ? kAlgoTree : 0);
  uint8_t ok = fits & ~((ringFirst ? kAlgoOneShot : 0) | (treeByDefault ? 0 : kAlgoTree));
  if (task.algos != 0) {  // the call's own selection
    if (const uint8_t sel = task.algos & fits; sel != 0) ok = sel;
    else if (task.forceAlgos) {
      plan.refused = true;
      return plan;
    }
  } else if (const uint8_t env = envAlgos_[static_cast<size_t>(task.coll)]; (env & fits) != 0) {
    // PLAIT_ALGO / NCCL_ALGO: honoured where it leaves something runnable
    // (a one-shot selection for a size beyond the mesh: the tuner chooses).
    ok = env & fits;
  }
  // The cheapest allowed; ties go to the one-shot, then the ring.
  const double tRing = (ok & kAlgoRing) ? ring.predictedUs : 1e30;
  const double tO = (ok & kAlgoOneShot) ? tOne : 1e30, tT = (ok & kAlgoTree) ? tTree : 1e30;
  if (tO < 1e30 && tO <= tRing && tO <= tT) return oneShot();
  if (tT < tRing) {
    plan.algo = Algorithm::kTree;
    plan.predictedUs = tTree;
    plan.sliceBytes = in_.meshStepBytes;
    plan.chunkBytes = bytes;
    plan.nonTemporal = ring.nonTemporal;
    return plan;
  }
  return ring;
}

int Tuner::boundedChannels(const Task& task, int channels, int most) {
  if (task.minChannels > 0) channels = std::max(channels, task.minChannels);
  if (task.maxChannels > 0) channels = std::min(channels, task.maxChannels);
  return std::clamp(channels, 1, std::max(1, most));
}

Plan Tuner::ringPlan(const Task& task, size_t bytes) const {
  Plan plan;
  // More channels only pay when each gets a useful share of the buffer.
  int channels = in_.nChannels;
  while (channels > 1 && bytes / static_cast<size_t>(channels) < (size_t(256) << 10)) --channels;
  channels = boundedChannels(task, channels, in_.nChannels);
  plan.algo = Algorithm::kRing;
  plan.nChannels = channels;
  plan.predictedUs = ringUs(task.coll, bytes, channels);
  fillRingSlicing(hostSliceShare(task.coll, bytes, channels), bytes, &plan);
  return plan;
}

Plan Tuner::devicePlan(const Task& task, size_t bytes, int maxChannels) const {
  Plan plan;
  constexpr size_t kBytesPerChannel = size_t(256) << 10;
  const size_t wanted = (bytes + kBytesPerChannel - 1) / kBytesPerChannel;
  plan.algo = Algorithm::kRing;
  plan.nChannels = static_cast<int>(std::clamp<size_t>(wanted, 1, static_cast<size_t>(std::max(1, maxChannels))));
  plan.nChannels = boundedChannels(task, plan.nChannels, maxChannels);
  // The kernels' hand-offs are GPU hops (NVLink inside a host, the proxy's
  // network hops between hosts) at the Simple protocol's latency; the bytes
  // move at the host model's rate until the device path measures its own.
  const int n = in_.nranks;
  const HopCounts hops = ringHops(ringSteps(task.coll, n), n, in_.nHosts > 1 ? in_.nHosts : 0, HopClass::kNvlink);
  plan.predictedUs = ringLatencyUs(Protocol::kSimple, hops) + ringUs(task.coll, bytes, plan.nChannels) -
                     in_.costs.callUs - ringSteps(task.coll, n) * handOffUs(task.coll);
  fillRingSlicing(std::max<size_t>(1, bytes / n / plan.nChannels), bytes, &plan, in_.deviceRingStepBytes,
                  in_.deviceRingSteps);
  return plan;
}

}  // namespace plait
