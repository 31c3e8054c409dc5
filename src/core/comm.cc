// comm.cc — communicator creation, transports, lifecycle.
#include "core/comm.h"

#include <sched.h>

#include <algorithm>
#include <thread>

#include "base/config.h"
#include "base/log.h"
#include "base/wait.h"
#include "topology/topology.h"

namespace plait {
namespace {

PLAIT_PARAM_INT(kInitTimeout, "INIT_TIMEOUT", 300, "seconds communicator creation may wait for all ranks");
PLAIT_PARAM_INT(kNChannels, "NCHANNELS", 0, "channels per communicator (0: one per spare core, at most 4)");
PLAIT_PARAM_INT(kRingStepBytes, "SHM_STEP_BYTES", 128 << 10, "bytes per shared-memory ring FIFO step");
PLAIT_PARAM_INT(kRingSteps, "SHM_STEPS", 8, "steps per shared-memory ring FIFO");
PLAIT_PARAM_INT(kMeshStepBytes, "SHM_MESH_STEP_BYTES", 32 << 10,
                "bytes per step of the all-pairs FIFOs (bounds the one-shot all-reduce)");
PLAIT_PARAM_INT(kMeshSteps, "SHM_MESH_STEPS", 4, "steps per all-pairs FIFO");
PLAIT_PARAM_INT(kMeshMaxRanks, "SHM_MESH_MAX_RANKS", 16, "largest number of local ranks connected all to all");

// The bootstrap, seen by transports as an out-of-band exchange.
class BootstrapOob final : public OobExchange {
 public:
  explicit BootstrapOob(Bootstrap& b) : b_(b) {}
  int rank() const override { return b_.rank(); }
  int nranks() const override { return b_.nranks(); }
  Status allGather(void* data, size_t bytes, Deadline d) override { return b_.allGather(data, bytes, d); }
  Status barrier(Deadline d) override { return b_.barrier(d); }

 private:
  Bootstrap& b_;
};

int usableCores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

}  // namespace

Status Communicator::init(const ncclUniqueId& id, const CommOptions& options) {
  log::ScopedLogRank logRank(rank_);
  Status s = initSteps(id, options);
  if (!s.isOk()) {
    abort();
    s.withContext("creating rank " + std::to_string(rank_) + " of " + std::to_string(nranks_));
  }
  return s;
}

Status Communicator::initSteps(const ncclUniqueId& id, const CommOptions& options) {
  name_ = options.name;
  timeoutMs_ = operationTimeoutMs();
  const Deadline deadline = Deadline::afterMs(kInitTimeout.get() * 1000);
  BootstrapOptions bopts;
  bopts.deadline = deadline;
  bopts.abortFlag = &abortFlag_;
  PLAIT_ASSIGN_OR_RETURN(bootstrap_, Bootstrap::create(id, rank_, nranks_, bopts));

  // Channels: as many as the host's cores allow without oversubscribing,
  // agreed on by all ranks (the minimum of what each can afford).
  std::vector<int> local;
  for (int r = 0; r < nranks_; ++r)
    if (bootstrap_->peer(r).hostHash == bootstrap_->peer(rank_).hostHash) local.push_back(r);
  int want = static_cast<int>(kNChannels.get());
  if (want <= 0) want = std::clamp(usableCores() / static_cast<int>(local.size()), 1, 4);
  if (options.maxChannels > 0) want = std::min(want, options.maxChannels);
  std::vector<int> wants(nranks_);
  wants[rank_] = want;
  PLAIT_RETURN_IF_ERROR(bootstrap_->allGather(wants.data(), sizeof(int), deadline));
  const int nChannels = *std::min_element(wants.begin(), wants.end());
  PLAIT_RETURN_IF_ERROR(connectTransports(deadline, nChannels));
  if (nChannels > 1) workers_ = std::make_unique<ChannelWorkers>(nChannels - 1);
  PLAIT_INFO(kInit, "comm %s rank %d nranks %d: %zu local rank(s), %d channel(s)", name_.c_str(), rank_, nranks_,
             local.size(), nChannels);
  return Status::ok();
}

Status Communicator::connectTransports(Deadline deadline, int nChannels) {
  // Rings from the topology layer: ranks of a host contiguous (each host
  // boundary crossed once per direction), NUMA domains contiguous inside a
  // host, channels rotated so different ranks carry the inter-host traffic.
  std::vector<topo::RankPlacement> places(nranks_);
  unsigned cpu = 0, node = 0;
  if (getcpu(&cpu, &node) != 0) cpu = node = 0;
  places[rank_] = topo::RankPlacement{rank_, bootstrap_->peer(rank_).hostHash, static_cast<int>(node),
                                      static_cast<int>(cpu)};
  PLAIT_RETURN_IF_ERROR(bootstrap_->allGather(places.data(), sizeof(topo::RankPlacement), deadline));
  PLAIT_ASSIGN_OR_RETURN(topo::CommGraphs graphs, topo::buildHostGraphs(places, nChannels));
  ringPositions_.assign(nChannels, 0);
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
  so.ring = FifoShape{static_cast<int>(kRingSteps.get()), static_cast<size_t>(kRingStepBytes.get())};
  so.mesh = FifoShape{static_cast<int>(kMeshSteps.get()), static_cast<size_t>(kMeshStepBytes.get())};
  if (!so.ring.valid() || !so.mesh.valid())
    return invalidArgument("PLAIT_SHM_STEPS / PLAIT_SHM_MESH_STEPS must be in [1, " + std::to_string(kMaxFifoSteps) +
                           "] and PLAIT_SHM_STEP_BYTES / PLAIT_SHM_MESH_STEP_BYTES positive multiples of 64 (got " +
                           std::to_string(so.ring.nSteps) + " x " + std::to_string(so.ring.stepBytes) + " and " +
                           std::to_string(so.mesh.nSteps) + " x " + std::to_string(so.mesh.stepBytes) + ")");
  so.ringPrev = prevs;
  so.ringNext = nexts;
  for (int r = 0; r < nranks_; ++r) {
    if (bootstrap_->peer(r).hostHash == bootstrap_->peer(rank_).hostHash) so.localRanks.push_back(r);
    so.pids.push_back(bootstrap_->peer(r).pid);
  }
  const bool mesh = static_cast<int64_t>(so.localRanks.size()) <= kMeshMaxRanks.get();
  if (!mesh) so.mesh = FifoShape{2, 4096};
  so.abortFlag = &abortFlag_;
  so.oversubscribed = hostOversubscribed(static_cast<int>(so.localRanks.size()));
  so.waitTimeoutMs = timeoutMs_;
  BootstrapOob oob(*bootstrap_);
  PLAIT_ASSIGN_OR_RETURN(shm_, ShmTransport::connect(oob, so, deadline));

  TunerInputs ti;
  ti.nranks = nranks_;
  ti.nLocalRanks = static_cast<int>(so.localRanks.size());
  ti.nChannels = nChannels;
  ti.ringStepBytes = so.ring.stepBytes;
  ti.ringSteps = so.ring.nSteps;
  ti.meshStepBytes = mesh ? so.mesh.stepBytes : 0;
  ti.lineMaxBytes = mesh ? kLineMaxMessageBytes : 0;
  ti.fullMesh = mesh && ti.nLocalRanks == nranks_;
  tuner_ = std::make_unique<Tuner>(ti);
  scratch_.resize(so.mesh.stepBytes);
  oneShotInputs_.resize(nranks_);
  oneShotStage_.resize(static_cast<size_t>(nranks_) * kLineMaxMessageBytes);
  for (int r = 0; r < nranks_; ++r)
    PLAIT_INFO(kInit, "rank %d -> rank %d via %s", rank_, r,
               r == rank_ ? "self" : (shm_->isLocal(r) ? "SHM" : "none (no network transport yet)"));
  return Status::ok();
}

Status Communicator::asyncError() const {
  if (!broken_.load(std::memory_order_acquire)) return Status::ok();
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
  if (abortFlag_.exchange(1, std::memory_order_acq_rel) != 0) return;
  if (shm_) shm_->abort();
  if (bootstrap_) bootstrap_->abort();
}

Communicator::~Communicator() {
  workers_.reset();
  shm_.reset();
  bootstrap_.reset();
}

double Communicator::estimateUs(const Task& task) const {
  return tuner_->estimateUs(task, task.count * typeSize(task.type));
}

}  // namespace plait
