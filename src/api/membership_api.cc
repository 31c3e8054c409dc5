// membership_api.cc — communicators whose members change: ncclCommGrow
// (NCCL 2.32) with ncclCommGetUniqueId, ncclCommRevoke and ncclCommShrink
// (NCCL 2.27), over core/comm_grow.cc and core/comm_shrink.cc.
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "api/api_util.h"
#include "plait/live_ranks.h"

using plait::Status;
using namespace plait::api;

PLAIT_API(ncclResult_t, CommGetUniqueId, (ncclComm_t comm, ncclUniqueId* uniqueId)) {
  const char* call = "ncclCommGetUniqueId";
  if (Status s = checkComm(comm); !s.isOk()) return fail(s, call);
  if (uniqueId == nullptr) return fail(plait::invalidArgument("uniqueId is NULL"), call);
  plait::Result<ncclUniqueId> id = plait::invalidUsage("comm is being destroyed or aborted");
  {
    CommUse use(comm);
    if (use.usable()) id = comm->impl->makeGrowId();
  }
  if (!id.isOk()) return fail(id.status(), call);
  *uniqueId = *id;
  return ncclSuccess;
} PLAIT_API_END

// Existing ranks agree on the id over the old communicator (core/
// comm_grow.cc), then everyone runs an ordinary init over it; without a
// config an existing rank's new communicator keeps the old one's blocking
// mode, as ncclCommSplit does.
PLAIT_API(ncclResult_t, CommGrow,
          (ncclComm_t comm, int nRanks, const ncclUniqueId* uniqueId, int rank, ncclComm_t* newcomm,
           ncclConfig_t* config)) {
  const char* call = "ncclCommGrow";
  if (newcomm == nullptr) return fail(plait::invalidArgument("newcomm (the output pointer) is NULL"), call);
  *newcomm = nullptr;
  if (nRanks < 1) return fail(plait::invalidArgument("nRanks is " + std::to_string(nRanks) + "; must be ≥ 1"), call);
  if (comm == nullptr) {  // a newcomer
    if (uniqueId == nullptr)
      return fail(plait::invalidArgument("uniqueId is NULL: a new rank (comm = NULL) needs the root's id"), call);
    if (rank < 0 || rank >= nRanks)
      return fail(plait::invalidArgument("rank is " + std::to_string(rank) + ": a new rank (comm = NULL) passes its "
                                         "rank in the grown communicator, in [0, " + std::to_string(nRanks) + ")"),
                  call);
    return initRank(newcomm, nRanks, *uniqueId, rank, config, call);
  }
  if (Status s = checkComm(comm); !s.isOk()) return fail(s, call);
  if (rank != -1)
    return fail(plait::invalidArgument("rank is " + std::to_string(rank) + ": an existing rank passes -1 (it keeps " +
                                       "its rank, " + std::to_string(comm->rank) + ")"),
                call);
  if (nRanks <= comm->nranks)
    return fail(plait::invalidArgument("nRanks is " + std::to_string(nRanks) + "; growing a communicator of " +
                                       std::to_string(comm->nranks) + " ranks needs more"),
                call);
  plait::CommOptions probe;
  if (Status s = readCommConfig(config, &probe); !s.isOk()) return fail(s, call);
  if (defersChild(comm)) {
    std::optional<ncclUniqueId> given;  // the caller's id need not outlive the call
    if (uniqueId != nullptr) given = *uniqueId;
    return deferChild(comm, newcomm, config, call, true, [comm, given, nRanks]() -> plait::Result<ChildPlan> {
      plait::Result<ncclUniqueId> agreed = comm->impl->agreeOnGrow(given ? &*given : nullptr, nRanks);
      if (!agreed.isOk()) return agreed.status();
      ChildPlan plan;
      plan.member = true;
      plan.rank = comm->rank;
      plan.nranks = nRanks;
      plan.id = *agreed;
      return plan;
    });
  }
  plait::Result<ncclUniqueId> id = plait::invalidUsage("comm is being destroyed or aborted");
  {
    CommUse use(comm);
    if (use.usable()) id = comm->impl->agreeOnGrow(uniqueId, nRanks);
  }
  if (!id.isOk()) return fail(id.status(), call);
  return initChild(comm, newcomm, nRanks, *id, comm->rank, config, call);
} PLAIT_API_END

// Local: in-flight operations on comm fail fast (also on the peers that wait
// for this rank), later ones are refused; destroy, split and shrink remain.
// As NCCL: comm NULL is a no-op, flags must be NCCL_REVOKE_DEFAULT, and a
// second revoke is an error.
PLAIT_API(ncclResult_t, CommRevoke, (ncclComm_t comm, int revokeFlags)) {
  const char* call = "ncclCommRevoke";
  if (comm == nullptr) return ncclSuccess;
  if (revokeFlags != NCCL_REVOKE_DEFAULT)
    return fail(plait::invalidArgument("revokeFlags is " + std::to_string(revokeFlags) +
                                       "; must be NCCL_REVOKE_DEFAULT (0)"),
                call);
  if (Status s = checkComm(comm); !s.isOk()) return fail(s, call);
  Status s = plait::invalidUsage("comm is being destroyed or aborted");
  {
    CommUse use(comm);
    if (use.usable()) s = comm->impl->revoke();
  }
  return s.isOk() ? ncclSuccess : fail(s, call);
}
PLAIT_API_END

// Every rank not in excludeRanksList calls it (the excluded ones may be
// dead); the survivors keep their order. NCCL_SHRINK_ABORT revokes comm
// first, so that operations still waiting on a dead rank end. Without a
// config the child keeps the parent's blocking mode.
PLAIT_API(ncclResult_t, CommShrink,
          (ncclComm_t comm, int* excludeRanksList, int excludeRanksCount, ncclComm_t* newcomm, ncclConfig_t* config,
           int shrinkFlags)) {
  const char* call = "ncclCommShrink";
  if (newcomm == nullptr) return fail(plait::invalidArgument("newcomm (the output pointer) is NULL"), call);
  *newcomm = nullptr;  // whatever the answer: a caller may poll it
  if (Status s = checkComm(comm); !s.isOk()) return fail(s, call);
  if ((shrinkFlags & ~NCCL_SHRINK_ABORT) != 0)
    return fail(plait::invalidArgument("shrinkFlags is " + std::to_string(shrinkFlags) +
                                       "; must be NCCL_SHRINK_DEFAULT or NCCL_SHRINK_ABORT"),
                call);
  if (excludeRanksList == nullptr || excludeRanksCount < 1)
    return fail(plait::invalidArgument("excludeRanksList must name at least one rank (excludeRanksCount is " +
                                       std::to_string(excludeRanksCount) + ")"),
                call);
  std::vector<int> excluded(excludeRanksList, excludeRanksList + excludeRanksCount);
  std::sort(excluded.begin(), excluded.end());  // a copy: the caller's list is left as it was
  for (size_t i = 0; i < excluded.size(); ++i) {
    if (excluded[i] < 0 || excluded[i] >= comm->nranks)
      return fail(plait::invalidArgument("excludeRanksList holds rank " + std::to_string(excluded[i]) +
                                         ", outside [0, " + std::to_string(comm->nranks) + ")"),
                  call);
    if (i > 0 && excluded[i] == excluded[i - 1])
      return fail(plait::invalidArgument("excludeRanksList holds rank " + std::to_string(excluded[i]) + " twice"),
                  call);
    if (excluded[i] == comm->rank)
      return fail(plait::invalidArgument("excludeRanksList holds this rank (" + std::to_string(comm->rank) +
                                         "): an excluded rank does not call ncclCommShrink"),
                  call);
  }
  plait::CommOptions probe;
  if (Status s = readCommConfig(config, &probe); !s.isOk()) return fail(s, call);
  const bool abortInFlight = (shrinkFlags & NCCL_SHRINK_ABORT) != 0;
  if (defersChild(comm)) {
    // NCCL_SHRINK_ABORT revokes now: the calls queued before this one (which
    // may wait on the dead ranks) must not hold the shrink back.
    if (abortInFlight) {
      Status s = plait::invalidUsage("comm is being destroyed or aborted");
      {
        CommUse use(comm);
        if (use.usable()) s = comm->impl->revoked() ? Status::ok() : comm->impl->revoke();
      }
      if (!s.isOk()) return fail(s, call);
    }
    return deferChild(comm, newcomm, config, call, true, [comm, excluded, abortInFlight] {
      return comm->impl->shrink(excluded, abortInFlight);
    });
  }
  plait::Result<plait::Communicator::SplitResult> shrunk = plait::invalidUsage("comm is being destroyed or aborted");
  {
    CommUse use(comm);
    if (use.usable()) shrunk = comm->impl->shrink(excluded, abortInFlight);
  }
  if (!shrunk.isOk()) return fail(shrunk.status(), call);
  return initChild(comm, newcomm, shrunk->nranks, shrunk->id, shrunk->rank, config, call, shrunk->rootRank);
}
PLAIT_API_END

// plait/live_ranks.h: the live-ranks mode's mask and last report.
namespace {

plait::Result<const plait::LiveRanks*> liveOf(ncclComm_t comm, CommUse& use) {
  if (!use.usable()) return plait::invalidUsage("comm is being destroyed or aborted");
  const plait::LiveRanks* live = comm->impl->liveRanks();
  if (live == nullptr)
    return plait::invalidUsage("comm is not in the live-ranks mode (PLAIT_LIVE_RANKS=1 on every rank at its creation)");
  return live;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) ncclResult_t plaitCommLiveRanks(ncclComm_t comm,
                                                                                  unsigned long long* epoch,
                                                                                  int* live) try {
  const char* call = "plaitCommLiveRanks";
  if (Status s = checkComm(comm); !s.isOk()) return fail(s, call);
  if (epoch == nullptr) return fail(plait::invalidArgument("epoch is NULL"), call);
  CommUse use(comm);
  auto state = liveOf(comm, use);
  if (!state.isOk()) return fail(state.status(), call);
  const std::vector<uint8_t> mask = (*state)->liveMask();
  *epoch = (*state)->epoch();
  if (live != nullptr)
    for (size_t r = 0; r < mask.size(); ++r) live[r] = mask[r];
  return ncclSuccess;
} PLAIT_API_END

extern "C" __attribute__((visibility("default"))) ncclResult_t plaitCommLastCall(ncclComm_t comm,
                                                                                 plaitLiveCallReport_t* report) try {
  const char* call = "plaitCommLastCall";
  if (Status s = checkComm(comm); !s.isOk()) return fail(s, call);
  if (report == nullptr) return fail(plait::invalidArgument("report is NULL"), call);
  CommUse use(comm);
  auto state = liveOf(comm, use);
  if (!state.isOk()) return fail(state.status(), call);
  const plait::LiveCallReport r = (*state)->lastCall();
  report->epoch = r.epoch;
  report->contributors = r.contributors;
  report->rerun = r.rerun ? 1 : 0;
  return ncclSuccess;
} PLAIT_API_END
