// live_ranks.cc — see live_ranks.h.
#include "core/live_ranks.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "algorithms/reduce.h"
#include "algorithms/types.h"
#include "base/config.h"
#include "base/log.h"
#include "base/wait.h"
#include "core/comm.h"

namespace plait {
namespace {

PLAIT_PARAM_INT(kLiveRanks, "LIVE_RANKS", 0,
                "collectives go on over the survivors when a rank dies (1), instead of failing (0); every rank "
                "must agree");
PLAIT_PARAM_INT(kLiveAgreeMs, "LIVE_AGREE_MS", 0,
                "how long the survivors wait for each other when a rank is lost (0: PLAIT_TIMEOUT)");
PLAIT_PARAM_INT(kLiveHistoryBytes, "LIVE_HISTORY_BYTES", 256 << 20,
                "inputs of earlier collectives kept for survivors that fall behind (the last two are always kept)");

// Bootstrap user tags of the agreement: 'L' and the coordinator, so that a
// failover to the next coordinator never reads a message meant for the one
// before. Not the epoch: a coordinator that died after telling only some
// survivors leaves them an epoch apart, and the next one must hear both.
constexpr uint32_t kLiveTag = 0x4c000000;

uint32_t agreementTag(int coordinator) { return kLiveTag | static_cast<uint32_t>(coordinator & 0xffff); }

// Wire layout, fixed by nranks: a claim is {the sender's epoch, the first
// collective it needs, dead[n]}; a verdict {the new epoch, the first
// collective to run again, id, live[n]}. The new epoch is one past the
// highest any survivor claimed.
constexpr size_t kHeader = 2 * sizeof(uint64_t);

void putHeader(std::vector<char>* out, uint64_t a, uint64_t b) {
  std::memcpy(out->data(), &a, sizeof a);
  std::memcpy(out->data() + sizeof a, &b, sizeof b);
}

void getHeader(const std::vector<char>& in, uint64_t* a, uint64_t* b) {
  std::memcpy(a, in.data(), sizeof *a);
  std::memcpy(b, in.data() + sizeof *a, sizeof *b);
}

bool rooted(CollType c) {
  return c == CollType::kBroadcast || c == CollType::kReduce || c == CollType::kGather || c == CollType::kScatter;
}

int count(const std::vector<uint8_t>& mask) { return static_cast<int>(std::count(mask.begin(), mask.end(), 1)); }

}  // namespace

Result<bool> liveRanksRequested() {
  const int64_t mode = kLiveRanks.get();
  if (mode != 0 && mode != 1)
    return invalidArgument("PLAIT_LIVE_RANKS=" + std::to_string(mode) + ": expected 0 (off) or 1 (on)");
  if (mode == 1 && kLiveAgreeMs.get() < 0)
    return invalidArgument("PLAIT_LIVE_AGREE_MS=" + std::to_string(kLiveAgreeMs.get()) +
                           ": must be 0 (PLAIT_TIMEOUT) or a number of milliseconds");
  if (mode == 1 && kLiveHistoryBytes.get() < 0)
    return invalidArgument("PLAIT_LIVE_HISTORY_BYTES=" + std::to_string(kLiveHistoryBytes.get()) +
                           ": must be 0 or more");
  return mode == 1;
}

LiveRanks::LiveRanks(Communicator* parent, const CommOptions& options)
    : parent_(parent),
      rank_(parent->rank()),
      nranks_(parent->nranks()),
      cudaDev_(options.cudaDev),
      name_(options.name),
      live_(static_cast<size_t>(parent->nranks()), 1) {
  PLAIT_INFO(kInit, "rank %d: live-ranks mode (PLAIT_LIVE_RANKS): collectives go on over the survivors if a rank dies",
             rank_);
}

LiveRanks::~LiveRanks() {
  std::unique_ptr<Communicator> survivors;
  {
    std::lock_guard<std::mutex> lock(mu_);
    survivors = std::move(survivors_);
  }
}

void LiveRanks::abort() {
  std::lock_guard<std::mutex> lock(mu_);
  aborted_ = true;
  if (survivors_) survivors_->abort();
  if (initializing_) initializing_->abort();
}

std::vector<uint8_t> LiveRanks::liveMask() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_;
}

LiveCallReport LiveRanks::lastCall() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_;
}

void LiveRanks::report(bool rerun) {
  std::lock_guard<std::mutex> lock(mu_);
  last_ = LiveCallReport{epoch_.load(std::memory_order_relaxed), count(live_), rerun};
}

size_t LiveRanks::inputBytes(const Task& t) const {
  const size_t elem = typeSize(t.type), n = static_cast<size_t>(nranks_);
  switch (t.coll) {
    case CollType::kAllReduce:
    case CollType::kReduce:
    case CollType::kAllGather:
    case CollType::kGather:
    case CollType::kSend: return t.count * elem;
    case CollType::kBroadcast: return rank_ == t.root ? t.count * elem : 0;
    case CollType::kReduceScatter:
    case CollType::kAlltoAll: return t.count * n * elem;
    case CollType::kScatter: return rank_ == t.root ? t.count * n * elem : 0;
    case CollType::kRecv: return 0;
  }
  return 0;
}

size_t LiveRanks::outputBytes(const Task& t) const {
  const size_t elem = typeSize(t.type), n = static_cast<size_t>(nranks_);
  switch (t.coll) {
    case CollType::kAllReduce:
    case CollType::kBroadcast:
    case CollType::kReduceScatter:
    case CollType::kScatter:
    case CollType::kRecv: return t.count * elem;
    case CollType::kReduce: return rank_ == t.root ? t.count * elem : 0;
    case CollType::kAllGather:
    case CollType::kAlltoAll: return t.count * n * elem;
    case CollType::kGather: return rank_ == t.root ? t.count * n * elem : 0;
    case CollType::kSend: return 0;
  }
  return 0;
}

void LiveRanks::save(const Task& task, uint64_t seq) {
  const size_t bytes = task.sendbuff != nullptr ? inputBytes(task) : 0;
  // Drop the oldest beyond the last two while over the count or the bytes;
  // reuse its memory for this one.
  size_t kept = bytes;
  for (const Saved& h : history_) kept += h.input.size();
  Saved s;
  const auto cap = static_cast<size_t>(kLiveHistoryBytes.get());  // checked at init
  while (history_.size() >= 2 && (history_.size() >= kMaxHistory || kept > cap)) {
    kept -= history_.front().input.size();
    s = std::move(history_.front());
    history_.pop_front();
  }
  s.valid = true;
  s.seq = seq;
  s.task = task;
  s.input.resize(bytes);
  if (bytes > 0) std::memcpy(s.input.data(), task.sendbuff, bytes);
  history_.push_back(std::move(s));
}

const LiveRanks::Saved* LiveRanks::saved(uint64_t seq) const {
  for (const Saved& h : history_)
    if (h.valid && h.seq == seq) return &h;
  return nullptr;
}

Task LiveRanks::savedTask(const Saved& saved, bool intoScratch) {
  Task t = saved.task;
  if (!saved.input.empty()) t.sendbuff = saved.input.data();
  if (intoScratch) {
    // At least a rank's block even where this rank has no output (a Reduce
    // off the root): the executor may stage through it.
    scratch_.resize(std::max<size_t>(std::max(outputBytes(t), t.count * typeSize(t.type)), 1));
    t.recvbuff = scratch_.data();
  }
  return t;
}

// A root or peer that is gone has nothing to send or nowhere to receive:
// every survivor refuses the call alike, naming it.
static Status deadEnd(const Task& t, const std::vector<uint8_t>& live, uint64_t epoch) {
  const int end = rooted(t.coll) ? t.root : (t.coll == CollType::kSend || t.coll == CollType::kRecv) ? t.peer : -1;
  if (end < 0 || end >= static_cast<int>(live.size()) || live[static_cast<size_t>(end)]) return Status::ok();
  const std::string what = rooted(t.coll) ? "its root, rank " : "its peer, rank ";
  return remoteError(std::string(collName(t.coll)) + ": " + what + std::to_string(end) +
                     ", was lost (live-ranks mode, epoch " + std::to_string(epoch) +
                     "): the survivors cannot stand in for it");
}

Status LiveRanks::run(const Task& task) {
  std::vector<uint8_t> live = liveMask();
  if (task.onDevice) {
    if (lost())
      return invalidUsage(std::string(collName(task.coll)) + " on device buffers after a rank was lost: the "
                          "live-ranks mode (PLAIT_LIVE_RANKS) goes on over the survivors with host buffers only");
    return parent_->runHere(task);  // not recovered: its input is not copied
  }
  if (task.coll == CollType::kSend || task.coll == CollType::kRecv) {
    PLAIT_RETURN_IF_ERROR(deadEnd(task, live, epoch()));
    Status s = execute(task);  // not recovered: the next collective is (live_ranks.h)
    if (s.isOk()) report(false);
    return s;
  }
  // Numbered (and kept) before a dead root refuses it: a rank that started
  // it before the loss was known counted it, so every rank must.
  const uint64_t seq = ++seq_;
  save(task, seq);
  PLAIT_RETURN_IF_ERROR(deadEnd(task, live, epoch()));
  Status s = execute(task);
  if (s.isOk()) {
    report(false);
    return s;
  }
  if (s.code() != Code::kRemoteError || parent_->aborted()) return s;
  return recover(seq, std::move(s));
}

Status LiveRanks::execute(const Task& task) {
  if (epoch() == 0) return parent_->runHere(task);
  if (!survivors_) return remoteError("the survivors' communicator of epoch " + std::to_string(epoch()) +
                                      " could not be created");
  return executeOnSurvivors(task);
}

// The same call on the survivors' communicator: ranks renumbered, and the
// buffers that hold one block per rank packed to the survivors' blocks (and
// unpacked after), so that dead ranks' slots are neither read nor written.
Status LiveRanks::executeOnSurvivors(const Task& t) {
  const size_t block = t.count * typeSize(t.type);
  const size_t m = members_.size();
  Task c = t;
  // Avg divides by the ranks that contribute now.
  if (t.ncclOp == ncclAvg && !makeRedOp(t.type, ncclAvg, static_cast<int>(m), &c.op))
    return internalError("live ranks: no Avg for " + std::to_string(m) + " ranks");
  if (rooted(t.coll)) c.root = index_[static_cast<size_t>(t.root)];
  if (t.coll == CollType::kSend || t.coll == CollType::kRecv) c.peer = index_[static_cast<size_t>(t.peer)];
  const bool root = rank_ == t.root;
  auto pack = [&](const void* from) {
    stageIn_.resize(std::max<size_t>(m * block, 1));
    for (size_t i = 0; i < m; ++i)
      std::memcpy(stageIn_.data() + i * block, static_cast<const char*>(from) + members_[i] * block, block);
    return static_cast<const void*>(stageIn_.data());
  };
  auto stageOut = [&] {
    stageOut_.resize(std::max<size_t>(m * block, 1));
    return static_cast<void*>(stageOut_.data());
  };
  auto unpack = [&](void* to) {
    for (size_t i = 0; i < m; ++i)
      std::memcpy(static_cast<char*>(to) + members_[i] * block, stageOut_.data() + i * block, block);
  };
  bool gathered = false;
  switch (t.coll) {
    case CollType::kAllGather:
      c.recvbuff = stageOut();
      gathered = true;
      break;
    case CollType::kReduceScatter: c.sendbuff = pack(t.sendbuff); break;
    case CollType::kAlltoAll:
      c.sendbuff = pack(t.sendbuff);
      c.recvbuff = stageOut();
      gathered = true;
      break;
    case CollType::kGather:
      if (root) {
        c.recvbuff = stageOut();
        gathered = true;
      }
      break;
    case CollType::kScatter:
      if (root) c.sendbuff = pack(t.sendbuff);
      break;
    default: break;
  }
  PLAIT_RETURN_IF_ERROR(survivors_->run(c));
  if (gathered) unpack(t.recvbuff);
  return Status::ok();
}

Status LiveRanks::recover(uint64_t seq, Status failure) {
  PLAIT_WARN(kColl, "rank %d: collective #%llu lost a rank (%s); agreeing with the survivors", rank_,
             static_cast<unsigned long long>(seq), failure.message().c_str());
  uint64_t needFrom = seq;  // the first collective this rank still has to run
  for (int attempt = 0; attempt < nranks_; ++attempt) {
    Communicator* current = parent_;  // only this thread replaces survivors_
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (aborted_) return failure;
      if (epoch() > 0) current = survivors_.get();
    }
    // End the others' waits on this rank at once.
    if (current != nullptr && !current->revoked()) (void)current->revoke();
    Result<Verdict> verdict = agree(needFrom);
    if (!verdict.isOk())
      return Status(verdict.status().code(), verdict.status().message() + " (after: " + failure.message() + ")");
    PLAIT_INFO(kColl, "rank %d: live ranks epoch %llu: %d of %d live, from #%llu (this rank at #%llu, needs #%llu)",
               rank_, static_cast<unsigned long long>(verdict->epoch), count(verdict->live), nranks_,
               static_cast<unsigned long long>(verdict->restartSeq), static_cast<unsigned long long>(seq),
               static_cast<unsigned long long>(needFrom));
    Status s = adopt(*verdict);
    const std::vector<uint8_t> live = liveMask();
    // Collectives this rank finished and others did not: again, for them,
    // into scratch (this rank's results of them stand).
    for (uint64_t k = verdict->restartSeq; s.isOk() && k < seq; ++k) {
      needFrom = std::min(needFrom, k);
      const Saved* before = saved(k);
      if (before == nullptr)
        return remoteError("live ranks: the survivors need collective #" + std::to_string(k) + " again, and rank " +
                           std::to_string(rank_) + " (at #" + std::to_string(seq) + ") no longer keeps its input " +
                           "(PLAIT_LIVE_HISTORY_BYTES)");
      const Task again = savedTask(*before, true);
      if (deadEnd(again, live, epoch()).isOk()) s = execute(again);
      if (s.isOk()) needFrom = k + 1;
    }
    if (s.isOk()) {
      const Task again = savedTask(*saved(seq), false);
      PLAIT_RETURN_IF_ERROR(deadEnd(again, live, epoch()));
      s = execute(again);
    }
    if (s.isOk()) {
      report(true);
      PLAIT_WARN(kColl, "rank %d: collective #%llu completed over %d survivors (epoch %llu)", rank_,
                 static_cast<unsigned long long>(seq), count(live), static_cast<unsigned long long>(epoch()));
      return s;
    }
    if (s.code() != Code::kRemoteError || parent_->aborted()) return s;
    failure = std::move(s);
  }
  return failure;
}

std::vector<uint8_t> LiveRanks::deadNow() const {
  std::vector<uint8_t> dead(static_cast<size_t>(nranks_), 0);
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t r = 0; r < dead.size(); ++r) dead[r] = live_[r] ? 0 : 1;
  }
  for (const PeerProcess& p : parent_->localPeerProcesses())
    if (p.pid > 0 && p.rank >= 0 && p.rank < nranks_ && !processAlive(p.pid)) dead[static_cast<size_t>(p.rank)] = 1;
  dead[static_cast<size_t>(rank_)] = 0;
  return dead;
}

Result<LiveRanks::Verdict> LiveRanks::agree(uint64_t failedSeq) {
  Bootstrap& b = *parent_->bootstrap_;
  const size_t n = static_cast<size_t>(nranks_);
  const uint64_t mine = epoch();
  const int64_t waitMs = kLiveAgreeMs.get() > 0 ? kLiveAgreeMs.get() : parent_->timeoutMs_;
  const Deadline deadline = Deadline::afterMs(waitMs);
  std::vector<uint8_t> dead = deadNow();
  for (;;) {
    const int coord = static_cast<int>(std::find(dead.begin(), dead.end(), 0) - dead.begin());
    const uint32_t tag = agreementTag(coord);
    if (coord == rank_) return coordinate(failedSeq, dead, tag, deadline);
    std::vector<char> claim(kHeader + n);
    putHeader(&claim, mine, failedSeq);
    std::memcpy(claim.data() + kHeader, dead.data(), n);
    Status s = b.send(coord, tag, claim.data(), claim.size(), deadline);
    std::vector<char> got(kHeader + sizeof(ncclUniqueId) + n);
    if (s.isOk()) s = b.recv(coord, tag, got.data(), got.size(), deadline);
    if (s.isOk()) {
      Verdict v;
      getHeader(got, &v.epoch, &v.restartSeq);
      std::memcpy(&v.id, got.data() + kHeader, sizeof v.id);
      v.live.assign(got.begin() + static_cast<std::ptrdiff_t>(kHeader + sizeof v.id), got.end());
      if (std::any_of(v.live.begin(), v.live.end(), [](uint8_t l) { return l > 1; }))
        return remoteError("live ranks: rank " + std::to_string(coord) + " answered with a live-ranks list that is "
                           "not 0s and 1s");
      if (v.epoch <= mine)
        return remoteError("live ranks: rank " + std::to_string(coord) + " answered with epoch " +
                           std::to_string(v.epoch) + ", and this rank is at epoch " + std::to_string(mine) + " already");
      if (v.epoch > mine + 2 * static_cast<uint64_t>(nranks_) + 2)  // see coordinate(): no agreement leads that far
        return remoteError("live ranks: rank " + std::to_string(coord) + " answered with epoch " +
                           std::to_string(v.epoch) + ", far past this rank's " + std::to_string(mine));
      if (!v.live[static_cast<size_t>(rank_)])
        return remoteError("live ranks: the survivors excluded rank " + std::to_string(rank_) + " at epoch " +
                           std::to_string(v.epoch) + " (it did not answer in time); it cannot rejoin");
      return v;
    }
    if (parent_->aborted() || deadline.expired())
      return s.withContext("live ranks: agreeing with rank " + std::to_string(coord) + " (the coordinator) after epoch " +
                           std::to_string(mine));
    // The coordinator is gone (its connection failed before the deadline):
    // the next lowest rank takes over.
    PLAIT_WARN(kColl, "rank %d: live-ranks coordinator rank %d is gone (%s); the next one takes over", rank_, coord,
               s.message().c_str());
    dead[static_cast<size_t>(coord)] = 1;
  }
}

Result<LiveRanks::Verdict> LiveRanks::coordinate(uint64_t failedSeq, std::vector<uint8_t> dead, uint32_t tag,
                                                 Deadline deadline) {
  Bootstrap& b = *parent_->bootstrap_;
  const size_t n = static_cast<size_t>(nranks_);
  Verdict v;
  uint64_t highest = epoch();
  v.restartSeq = failedSeq;
  std::vector<uint8_t> answered(n, 0);
  answered[static_cast<size_t>(rank_)] = 1;
  for (size_t r = 0; r < n; ++r) {
    if (answered[r] || dead[r]) continue;
    std::vector<char> claim(kHeader + n);
    Status s = b.recv(static_cast<int>(r), tag, claim.data(), claim.size(), deadline);
    if (!s.isOk()) {
      if (parent_->aborted()) return s;
      PLAIT_WARN(kColl, "rank %d: rank %zu did not join the live-ranks agreement (%s): counted lost", rank_, r,
                 s.message().c_str());
      dead[r] = 1;
      continue;
    }
    answered[r] = 1;
    uint64_t epoch = 0, seq = 0;
    getHeader(claim, &epoch, &seq);
    if (epoch > this->epoch() + static_cast<uint64_t>(nranks_) + 1) {
      // Each agreement moves every survivor one epoch on, and a rank is
      // never more agreements ahead than there were ranks to lose: a claim
      // beyond that is not a rank of this job's (and one at 2^64-1 would
      // wrap the verdict's epoch to 0).
      PLAIT_WARN(kColl, "rank %d: rank %zu claims live-ranks epoch %llu, far past this rank's %llu: counted lost",
                 rank_, r, static_cast<unsigned long long>(epoch), static_cast<unsigned long long>(this->epoch()));
      answered[r] = 0;
      dead[r] = 1;
      continue;
    }
    highest = std::max(highest, epoch);
    v.restartSeq = std::min(v.restartSeq, seq);
    // What it knows dead (lost before, or a process gone on its host) and has not answered.
    for (size_t q = 0; q < n; ++q)
      if (claim[kHeader + q] && !answered[q]) dead[q] = 1;
  }
  v.epoch = highest + 1;
  v.live.assign(n, 0);
  for (size_t r = 0; r < n; ++r) v.live[r] = dead[r] ? 0 : 1;
  v.live[static_cast<size_t>(rank_)] = 1;
  PLAIT_ASSIGN_OR_RETURN(v.id, createPrivateUniqueId());
  std::vector<char> out(kHeader + sizeof v.id + n);
  putHeader(&out, v.epoch, v.restartSeq);
  std::memcpy(out.data() + kHeader, &v.id, sizeof v.id);
  std::memcpy(out.data() + kHeader + sizeof v.id, v.live.data(), n);
  for (size_t r = 0; r < n; ++r) {
    if (!v.live[r] || static_cast<int>(r) == rank_) continue;
    Status s = b.send(static_cast<int>(r), tag, out.data(), out.size(), deadline);
    if (!s.isOk())  // it died since it answered: the survivors' init fails and the next epoch drops it
      PLAIT_WARN(kColl, "rank %d: telling rank %zu the live-ranks verdict failed: %s", rank_, r, s.message().c_str());
  }
  PLAIT_WARN(kColl, "rank %d: live ranks epoch %llu: %d of %d ranks live, collectives from #%llu run again", rank_,
             static_cast<unsigned long long>(v.epoch), count(v.live), nranks_,
             static_cast<unsigned long long>(v.restartSeq));
  return v;
}

Status LiveRanks::adopt(const Verdict& verdict) {
  std::vector<int> members;
  std::vector<int> index(static_cast<size_t>(nranks_), -1);
  for (int r = 0; r < nranks_; ++r)
    if (verdict.live[static_cast<size_t>(r)]) {
      index[static_cast<size_t>(r)] = static_cast<int>(members.size());
      members.push_back(r);
    }
  auto comm = std::make_unique<Communicator>(index[static_cast<size_t>(rank_)], static_cast<int>(members.size()));
  CommOptions options;
  options.liveChild = true;
  options.name = name_ + " (survivors, epoch " + std::to_string(verdict.epoch) + ")";
  options.cudaDev = cudaDev_;
  options.parentPeers = parent_->localPeerProcesses();
  std::unique_ptr<Communicator> old;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (aborted_) return invalidUsage("the communicator was aborted");
    old = std::move(survivors_);
    live_ = verdict.live;
    members_ = std::move(members);
    index_ = std::move(index);
    epoch_.store(verdict.epoch, std::memory_order_release);
    initializing_ = comm.get();
  }
  if (old) old->abort();
  old.reset();
  Status s = comm->init(verdict.id, options);
  std::lock_guard<std::mutex> lock(mu_);
  initializing_ = nullptr;
  if (aborted_) return invalidUsage("the communicator was aborted");
  if (s.isOk()) survivors_ = std::move(comm);
  return s;
}

}  // namespace plait
