// executor.cc — runs a planned operation on the host: channel 0 on the
// calling thread, other channels on the communicator's workers, each channel
// executing the same schedule code a GPU kernel would (algorithms/ring_*.h).
#include <time.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <optional>

#include "algorithms/primitives.h"
#include "algorithms/types.h"
#include "base/config.h"
#include "base/log.h"
#include "base/wait.h"
#include "core/alg_selection.h"
#include "core/comm.h"
#include "core/live_ranks.h"

namespace plait {
// One knob bounds every wait, bootstrap and operations alike (PLAIT_TIMEOUT).
int64_t operationTimeoutMs() { return secondsToWaitMs(bootstrapTimeoutSec()); }

// Runs body() with the checks and error handling every operation shares:
// a broken or aborted communicator refuses work; a failure other than a
// bad argument breaks it (its pipelines may be torn).
template <class Body>
Status Communicator::guarded(const char* what, Body body) {
  if (aborted()) return invalidUsage("the communicator was aborted");
  if (revoked()) return invalidUsage("the communicator was revoked (ncclCommRevoke): only destroy, split and shrink remain");
  if (device_ && !broken_.load(std::memory_order_acquire)) {  // a kernel failed since the last call
    Status failed = device_->asyncError();
    if (!failed.isOk()) breakWith(failed);
  }
  if (broken_.load(std::memory_order_acquire)) {
    Status s = asyncError();
    return Status(s.code(), "the communicator is broken by an earlier error: " + s.message());
  }
  if (suspended())
    return invalidUsage(std::string(what) +
                        ": the communicator is suspended (ncclCommSuspend); call ncclCommResume on every rank first");
  log::ScopedLogRank logRank(rank_);
  ScopedWaitCheck agreement(agreementCheck());
  ++opCount_;
  inCall_.store(true, std::memory_order_relaxed);
  Status s = body();
  inCall_.store(false, std::memory_order_relaxed);
  if (s.code() == Code::kInternalError) {
    // A peer's data that does not fit ("sent 4096 bytes, expected 32768")
    // usually means the ranks called different collectives: the op board
    // then names both calls (every peer announced before it sent).
    if (Status disagreement = checkAgreement(); !disagreement.isOk())
      s = Status(disagreement.code(), disagreement.message() + " (seen as: " + s.message() + ")");
  }
  if (!s.isOk()) {
    s.withContext(std::string(what) + " #" + std::to_string(opCount_) + " on rank " + std::to_string(rank_));
    if (s.code() == Code::kRemoteError) s = withDeadPeers(std::move(s));
    const bool timedOut = s.code() == Code::kRemoteError && s.message().find("timed out after") != std::string::npos;
    if (timedOut && (board_ || status_)) s = Status(s.code(), s.message() + "; " + whereRanksAre());
    // Argument errors are found before data moves; ranks that disagree on
    // the collective have moved some, so their pipelines are torn.
    const bool tornPipelines = disagreed_.load(std::memory_order_acquire);
    if (tornPipelines || (s.code() != Code::kInvalidArgument && s.code() != Code::kInvalidUsage)) {
      PLAIT_INFO(kColl, "%s", s.message().c_str());
      breakWith(s);
    }
    // Peers on other hosts cannot see the op board: closing the network
    // connections ends their wait at once instead of at PLAIT_TIMEOUT.
    if (tornPipelines && net_) net_->abort();
  }
  return s;
}

namespace {
// The last tick of the clock nowNs() reads (CLOCK_MONOTONIC), so never ahead
// of it: for the once-a-call stamps read in milliseconds (how long a rank has
// been at a collective), at a fraction of a precise read's cost in a VM.
uint64_t coarseNowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}
}  // namespace

void Communicator::announce(const Task& task) {
  if (isSendOrRecv(task.coll)) return;
  ++collSeq_;
  noteFirstRegistration();
  if (board_) board_->publish(collSeq_, task);
  OpBoard::write(announced_, collSeq_, task);
  announcedNs_.store(coarseNowNs(), std::memory_order_relaxed);
}

// The collectives of a group's point-to-point batch (AlltoAll, Gather,
// Scatter beside Send and Recv: runGroupTasks) run together: they are
// numbered at their call positions like all others (collSeq_ counts them
// already), and announced as a batch that peers do not compare (a rank may
// issue the same calls outside a group).
void Communicator::announceBatch() {
  noteFirstRegistration();
  if (board_) board_->publishBatch(collSeq_);
  OpBoard::writeBatch(announced_, collSeq_);
  announcedNs_.store(coarseNowNs(), std::memory_order_relaxed);
}

// A first registration on any thread is noted here, on the thread that
// announces, before the number it is about to publish (collSeq_): a peer
// that sees that number sees the note too. Numbered one below it, so it
// counts from the call after (directWorthAgreeing).
// Only before a number above the last published one: announceBatch may
// publish again the number the group's last collective already published.
void Communicator::noteFirstRegistration() {
  if (direct_ && board_ && collSeq_ > publishedSeq_ && direct_->takeFirstRegistration())
    board_->noteRegistration(collSeq_ - 1);
  publishedSeq_ = collSeq_;
}

// Whether execute() should ask the direct path, whose agreement costs every
// rank a round of lines. Where the call cannot go by cross-memory attach,
// only registered buffers could make it direct; then the round is skipped
// unless some local rank had registered a buffer by collective number
// collSeq_ - 2. Every rank answers alike: it first waits (as the agreement
// would have, and less) until every local peer has announced collective
// collSeq_ - 1, after noting any registration numbered before it. A per-call
// algorithm selection keeps the round (it may allow direct alone).
Result<bool> Communicator::directWorthAgreeing(const Task& task) {
  if (task.algos != 0 || !board_ || direct_->mayUseCma(task)) return true;
  if (collSeq_ < 2) return false;
  const uint64_t previous = collSeq_ - 1;
  for (int behind = board_->firstBehind(previous); behind >= 0; behind = board_->firstBehind(previous)) {
    WaitContext ctx;
    ctx.waitTimeoutMs = timeoutMs_;
    ctx.abortFlag = &abortFlag_;
    ctx.oversubscribed = oversubscribed_;
    ctx.peerRank = behind;
    ctx.peerPid = bootstrap_ ? bootstrap_->peer(behind).pid : -1;
    ctx.what = "the wait for local ranks to reach the previous collective";
    // Nobody wakes these: past its spinning and yielding the wait sleeps in
    // slices of about a millisecond (only a peer two calls behind gets here).
    std::atomic<uint32_t> word{0}, sleepers{0};
    PLAIT_RETURN_IF_ERROR(waitUntil(
        [&] { return board_->seqOf(behind) >= previous || board_->peerDeparted(behind); }, &word, &sleepers, ctx));
    if (board_->seqOf(behind) < previous)
      return remoteError("rank " + std::to_string(behind) + " aborted or destroyed its communicator during " +
                         ctx.what);
  }
  return board_->anyRegisteredBy(previous - 1);
}

Status Communicator::checkAgreement() const {
  Status s = board_ ? board_->check() : Status::ok();
  if (s.isOk() && status_) s = status_->check();
  if (!s.isOk()) disagreed_.store(true, std::memory_order_release);
  return s;
}

WaitCheck Communicator::agreementCheck() const {
  if (!board_ && !status_) return WaitCheck{};
  return WaitCheck{[](const void* self) { return static_cast<const Communicator*>(self)->checkAgreement(); }, this};
}

Status Communicator::run(const Task& task) {
  if (live_) return live_->run(task);
  return runHere(task);
}

Status Communicator::runHere(const Task& task) {
  return guarded(collName(task.coll), [&] { return execute(task); });
}

Status Communicator::runGroup(const std::vector<Task>& tasks) {
  if (tasks.size() == 1) return run(tasks[0]);
  if (live_ && live_->lost())
    return invalidUsage("a group of " + std::to_string(tasks.size()) + " operations after a rank was lost: the "
                        "live-ranks mode (PLAIT_LIVE_RANKS) runs one operation at a time on the survivors");
  return guarded("group", [&] { return runGroupTasks(tasks); });
}

// A group's order, so that a peer calling the same operations one at a time
// in the same order meets every message where it expects it:
// - Without sends and receives, every collective runs on its own, in call
//   order, AlltoAll, Gather and Scatter included, each on the path it takes
//   outside a group (for those three: small blocks on the point-to-point
//   line FIFOs, larger ones on the point-to-point FIFOs or the direct path).
// - With sends or receives (per side: host, device), those and the group's
//   AlltoAll, Gather and Scatter form one batch, in call order per peer (the
//   point-to-point FIFOs carry both), so their posting order cannot
//   deadlock. The batch posts its sends first, then the other collectives
//   run in call order, then the batch waits for its receives: a peer that
//   runs those collectives after the point-to-point calls still gets our
//   messages (as far as the FIFOs hold them; every single-copy send).
// NCCL runs a group's operations at once; here a peer that orders the
// collectives differently around the batch can wait until the timeout, but
// the batch's messages never meet a collective's: they keep to the
// point-to-point FIFOs and line FIFOs.
Status Communicator::runGroupTasks(const std::vector<Task>& tasks) {
  bool hostPairs = false, devicePairs = false;
  for (const Task& t : tasks)
    if (isSendOrRecv(t.coll)) (t.onDevice ? devicePairs : hostPairs) = true;
  auto isBatched = [&](const Task& t) {
    return isSendOrRecv(t.coll) || (isPointToPoint(t.coll) && (t.onDevice ? devicePairs : hostPairs));
  };
  std::vector<Task> p2p, deviceP2p;
  bool reproducibleOthers = false, others = false;
  for (const Task& t : tasks) {
    if (isBatched(t)) {
      (t.onDevice ? deviceP2p : p2p).push_back(t);
    } else {
      reproducibleOthers |= reproducibleOrder(t);
      others = true;
    }
  }
  // Every collective keeps its call-order number, as a peer calling them
  // one at a time numbers them (the op board compares equal numbers only).
  auto runOthers = [&]() -> Status {
    bool batchedCollectives = false;
    for (const Task& t : tasks) {
      if (isBatched(t)) {
        if (!t.onDevice && !isSendOrRecv(t.coll)) {
          ++collSeq_;  // runs in the batch; numbered here
          batchedCollectives = true;
        }
        continue;
      }
      Status s = execute(t);
      if (!s.isOk()) return s.withContext(collName(t.coll));
    }
    if (!deviceP2p.empty()) PLAIT_RETURN_IF_ERROR(runDeviceP2p(deviceP2p));  // enqueued; the host batch may follow
    if (batchedCollectives) announceBatch();
    return Status::ok();
  };
  if (p2p.empty()) return runOthers();
  // The reproducible mode's collectives (host and device buffers alike)
  // exchange through the point-to-point FIFOs themselves: the batch must not
  // have posted into them yet.
  if (reproducibleOthers) {
    PLAIT_RETURN_IF_ERROR(runOthers());
    return runP2p(p2p);
  }
  // Without other collectives runOthers only numbers the batch's and
  // enqueues device work: it waits for no peer.
  return runP2p(p2p, runOthers, /*firstWaits=*/others);
}

// A failure often cascades: rank A dies, its neighbour B aborts, and B's
// other neighbour C only sees "B aborted". Naming every dead local peer
// gives C the root cause too.
// Ranks that aborted or destroyed their communicator and then exited (after
// an error of their own, say) are named apart: they did not die.
Status Communicator::withDeadPeers(Status s) const {
  return Status(s.code(), s.message() + deadPeersText(localPeerProcesses(), board_.get(), ""));
}

// Every rank's position for a timeout's error: this host's from the op
// board, the others' asked now (core/op_status.h).
std::string Communicator::whereRanksAre() const {
  std::vector<RankPosition> all;
  if (board_) all = board_->positions();
  else all.push_back(status_->self());
  if (status_) {
    std::vector<RankPosition> remote = status_->surveyNow(Deadline::afterMs(2000));
    all.insert(all.end(), remote.begin(), remote.end());
  }
  const int seen = static_cast<int>(all.size());
  auto who = [this](int r) {
    const PeerInfo& p = bootstrap_->peer(r);
    return " (host " + std::string(p.hostname) + ", pid " + std::to_string(p.pid) + ")";
  };
  std::string text = "where the ranks are: " + formatPositions(std::move(all), rank_, who);
  if (seen < nranks_) text += "; " + std::to_string(nranks_ - seen) + " rank(s) not asked";
  return text;
}

std::string Communicator::statusLine() const {
  const uint64_t since = announcedNs_.load(std::memory_order_relaxed);
  const uint64_t now = nowNs();
  std::string line = "comm " + (name_.empty() ? std::string() : name_ + " ") + "rank " + std::to_string(rank_) +
                     " of " + std::to_string(nranks_) + ": ";
  const bool busy = inCall_.load(std::memory_order_relaxed);
  if (since == 0) line += busy ? "in its first call (not a collective)" : "before its first collective";
  else if (busy)
    line += "in " + OpBoard::positionText(announced_) + " for " +
            std::to_string((now > since ? now - since : 0) / 1'000'000) + " ms";
  else line += "idle after " + OpBoard::positionText(announced_);
  if (board_) {
    auto who = [this](int r) { return " (pid " + std::to_string(bootstrap_->peer(r).pid) + ")"; };
    line += "; on this host: " + formatPositions(board_->positions(), rank_, who);
  }
  if (status_) line += "; ranks on other hosts answer in a timeout's report";
  return line;
}

std::vector<PeerProcess> Communicator::localPeerProcesses() const {
  std::vector<PeerProcess> out;
  if (!bootstrap_) return out;
  const uint64_t host = bootstrap_->peer(rank_).hostHash;
  for (int r = 0; r < nranks_; ++r)
    if (r != rank_ && bootstrap_->peer(r).hostHash == host) out.push_back(PeerProcess{r, bootstrap_->peer(r).pid});
  return out;
}

std::string deadPeersText(const std::vector<PeerProcess>& peers, const OpBoard* board, const std::string& whose) {
  std::string dead, left;
  for (const PeerProcess& p : peers) {
    if (p.pid <= 0 || processAlive(p.pid)) continue;
    std::string& list = board && board->peerDeparted(p.rank) ? left : dead;
    list += (list.empty() ? "" : ", ") + ("rank " + std::to_string(p.rank)) + whose + " (pid " +
            std::to_string(p.pid) + ")";
  }
  std::string text;
  if (!dead.empty()) text += "; dead: " + dead;
  if (!left.empty()) text += "; exited after aborting or destroying their communicator: " + left;
  return text;
}

// The caller asks log::enabled(kInfo, kTuning) first (it runs on every call).
void Communicator::logPlanOnce(const Task& task, size_t bytes, const Plan& plan) {
  const int bucket = bytes == 0 ? 0 : std::bit_width(bytes);
  uint64_t& seen = loggedSizes_[static_cast<int>(task.coll)];
  if (bucket < 64 && !(seen & (uint64_t(1) << bucket))) {
    seen |= uint64_t(1) << bucket;
    PLAIT_INFO(kTuning, "%s %zu bytes (%s): %s", collName(task.coll), bytes, typeName(task.type),
               plan.toString().c_str());
  }
}

namespace {

// Tells the direct path's chooser (core/path_choice.h) when a call it chose
// a path for is done, whichever path ran it.
class ChoiceTimer {
 public:
  explicit ChoiceTimer(DirectPath* direct) : direct_(direct) {}
  ~ChoiceTimer() {
    if (direct_->measuring()) direct_->record();
  }
  ChoiceTimer(const ChoiceTimer&) = delete;
  ChoiceTimer& operator=(const ChoiceTimer&) = delete;

 private:
  DirectPath* direct_;
};

}  // namespace

Status Communicator::execute(const Task& task) {
  if (task.onDevice && reproducibleOrder(task)) return runReproducibleOnDevice(task);  // core/reproducible.cc
  if (task.onDevice) return runOnDevice(task);  // a kernel on the task's stream (device_path.cc)
  announce(task);
  const size_t blockBytes = task.count * typeSize(task.type);
  const bool directAllowed = task.algos == 0 || (task.algos & kAlgoDirect) != 0;
  // The direct path for a call of `bytes` (its largest buffer) that reached
  // its threshold: true once it ran the call. `timer` then tells the path's
  // chooser when the call is done, whichever path ends up running it.
  auto ranDirect = [&](size_t bytes, std::optional<ChoiceTimer>& timer) -> Result<bool> {
    PLAIT_ASSIGN_OR_RETURN(const bool worth, directWorthAgreeing(task));
    if (!worth) return false;
    timer.emplace(direct_.get());
    PLAIT_ASSIGN_OR_RETURN(const bool done, direct_->run(task));
    if (done) tagged(task, bytes, "direct");
    return done;
  };
  if (isPointToPoint(task.coll)) {
    // AlltoAll, Gather and Scatter on registered buffers: zero-copy.
    const bool collective = task.coll != CollType::kSend && task.coll != CollType::kRecv;
    std::optional<ChoiceTimer> timer;
    if (collective && nranks_ > 1 && task.count > 0 && direct_ && directAllowed &&
        blockBytes * nranks_ >= direct_->minBytes(task.coll)) {
      PLAIT_ASSIGN_OR_RETURN(const bool done, ranDirect(blockBytes * nranks_, timer));
      if (done) return Status::ok();
    }
    if (collective && blockBytes > 0 && blockBytes <= lineP2pMaxBytes_) {
      tagged(task, blockBytes, "lines");
      return runLineP2p(task);
    }
    tagged(task, blockBytes, "point-to-point");
    return runP2p(std::span<const Task>(&task, 1));
  }
  if (task.count == 0) return Status::ok();
  if (nranks_ == 1) return runLocalCopy(task);
  // The tuner sees the bytes that cross the ring: the whole gathered or
  // scattered buffer for AllGather and ReduceScatter.
  const bool blocked = task.coll == CollType::kAllGather || task.coll == CollType::kReduceScatter;
  const size_t bytes = blocked ? blockBytes * nranks_ : blockBytes;
  std::optional<ChoiceTimer> timer;
  if (direct_ && directAllowed && bytes >= direct_->minBytes(task.coll)) {  // registered buffers: zero-copy, or
    PLAIT_ASSIGN_OR_RETURN(const bool done, ranDirect(bytes, timer));       // single copies by cross-memory attach
    if (done) return Status::ok();
  }
  if (reproducibleOrder(task)) return runReproducible(task, bytes);  // a fixed fold (core/reproducible.cc)
  const Plan plan = tuner_->plan(task, bytes);
  if (plan.refused) return unrunnableSelection(task, bytes);
  if (log::enabled(log::Level::kInfo, log::kTuning)) logPlanOnce(task, bytes, plan);
  tagged(task, bytes, algorithmName(plan.algo));
  if (plan.algo == Algorithm::kOneShot) return runOneShot(task, bytes);  // core/one_shot.cc
  if (plan.algo == Algorithm::kTree) return runLogDepth(task, plan);    // core/log_depth.cc
  return runRingCollective(task, plan);
}

// A call whose forced algorithm selection allows nothing that can run it.
Status Communicator::unrunnableSelection(const Task& task, size_t bytes) const {
  return invalidUsage(std::string("algSelection allows ") + collName(task.coll) + " only " + algoNames(task.algos) +
                      ", and none of them can run this call of " + std::to_string(bytes) +
                      " bytes here (oneshot: AllReduce up to the mesh's message size, AllGather and ReduceScatter blocks "
                      "and Broadcast and Reduce buffers up to 3 KiB, with every peer on the mesh; tree: AllReduce, "
                      "Broadcast, Reduce, and AllGather at a power-of-two rank count, on host buffers with every peer "
                      "on the mesh; direct: buffers registered with ncclCommRegister; symmetric: device buffers in "
                      "symmetric windows); "
                      "set forceAlgSelection=0 to let the tuner choose instead");
}

// A call with a profiler tag (ncclCollConfig_t.userProfilerTag) says at
// INFO what ran for it, so the tag can be followed in the log.
void Communicator::tagged(const Task& task, size_t bytes, const char* algo) const {
  if (task.profilerTag == 0) return;
  PLAIT_INFO(kColl, "%s %zu bytes, profiler tag 0x%llx: %s", collName(task.coll), bytes,
             static_cast<unsigned long long>(task.profilerTag), algo);
}

}  // namespace plait
