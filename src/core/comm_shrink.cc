// comm_shrink.cc — ncclCommRevoke and the survivors' part of ncclCommShrink.
//
// Revoke raises the abort flag every wait of the data path watches and marks
// this rank's FIFO ends aborted, so operations in flight here and on the
// peers waiting for this rank end within milliseconds; the bootstrap stops
// watching that flag first, so split and shrink still work over it.
// Shrink never uses a collective of the old bootstrap (an excluded rank may
// be dead and would never take its turn in a ring): the lowest surviving
// rank makes the new id and sends it, with its list of excluded ranks, to
// each survivor point to point; a survivor with another list refuses.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "base/log.h"
#include "core/comm.h"

namespace plait {
namespace {

// Tags of the shrink messages (bootstrap user tags; no other user of the
// communicator's bootstrap sends with these).
constexpr uint32_t kShrinkTag = 0x53480000;

uint64_t listHash(const std::vector<int>& ranks) {
  uint64_t h = 1469598103934665603ull;
  for (int r : ranks) {
    h ^= static_cast<uint64_t>(static_cast<uint32_t>(r));
    h *= 1099511628211ull;
  }
  return h ^ ranks.size();
}

}  // namespace

Status Communicator::revoke() {
  if (aborted()) return invalidUsage("the communicator was aborted");
  if (revoked_.exchange(true, std::memory_order_acq_rel)) return invalidArgument("the communicator is already revoked");
  {
    std::lock_guard<std::mutex> lock(partsMu_);
    if (bootstrap_) bootstrap_->detachAbortFlag();  // before the flag rises
    abortFlag_.store(1, std::memory_order_release);
    if (device_) device_->abort();
    if (deviceShm_) deviceShm_->abort();
    if (deviceNet_) deviceNet_->abort();
    if (shm_) shm_->abort();
    if (net_) net_->abort();
  }
  // Kernels see the abort word at their next poll; wait for them (bounded,
  // outside the lock, which abort() takes) so that the communicator is
  // quiescent when revoke returns, as NCCL's is when its state turns back to
  // ncclSuccess. The parts stay: destroy waits for this call to leave.
  if (device_ && !device_->drain(Deadline::afterMs(std::clamp<int64_t>(timeoutMs_, 100, 10000))))
    PLAIT_WARN(kInit, "rank %d: device collectives still running after ncclCommRevoke", rank_);
  PLAIT_INFO(kInit, "rank %d: communicator revoked", rank_);
  return Status::ok();
}

Result<Communicator::SplitResult> Communicator::shrink(const std::vector<int>& excluded, bool abortInFlight) {
  constexpr const char* call = "ncclCommShrink";
  if (aborted()) return invalidUsage("the communicator was aborted");
  if (abortInFlight && !revoked()) PLAIT_RETURN_IF_ERROR(revoke());
  log::ScopedLogRank logRank(rank_);
  std::vector<int> survivors;
  for (int r = 0; r < nranks_; ++r)
    if (!std::binary_search(excluded.begin(), excluded.end(), r)) survivors.push_back(r);
  struct Offer {
    uint64_t listHash;
    uint32_t excludedCount;
    uint32_t reserved;
    ncclUniqueId id;
  };
  const uint32_t tag = kShrinkTag + (shrinks_++ & 0xffff);
  const Deadline deadline = Deadline::afterMs(timeoutMs_);
  Offer offer{listHash(excluded), static_cast<uint32_t>(excluded.size()), 0, ncclUniqueId{}};
  const int root = survivors.front();
  if (rank_ == root) {
    PLAIT_ASSIGN_OR_RETURN(offer.id, createPrivateUniqueId());
    for (size_t i = 1; i < survivors.size(); ++i) {
      Status s = bootstrap_->send(survivors[i], tag, &offer, sizeof offer, deadline);
      if (!s.isOk())
        return s.withContext(std::string(call) + ": sending the new id to rank " + std::to_string(survivors[i]));
    }
    // Every survivor's answer, then the verdict to all: one refusal is every
    // survivor's error (rather than an init waiting for a rank that will not come).
    int32_t refusedBy = -1;
    for (size_t i = 1; i < survivors.size(); ++i) {
      int32_t agreed = 0;
      Status s = bootstrap_->recv(survivors[i], tag, &agreed, sizeof agreed, deadline);
      if (!s.isOk())
        return s.withContext(std::string(call) + ": waiting for rank " + std::to_string(survivors[i]) + "'s answer");
      if (!agreed && refusedBy < 0) refusedBy = survivors[i];
    }
    for (size_t i = 1; i < survivors.size(); ++i) {
      Status s = bootstrap_->send(survivors[i], tag, &refusedBy, sizeof refusedBy, deadline);
      if (!s.isOk()) return s.withContext(std::string(call) + ": telling rank " + std::to_string(survivors[i]));
    }
    if (refusedBy >= 0)
      return invalidUsage(std::string(call) + ": rank " + std::to_string(refusedBy) +
                          " passed another list of excluded ranks (every survivor passes the same list)");
  } else {
    Offer got{};
    Status s = bootstrap_->recv(root, tag, &got, sizeof got, deadline);
    if (!s.isOk())
      return s.withContext(std::string(call) + ": waiting for the new id from rank " + std::to_string(root) +
                           " (the lowest rank not excluded)");
    const int32_t agreed = got.listHash == offer.listHash && got.excludedCount == offer.excludedCount ? 1 : 0;
    s = bootstrap_->send(root, tag, &agreed, sizeof agreed, deadline);
    if (!s.isOk()) return s.withContext(std::string(call) + ": answering rank " + std::to_string(root));
    int32_t refusedBy = -1;
    s = bootstrap_->recv(root, tag, &refusedBy, sizeof refusedBy, deadline);
    if (!s.isOk()) return s.withContext(std::string(call) + ": waiting for rank " + std::to_string(root) + "'s verdict");
    if (agreed && refusedBy >= 0)
      return invalidUsage(std::string(call) + ": rank " + std::to_string(refusedBy) +
                          " passed another list of excluded ranks (every survivor passes the same list)");
    if (!agreed)
      return invalidUsage(std::string(call) + ": rank " + std::to_string(root) + " excludes " +
                          std::to_string(got.excludedCount) + " rank(s) and rank " + std::to_string(rank_) + " " +
                          std::to_string(excluded.size()) + ", or other ones (every survivor passes the same list)");
    offer.id = got.id;
  }
  SplitResult out;
  out.member = true;
  out.rank = static_cast<int>(std::find(survivors.begin(), survivors.end(), rank_) - survivors.begin());
  out.nranks = static_cast<int>(survivors.size());
  out.id = offer.id;
  out.rootRank = survivors.front();
  PLAIT_INFO(kInit, "shrink: rank %d of %d becomes rank %d of %d (%zu excluded)", rank_, nranks_, out.rank,
             out.nranks, excluded.size());
  return out;
}

}  // namespace plait
