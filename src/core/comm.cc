// comm.cc — communicator creation, transports, lifecycle.
#include "core/comm.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <optional>
#include <set>
#include <thread>
#include <type_traits>

#include "base/cma.h"
#include "base/config.h"
#include "base/log.h"
#include "base/shm.h"
#include "base/wait.h"
#include "core/cost_model.h"
#include "core/host_costs.h"
#include "core/live_ranks.h"
#include "core/status_report.h"
#include "topology/topology.h"

namespace plait {
namespace {

PLAIT_PARAM_INT(kInitTimeout, "INIT_TIMEOUT", 300, "seconds communicator creation may wait for all ranks");
PLAIT_PARAM_INT(kNChannels, "NCHANNELS", 0, "channels per communicator (0: one per spare core, at most 4)");
// Where every rank is on this host with a core of its own, the ring and
// point-to-point FIFOs get more steps: a step's buffer comes round again
// only 32 steps after the receiver last read it, and the sender's writes to
// it no longer wait for the lines to leave the receiver's cache (two
// threads handing 8 KiB steps through 8 buffers took 1.7x as long as
// through 32, bench_fifo's BM_FifoStream). At 2 ranks (Intel host,
// 2026-11-30, perf/results/host/fifo_steps.md) that took 0.62-0.89x the time
// of 4-16 KiB AllGather, ReduceScatter, Broadcast, Reduce, Gather and
// Scatter and 0.63-0.87x of 256 KiB ReduceScatter and Reduce and 1 MiB
// AllReduce and Broadcast, other cells 0.90-1.14x; with 4
// ranks on the 2 cores the results went both ways (0.6-1.5x), so shared
// cores and several hosts (whose ring shape must match) keep 8 steps, and
// so do rings with more than 8 FIFOs on the host (ranks x channels: the 32
// steps double a ring FIFO's memory, 1 MiB more each).
PLAIT_PARAM_INT(kRingStepBytes, "SHM_STEP_BYTES", -1,
                "bytes per shared-memory ring FIFO step (-1: 64 KiB where every rank is on this host with a core "
                "of its own and the host has at most 8 ring FIFOs, else 128 KiB)");
PLAIT_PARAM_INT(kRingSteps, "SHM_STEPS", -1,
                "steps per shared-memory ring FIFO (-1: 32 where every rank is on this host with a core of its "
                "own and the host has at most 8 ring FIFOs, else 8)");
PLAIT_PARAM_INT(kMeshStepBytes, "SHM_MESH_STEP_BYTES", kHostShmDefaults.meshStepBytes,
                "bytes per step of the all-pairs FIFOs (bounds the one-shot all-reduce)");
PLAIT_PARAM_INT(kMeshSteps, "SHM_MESH_STEPS", 4, "steps per all-pairs FIFO");
PLAIT_PARAM_INT(kP2pStepBytes, "SHM_P2P_STEP_BYTES", -1,
                "bytes per step of the point-to-point FIFOs between local ranks (-1: 16 KiB where every rank is on "
                "this host with a core of its own, else 64 KiB)");
PLAIT_PARAM_INT(kP2pSteps, "SHM_P2P_STEPS", -1,
                "steps per point-to-point FIFO between local ranks (-1: 32 where every rank is on this host with a "
                "core of its own, else 8)");
PLAIT_PARAM_INT(kNetP2pStepBytes, "NET_P2P_STEP_BYTES", 64 << 10,
                "bytes per step of the point-to-point connectors to ranks on other hosts");
PLAIT_PARAM_INT(kNetP2pSteps, "NET_P2P_STEPS", 8, "steps per point-to-point connector to a rank on another host");
PLAIT_PARAM_INT(kMeshMaxRanks, "SHM_MESH_MAX_RANKS", kHostShmDefaults.meshMaxRanks,
                "largest number of local ranks connected all to all");

// On where permitted (every local rank must be able to read the others:
// probeCma; Yama's ptrace_scope 1 forbids it between sibling processes).
// process_vm_readv copies slower per byte than memcpy on this project's VM
// (page walks under virtualisation), but one copy instead of two: Send/Recv
// and AlltoAll messages from 16 KiB (P2P_CMA_MIN_BYTES) take 0.45-0.8x the
// time up to 1 MiB, 0.7-1.0x above (perf/host/p2p_cma.sh, 2 and 4 ranks);
// AlltoAll only where each local rank has a core (PLAIT_ALLTOALL_CMA below).
// Scatter uses it for mid-size blocks, and Gather's mid-size blocks (AlltoAll's
// where ranks share cores) are written by their senders instead (src/core/p2p.cc).
PLAIT_PARAM_INT(kP2pCma, "P2P_CMA", 1,
                "1: point-to-point messages between local processes from P2P_CMA_MIN_BYTES up are read in place "
                "with process_vm_readv (single copy), or written with process_vm_writev (PLAIT_P2P_PUT_*), where "
                "the system permits it; 0: always through the FIFO");

// AlltoAll's single copies tie a rank's call to its peers: it ends only once
// every peer has read its buffer, and with two ranks per core that waits for
// each of them to be scheduled, where a FIFO step lets the sender go on. At 4
// ranks on this project's 2-core VM the FIFO path took 0.51-0.91x the time of
// the single copies from 64 KiB to 16 MiB (two runs of 9 interleaved rounds,
// perf/results/host/alltoall_cma.md); with a core per rank they stay. In
// the VM's slow windows the 4-rank 1 MiB AlltoAll took 486-528 us through the
// FIFOs against 162-299 by single copies, 157-247 as measured and chosen
// (perf/results/host/windows.md), so where the direct path chooses by
// measurement (PLAIT_DIRECT_CMA_ADAPT) it tries and may keep them.
PLAIT_PARAM_INT(kAlltoAllCma, "ALLTOALL_CMA", -1,
                "AlltoAll's single copies by cross-memory attach (point-to-point and direct path): 1 on, 0 off, "
                "-1 off where the local ranks share cores (unless measured faster on the direct path; there the "
                "blocks of PLAIT_P2P_PUT_MIN_BYTES to _MAX_BYTES are written by their senders instead), else on");

// Whether every local rank can read every other local rank's memory with
// process_vm_readv (ptrace permission): each reads its peers' probe words,
// then all agree on the result. Collective over all ranks.
Result<bool> probeCma(Bootstrap& b, const std::vector<int>& localRanks, Deadline deadline) {
  struct Probe {
    int32_t pid;
    int32_t ok;
    uint64_t addr;
    uint64_t value;
  };
  static_assert(std::has_unique_object_representations_v<Probe>, "no padding goes over the bootstrap");
  std::vector<Probe> all(b.nranks());
  Probe& mine = all[b.rank()];
  mine.pid = static_cast<int32_t>(getpid());
  mine.ok = kP2pCma.get() != 0;
  mine.addr = reinterpret_cast<uint64_t>(cmaProbeWord());
  mine.value = *cmaProbeWord();
  PLAIT_RETURN_IF_ERROR(b.allGather(all.data(), sizeof(Probe), deadline));
  int32_t ok = mine.ok;
  for (int r : localRanks) {
    uint64_t seen = 0;
    if (r == b.rank() || !ok) continue;
    // The pid every path will use is the bootstrap's; the probe's must be it,
    // and a process of its own (cmaPeerPidError).
    std::string pidWhy = all[r].pid == b.peer(r).pid ? cmaPeerPidError(all[r].pid)
                                                     : "its probe's pid " + std::to_string(all[r].pid) +
                                                           " is not the bootstrap's " + std::to_string(b.peer(r).pid);
    if (!pidWhy.empty() && all[r].pid != mine.pid) {  // ranks that are threads of this process share its pid
      PLAIT_INFO(kInit, "cross-memory attach to rank %d is not used: %s; point-to-point goes through FIFOs", r,
                 pidWhy.c_str());
      ok = 0;
      continue;
    }
    if (int err = cmaRead(all[r].pid, &seen, all[r].addr, sizeof(seen)); err != 0 || seen != all[r].value) {
      // Ranks that are threads of one process share a pid: cmaRead refuses it.
      PLAIT_INFO(kInit, "cross-memory attach to rank %d (pid %d) is not used (%s): point-to-point goes through FIFOs",
                 r, all[r].pid, err ? cmaErrorText(all[r].pid, err).c_str() : "probe value differs");
      ok = 0;
    }
  }
  all[b.rank()].ok = ok;
  PLAIT_RETURN_IF_ERROR(b.allGather(all.data(), sizeof(Probe), deadline));
  for (int r : localRanks)
    if (!all[r].ok) return false;
  return true;
}

// A FIFO shape from its two tunables, checked on the 64-bit values before
// any narrowing, so that -64 or 2^61 cannot wrap into a valid-looking size.
// A value of -1 takes `automatic`'s, where one is given.
Result<FifoShape> fifoShapeFrom(const config::IntParam& steps, const config::IntParam& bytes,
                                std::optional<FifoShape> automatic = std::nullopt) {
  int64_t n = steps.get(), b = bytes.get();
  if (automatic && n == -1) n = automatic->nSteps;
  if (automatic && b == -1) b = static_cast<int64_t>(automatic->stepBytes);
  if (n < 1 || n > kMaxFifoSteps)
    return invalidArgument(std::string("PLAIT_") + steps.name() + "=" + std::to_string(n) +
                           " is out of range: steps per FIFO must be in [1, " + std::to_string(kMaxFifoSteps) + "]");
  if (b < 64 || static_cast<uint64_t>(b) > kMaxFifoStepBytes || b % 64 != 0)
    return invalidArgument(std::string("PLAIT_") + bytes.name() + "=" + std::to_string(b) +
                           " is out of range: bytes per FIFO step must be a multiple of 64 in [64, " +
                           std::to_string(kMaxFifoStepBytes) + "]");
  return FifoShape{static_cast<int>(n), static_cast<size_t>(b)};
}

// The FIFO shapes from their tunables; coreEach: every rank is on this host
// with a core of its own, moreRingSteps: and the ring FIFOs may take 32 steps
// (the same on every rank: from the exchanged masks).
Status setFifoShapes(ShmTransportOptions& so, bool coreEach, bool moreRingSteps = false) {
  const FifoShape ring{kHostShmDefaults.ringSteps, static_cast<size_t>(kHostShmDefaults.ringStepBytes)};
  PLAIT_ASSIGN_OR_RETURN(so.ring,
                         fifoShapeFrom(kRingSteps, kRingStepBytes, moreRingSteps ? FifoShape{32, 64 << 10} : ring));
  PLAIT_ASSIGN_OR_RETURN(so.mesh, fifoShapeFrom(kMeshSteps, kMeshStepBytes));
  PLAIT_ASSIGN_OR_RETURN(so.p2p, fifoShapeFrom(kP2pSteps, kP2pStepBytes,
                                               coreEach ? FifoShape{32, 16 << 10} : FifoShape{8, 64 << 10}));
  PLAIT_ASSIGN_OR_RETURN(so.netP2p, fifoShapeFrom(kNetP2pSteps, kNetP2pStepBytes));
  return Status::ok();
}

int usableCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

Status Communicator::init(const ncclUniqueId& id, const CommOptions& options) {
  log::ScopedLogRank logRank(rank_);
  {
    std::lock_guard<std::mutex> lock(partsMu_);
    initRunning_ = true;
  }
  Status s = initSteps(id, options);
  {
    std::lock_guard<std::mutex> lock(partsMu_);
    initRunning_ = false;
  }
  // An abort that arrived while initSteps built the parts only raised the
  // flag (which every wait of init watches); abort the parts now.
  if (abortFlag_.load(std::memory_order_acquire) != 0) abortParts();
  if (s.isOk()) registerForStatusReports(this);
  if (!s.isOk()) {
    initFailed_ = true;
    abort();
    // A peer that died makes its neighbours fail with "connection closed";
    // name the dead (of the parent too: a split's new root may be the one).
    if (s.code() == Code::kRemoteError) {
      s = withDeadPeers(std::move(s));
      s = Status(s.code(), s.message() + deadPeersText(options.parentPeers, nullptr, " of the parent communicator"));
    }
    s.withContext("creating rank " + std::to_string(rank_) + " of " + std::to_string(nranks_));
  }
  return s;
}

Status Communicator::initSteps(const ncclUniqueId& id, const CommOptions& options) {
  name_ = options.name;
  cudaDev_ = options.cudaDev;
  timeoutMs_ = operationTimeoutMs();
  const Deadline deadline = Deadline::afterMs(secondsToWaitMs(std::max<int64_t>(kInitTimeout.get(), 1)));
  BootstrapOptions bopts;
  bopts.deadline = deadline;
  bopts.abortFlag = &abortFlag_;
  bopts.rootPid = options.rootPid;
  PLAIT_ASSIGN_OR_RETURN(bootstrap_, Bootstrap::create(id, rank_, nranks_, bopts));

  // Channels: as many as the host's cores allow without oversubscribing,
  // agreed on by all ranks (the minimum of what each can afford).
  std::vector<int> local;
  for (int r = 0; r < nranks_; ++r)
    if (bootstrap_->peer(r).hostHash == bootstrap_->peer(rank_).hostHash) local.push_back(r);
  int want = static_cast<int>(kNChannels.get());
  if (want <= 0) want = defaultHostChannels(usableCores(), static_cast<int>(local.size()));
  if (options.maxChannels > 0) want = std::min(want, options.maxChannels);
  PLAIT_ASSIGN_OR_RETURN(const bool wantLive, liveRanksRequested());
  liveMode_ = !options.liveChild && wantLive;
  PLAIT_ASSIGN_OR_RETURN(const int nChannels, agreeOnSettings(want, deadline));
  PLAIT_RETURN_IF_ERROR(connectTransports(deadline, nChannels));
  PLAIT_ASSIGN_OR_RETURN(board_, OpBoard::create(*bootstrap_, local, deadline));
  if (local.size() < static_cast<size_t>(nranks_)) {  // every rank sees the same table: all or none create it
    std::vector<int> remote;
    for (int r = 0; r < nranks_; ++r)
      if (std::find(local.begin(), local.end(), r) == local.end()) remote.push_back(r);
    PLAIT_ASSIGN_OR_RETURN(status_,
                           OpStatus::create(*bootstrap_, std::move(remote), &announced_, &announcedNs_, deadline));
  }
  if (nChannels > 1) workers_ = std::make_unique<ChannelWorkers>(nChannels - 1);
  if (liveMode_) {
    auto live = std::make_unique<LiveRanks>(this, options);
    std::lock_guard<std::mutex> lock(partsMu_);  // abort() reads it from any thread
    live_ = std::move(live);
  }
  PLAIT_INFO(kInit, "comm %s rank %d nranks %d: %zu local rank(s), %d channel(s)", name_.c_str(), rank_, nranks_,
             local.size(), nChannels);
  return Status::ok();
}

// What every rank must run alike, agreed over the bootstrap: the channels
// (the fewest any rank can afford), the reproducible mode (a difference
// fails init on every rank alike: its collectives take other paths) and
// the host costs the tuner plans with (rank 0's PLAIT_HOST_COSTS, or the
// defaults: a plan that differed between ranks would deadlock).
Result<int> Communicator::agreeOnSettings(int wantChannels, Deadline deadline) {
  PLAIT_ASSIGN_OR_RETURN(reproducible_, reproducibleMode());
  std::string costsFile;
  PLAIT_ASSIGN_OR_RETURN(HostCosts costs, hostCostsFromEnvironment(&costsFile));
  struct Wants {
    int32_t channels;
    int32_t reproducible;
    int32_t live;
    int32_t p2pLineMax;  // PLAIT_P2P_LINE_MAX_BYTES (rank 0's counts: both ends of a block must agree)
    HostCosts costs;  // doubles only: no padding goes over the wire
  };
  static_assert(sizeof(HostCosts) % sizeof(double) == 0 && sizeof(Wants) == 4 * sizeof(int32_t) + sizeof(HostCosts));
  std::vector<Wants> wants(nranks_, Wants{0, 0, 0, 0, HostCosts{}});
  const int32_t p2pLineMax = lineP2pSetting();
  wants[rank_] = Wants{wantChannels, reproducible_, liveMode_ ? 1 : 0, p2pLineMax, costs};
  PLAIT_RETURN_IF_ERROR(bootstrap_->allGather(wants.data(), sizeof(Wants), deadline));
  int nChannels = wantChannels;
  for (int r = 0; r < nranks_; ++r) {
    nChannels = std::min(nChannels, static_cast<int>(wants[r].channels));
    if (wants[r].reproducible != wants[0].reproducible)
      return invalidUsage("PLAIT_REPRODUCIBLE differs across ranks: rank 0 has " +
                          std::to_string(wants[0].reproducible) + ", rank " + std::to_string(r) + " has " +
                          std::to_string(wants[r].reproducible) + "; every rank must use the same mode");
    if (wants[r].live != wants[0].live)
      return invalidUsage("PLAIT_LIVE_RANKS differs across ranks: rank 0 has " + std::to_string(wants[0].live) +
                          ", rank " + std::to_string(r) + " has " + std::to_string(wants[r].live) +
                          "; every rank must use the same mode");
  }
  if (nChannels < 1) return remoteError("a rank asked for " + std::to_string(nChannels) + " channels");
  p2pLineSetting_ = wants[0].p2pLineMax;
  if (p2pLineMax != p2pLineSetting_)
    PLAIT_WARN(kInit, "rank %d: PLAIT_P2P_LINE_MAX_BYTES is %d here, %d on rank 0; every rank uses rank 0's", rank_,
               p2pLineMax, p2pLineSetting_);
  PLAIT_RETURN_IF_ERROR(checkHostCosts(wants[0].costs, "rank 0's host costs"));
  hostCosts_ = wants[0].costs;
  if (std::memcmp(&costs, &hostCosts_, sizeof costs) != 0)
    PLAIT_WARN(kInit, "rank %d: its host costs (%s) differ from rank 0's; every rank plans with rank 0's", rank_,
               costsFile.empty() ? "the defaults" : costsFile.c_str());
  else if (!costsFile.empty())
    PLAIT_INFO(kInit, "rank %d: host costs from %s: call %.3g us, hop %.3g us, ring %.4g B/us per channel, "
               "one-shot %.3g us + %.4g B/us", rank_, costsFile.c_str(), costs.callUs, costs.hopUs,
               costs.ringBytesPerUs, costs.oneShotUs, costs.oneShotBytesPerUs);
  return nChannels;
}

Status Communicator::connectTransports(Deadline deadline, int nChannels) {
  PLAIT_RETURN_IF_ERROR(checkP2pSettings());
  if (const int64_t v = kAlltoAllCma.get(); v < -1 || v > 1)
    return invalidArgument("PLAIT_ALLTOALL_CMA is " + std::to_string(v) + "; must be -1 (off where the local ranks "
                           "share cores), 0 or 1");
  // Rings from the topology layer: ranks of a host contiguous (each host
  // boundary crossed once per direction), NUMA domains contiguous inside a
  // host, channels rotated so different ranks carry the inter-host traffic.
  // RankPlacement has padding (after `rank`): every byte that goes over the
  // bootstrap is zeroed first and only fields are written, so no stack or
  // heap garbage reaches the peers (valgrind saw it; issue 11, item 11).
  std::vector<topo::RankPlacement> places(nranks_);
  std::memset(static_cast<void*>(places.data()), 0, places.size() * sizeof(topo::RankPlacement));
  unsigned cpu = 0, node = 0;
  if (getcpu(&cpu, &node) != 0) cpu = node = 0;
  if (topo::localTopologyConfigured()) {
    // NCCL_TOPO_FILE describes this host: its NUMA layout orders the rings.
    auto system = topo::loadLocalSystem();
    if (!system.isOk()) return system.takeStatus().withContext("rank " + std::to_string(rank_) + ": topology");
    const int numa = topo::numaNodeOfCpu(system.value(), static_cast<int>(cpu));
    PLAIT_INFO(kInit, "rank %d: CPU %u is in NUMA node %d of the topology (the kernel says %u)", rank_, cpu, numa,
               node);
    if (numa >= 0) node = static_cast<unsigned>(numa);
  }
  topo::RankPlacement& mine = places[rank_];
  mine.rank = rank_;
  mine.hostHash = bootstrap_->peer(rank_).hostHash;
  mine.numaNode = static_cast<int>(node);
  mine.cpu = static_cast<int>(cpu);
  PLAIT_RETURN_IF_ERROR(bootstrap_->allGather(places.data(), sizeof(topo::RankPlacement), deadline));
  PLAIT_ASSIGN_OR_RETURN(topo::CommGraphs graphs, topo::buildHostGraphs(places, nChannels));
  ringPositions_.assign(nChannels, 0);
  rings_ = graphs.rings;
  std::vector<int> prevs(nChannels), nexts(nChannels);
  for (int c = 0; c < nChannels; ++c) {
    const std::vector<int>& ring = graphs.rings[c];
    const int pos = static_cast<int>(std::find(ring.begin(), ring.end(), rank_) - ring.begin());
    ringPositions_[c] = pos;
    prevs[c] = ring[(pos + nranks_ - 1) % nranks_];
    nexts[c] = ring[(pos + 1) % nranks_];
  }

  ShmTransportOptions so;
  so.nChannels = nChannels;
  so.ringPrev = prevs;
  so.ringNext = nexts;
  for (int r = 0; r < nranks_; ++r) {
    if (bootstrap_->peer(r).hostHash == bootstrap_->peer(rank_).hostHash) so.localRanks.push_back(r);
    so.pids.push_back(bootstrap_->peer(r).pid);
  }
  const bool mesh = static_cast<int64_t>(so.localRanks.size()) <= kMeshMaxRanks.get();
  so.abortFlag = &abortFlag_;
  bool coreEach = false;
  {
    std::vector<CpuMask> masks;
    bool remotePeers = false;
    for (int r = 0; r < nranks_; ++r) remotePeers |= bootstrap_->peer(r).hostHash != bootstrap_->peer(rank_).hostHash;
    for (int r : so.localRanks) masks.push_back(bootstrap_->peer(r).cpus);
    const LocalCpus lc = assessLocalCpus(masks);
    so.localCpus = lc.cpus;
    so.oversubscribed = lc.cpus > 0 ? lc.oversubscribed : hostOversubscribed(static_cast<int>(so.localRanks.size()));
    // A rank with network peers has a proxy thread that must run beside it:
    // spinning on a one-CPU mask would starve it.
    so.dedicatedCores = lc.dedicated && (!remotePeers || lc.minCpusPerRank >= 2);
    corePerRankPair_ = nranks_ == 2 && so.localRanks.size() == 2 && lc.cpus > 0 && !lc.oversubscribed;
    coreEach = !remotePeers && lc.cpus > 0 && !lc.oversubscribed;
    PLAIT_INFO(kInit, "local ranks %zu on %d CPUs: %s%s", so.localRanks.size(), lc.cpus,
               so.oversubscribed ? "oversubscribed" : "not oversubscribed",
               so.dedicatedCores ? ", a core each (waits spin)" : "");
  }
  // The device path keeps the shapes for shared cores (coreEach was measured
  // on CPU caches only). The 32 ring steps double a ring FIFO's memory: only
  // up to 8 ring FIFOs on the host (it was measured with 2).
  PLAIT_RETURN_IF_ERROR(setFifoShapes(so, false));
  const FifoShape deviceRing = so.ring;
  FifoShape deviceP2p = so.p2p;
  PLAIT_RETURN_IF_ERROR(setFifoShapes(so, coreEach, coreEach && so.localRanks.size() * nChannels <= 8));
  if (!mesh) {  // many local ranks: keep the all-pairs memory small
    so.mesh = FifoShape{2, 4096};
    so.p2p = deviceP2p = FifoShape{4, 16 << 10};
  }
  oversubscribed_ = so.oversubscribed;
  dedicatedCores_ = so.dedicatedCores;
  pids_ = so.pids;
  so.waitTimeoutMs = timeoutMs_;
  BootstrapOob oob(*bootstrap_);
  std::vector<uint64_t> hostOf(nranks_);
  for (int r = 0; r < nranks_; ++r) hostOf[r] = bootstrap_->peer(r).hostHash;
  lsaSize_ = 0;
  for (int r = 0, run = 1; r < nranks_; ++r, ++run)
    if (r + 1 == nranks_ || hostOf[r + 1] != hostOf[r]) {
      lsaSize_ = std::gcd(lsaSize_, run);
      run = 0;
    }
  PLAIT_ASSIGN_OR_RETURN(net_, connectNetworkEdges(oob, so, hostOf, deadline, nullptr, /*sendFromBuffers=*/true));
  pids_ = so.pids;  // remote ranks' pids cleared
  PLAIT_ASSIGN_OR_RETURN(shm_, ShmTransport::connect(oob, so, deadline));
  PLAIT_ASSIGN_OR_RETURN(cma_, probeCma(*bootstrap_, so.localRanks, deadline));
  PLAIT_ASSIGN_OR_RETURN(direct_, DirectPath::create(oob, shm_.get(), cma_, pids_, bootstrap_->magic(), deadline));
  direct_->setReproducible(reproducible_);
  // The same on every local rank: oversubscription is judged on the union of their CPU masks.
  alltoallCma_ = cma_ && (kAlltoAllCma.get() == 1 || (kAlltoAllCma.get() < 0 && !oversubscribed_));
  direct_->setAlltoAllCma(alltoallCma_, cma_ && kAlltoAllCma.get() != 0);
  // Where the ranks share cores, AlltoAll's mid-size blocks are written by their senders instead (core/p2p.cc).
  alltoallPut_ = cma_ && kAlltoAllCma.get() < 0 && oversubscribed_;
  // Broadcast from 64 KiB by cross-memory attach: not where ranks are threads or cannot attach (there the
  // direct path could only serve registered buffers, unmeasured at these sizes).
  direct_->setBroadcastPair(corePerRankPair_ && cma_);
  if (corePerRankPair_)
    PLAIT_INFO(kInit, "2 ranks with a core each: Broadcast tries the direct path from %zu bytes, AlltoAll, Gather "
               "and Scatter blocks up to %zu bytes go by line FIFOs", direct_->minBytes(CollType::kBroadcast),
               lineP2pMaxBytes(p2pLineSetting_, true));
  ShmTransportOptions deviceOptions = so;
  deviceOptions.ring = deviceRing;
  deviceOptions.p2p = deviceP2p;
  deviceHostOptions_ = deviceOptions;
  deviceHostOptions_.dedicatedCores = false;  // the device path's host threads share the rank's CPUs
  hostOf_ = hostOf;
  PLAIT_RETURN_IF_ERROR(connectDevice(oob, deviceOptions, hostOf, deadline));

  TunerInputs ti;
  ti.nranks = nranks_;
  ti.nLocalRanks = static_cast<int>(so.localRanks.size());
  ti.nHosts = static_cast<int>(std::set<uint64_t>(hostOf.begin(), hostOf.end()).size());
  ti.nChannels = nChannels;
  ti.ringStepBytes = so.ring.stepBytes;
  ti.ringSteps = so.ring.nSteps;
  ti.deviceRingStepBytes = deviceRing.stepBytes;
  ti.deviceRingSteps = deviceRing.nSteps;
  ti.meshStepBytes = mesh ? so.mesh.stepBytes : 0;
  ti.lineMaxBytes = mesh ? kLineMaxMessageBytes : 0;
  ti.fullMesh = mesh && ti.nLocalRanks == nranks_;
  ti.costs = hostCosts_;
  if (so.oversubscribed) {
    const int cpus = so.localCpus > 0 ? so.localCpus : usableCores();
    ti.cpuShare = std::clamp(static_cast<double>(cpus) / static_cast<double>(so.localRanks.size()), 0.01, 1.0);
  }
  tuner_ = std::make_unique<Tuner>(ti);
  scratch_.resize(so.mesh.stepBytes);
  oneShotInputs_.resize(nranks_);
  oneShotStage_.resize(static_cast<size_t>(nranks_) * kLineMaxMessageBytes);
  lineP2pMaxBytes_ = ti.fullMesh ? lineP2pMaxBytes(p2pLineSetting_, corePerRankPair_) : 0;
  for (int r = 0; r < nranks_; ++r)
    PLAIT_INFO(kInit, "rank %d -> rank %d via %s", rank_, r,
               r == rank_ ? "self" : (shm_->isLocal(r) ? "SHM" : net_ ? net_->description().c_str() : "none"));
  return Status::ok();
}

Status Communicator::asyncError() const {
  if (!broken_.load(std::memory_order_acquire)) {
    if (!device_) return Status::ok();
    Status s = device_->asyncError();
    if (s.code() != Code::kRemoteError) return s;
    // A kernel sees only that its peer's end gave up; the network and the
    // process table say why.
    const std::string network = deviceNet_ ? deviceNet_->failure() : std::string();
    if (!network.empty()) s = Status(s.code(), s.message() + " (network: " + network + ")");
    return withDeadPeers(std::move(s));
  }
  std::lock_guard<std::mutex> lock(errorMu_);
  return brokenBy_;
}

void Communicator::breakWith(const Status& status) {
  std::lock_guard<std::mutex> lock(errorMu_);
  if (!broken_.load(std::memory_order_relaxed)) {
    brokenBy_ = status;
    broken_.store(true, std::memory_order_release);
  }
}

void Communicator::abort() {
  if (userAborted_.exchange(true, std::memory_order_acq_rel)) return;
  abortFlag_.store(1, std::memory_order_release);
  abortParts();
  LiveRanks* live = nullptr;
  {
    std::lock_guard<std::mutex> lock(partsMu_);
    live = live_.get();
  }
  if (live) live->abort();  // the survivors' communicator, if a rank was lost
}

void Communicator::abortParts() {
  // init() assigns the parts on its own thread; while it runs, the flag is
  // all an abort may touch (init aborts the parts when it returns).
  std::lock_guard<std::mutex> lock(partsMu_);
  if (initRunning_) return;
  if (board_) board_->markDeparted();
  if (status_) status_->markDeparted();
  if (device_) device_->abort();
  if (deviceShm_) deviceShm_->abort();
  if (deviceNet_) deviceNet_->abort();
  if (shm_) shm_->abort();
  if (net_) net_->abort();
  if (rma_) rma_->abort();
  if (bootstrap_) bootstrap_->abort();
}

Communicator::~Communicator() {
  live_.reset();  // the survivors' communicator first: it runs on this one's threads' behalf
  unregisterFromStatusReports(this);
  rma_.reset();  // its agent writes into windows
  if (board_) board_->markDeparted();
  status_.reset();  // its threads answer peers' questions until here
  releaseDevice();  // first: kernels may still use the FIFOs
  workers_.reset();
  shm_.reset();
  net_.reset();  // after shm_, which hands out its connectors
  // Segments a local peer created and could not unlink because it died
  // (between creating and its peers opening them): this job's last rank
  // here must not leave them in /dev/shm.
  for (const PeerProcess& p : localPeerProcesses())
    if (p.pid > 0 && !processAlive(p.pid)) cleanupSegmentsOf(p.pid);
  // A rank killed just after its own bootstrap finished may have created
  // segments while this rank's bootstrap failed, so its pid is unknown here:
  // after a failed init, sweep every dead creator's segments of this pid
  // namespace (live creators' are never touched).
  if (initFailed_) cleanupStaleSegments();
  bootstrap_.reset();
}

Result<Communicator::SplitResult> Communicator::split(int color, int key) {
  if (aborted()) return invalidUsage("the communicator was aborted");
  log::ScopedLogRank logRank(rank_);
  const Deadline deadline = Deadline::afterMs(secondsToWaitMs(std::max<int64_t>(kInitTimeout.get(), 1)));
  struct Entry {
    int color, key;
  };
  std::vector<Entry> all(nranks_);
  all[rank_] = Entry{color, key};
  // A rank that died makes its bootstrap neighbour fail, and that one's
  // neighbour then sees only a closed connection: name the dead ones too.
  auto exchange = [&](void* data, size_t bytes) {
    Status s = bootstrap_->allGather(data, bytes, deadline);
    return s.code() == Code::kRemoteError ? withDeadPeers(std::move(s)) : s;
  };
  PLAIT_RETURN_IF_ERROR(exchange(all.data(), sizeof(Entry)));
  // Members of our color, ordered by key, then by rank in this communicator.
  std::vector<int> members;
  for (int r = 0; r < nranks_; ++r)
    if (color >= 0 && all[r].color == color) members.push_back(r);
  std::stable_sort(members.begin(), members.end(), [&](int a, int b) { return all[a].key < all[b].key; });
  SplitResult out;
  std::vector<ncclUniqueId> ids(nranks_);
  if (!members.empty() && members.front() == rank_) {  // the new rank 0 hosts the new bootstrap root
    PLAIT_ASSIGN_OR_RETURN(ids[rank_], createPrivateUniqueId());
  }
  PLAIT_RETURN_IF_ERROR(exchange(ids.data(), sizeof(ncclUniqueId)));
  if (members.empty()) return out;
  out.member = true;
  out.rank = static_cast<int>(std::find(members.begin(), members.end(), rank_) - members.begin());
  out.nranks = static_cast<int>(members.size());
  out.id = ids[members.front()];
  out.rootRank = members.front();
  PLAIT_INFO(kInit, "split color %d key %d: rank %d of %d becomes rank %d of %d", color, key, rank_, nranks_,
             out.rank, out.nranks);
  return out;
}

// The bytes the tuner sees, as execute() passes them: the whole gathered or
// scattered buffer for AllGather and ReduceScatter.
double Communicator::estimateUs(const Task& task) const {
  const bool blocked = task.coll == CollType::kAllGather || task.coll == CollType::kReduceScatter;
  const size_t bytes = task.count * typeSize(task.type) * (blocked ? static_cast<size_t>(nranks_) : 1);
  return tuner_->estimateUs(task, bytes);
}

}  // namespace plait
