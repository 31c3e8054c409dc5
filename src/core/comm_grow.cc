// comm_grow.cc — the existing ranks' part of ncclCommGrow.
//
// Growing makes a new communicator of newNranks ranks: the existing ranks
// keep their numbers, newcomers take the others. It is an ordinary init over
// a fresh id whose bootstrap root runs in the process of the rank that called
// ncclCommGetUniqueId; the existing ranks learn that id here, from that rank,
// over this communicator's bootstrap (newcomers get it from the application).
// This communicator is not touched and stays usable.
#include <cstring>
#include <string>
#include <vector>

#include "base/log.h"
#include "core/comm.h"

namespace plait {

Result<ncclUniqueId> Communicator::makeGrowId() {
  if (aborted()) return invalidUsage("the communicator was aborted");
  std::lock_guard<std::mutex> lock(growMu_);
  // A newer id replaces one not consumed: after a failed grow (or none at
  // all) the old id's root may be gone, and refusing a new one would leave
  // the communicator unable to grow again. The old root ends at its timeout.
  if (growId_)
    PLAIT_INFO(kInit, "ncclCommGetUniqueId: a new id replaces this communicator's previous one, not consumed by an "
               "ncclCommGrow");
  PLAIT_ASSIGN_OR_RETURN(ncclUniqueId id, createPrivateUniqueId());
  growId_ = id;
  return id;
}

Result<ncclUniqueId> Communicator::agreeOnGrow(const ncclUniqueId* id, int newNranks) {
  constexpr const char* call = "ncclCommGrow";
  if (aborted()) return invalidUsage("the communicator was aborted");
  log::ScopedLogRank logRank(rank_);
  // Ours, checked before the exchange but reported after it, so that every
  // rank leaves with the same answer.
  bool ownId = false;
  if (id != nullptr) {
    std::lock_guard<std::mutex> lock(growMu_);
    ownId = growId_ && std::memcmp(&*growId_, id, sizeof(ncclUniqueId)) == 0;
  }
  struct Entry {
    int32_t hasId;
    int32_t ownId;
    int32_t newNranks;
    int32_t reserved;
    ncclUniqueId id;
  };
  std::vector<Entry> all(nranks_);
  std::memset(static_cast<void*>(all.data()), 0, all.size() * sizeof(Entry));
  all[rank_].hasId = id != nullptr ? 1 : 0;
  all[rank_].ownId = ownId ? 1 : 0;
  all[rank_].newNranks = newNranks;
  if (id != nullptr) all[rank_].id = *id;
  const Deadline deadline = Deadline::afterMs(timeoutMs_);
  Status s = bootstrap_->allGather(all.data(), sizeof(Entry), deadline);
  if (!s.isOk()) return s.withContext(std::string(call) + ": agreeing with the other ranks");
  std::vector<int> holders;
  for (int r = 0; r < nranks_; ++r) {
    if (all[r].newNranks != newNranks)
      return invalidArgument(std::string(call) + ": rank " + std::to_string(r) + " asks for " +
                             std::to_string(all[r].newNranks) + " ranks and rank " + std::to_string(rank_) + " for " +
                             std::to_string(newNranks));
    if (all[r].hasId) holders.push_back(r);
  }
  if (holders.empty())
    return invalidUsage(std::string(call) + ": no rank passed the id; the rank that called ncclCommGetUniqueId "
                                            "passes it, the other existing ranks pass NULL");
  if (holders.size() > 1)
    return invalidUsage(std::string(call) + ": ranks " + std::to_string(holders[0]) + " and " +
                        std::to_string(holders[1]) + " both passed an id; only the rank that called "
                                                     "ncclCommGetUniqueId passes it");
  const Entry& root = all[holders[0]];
  if (!root.ownId)
    return invalidUsage(std::string(call) + ": rank " + std::to_string(holders[0]) +
                        " passed an id that ncclCommGetUniqueId did not make on this communicator (or one "
                        "already consumed)");
  if (holders[0] == rank_) {
    std::lock_guard<std::mutex> lock(growMu_);
    growId_.reset();  // spent: its root serves this one grow
  }
  PLAIT_INFO(kInit, "ncclCommGrow: rank %d of %d keeps its rank in the grown communicator of %d (id from rank %d)",
             rank_, nranks_, newNranks, holders[0]);
  return root.id;
}

}  // namespace plait
