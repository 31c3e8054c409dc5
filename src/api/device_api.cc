// device_api.cc — the host entry points of the device API (nccl_device.h):
// device communicators, teams, and the resource requirements of barriers
// and low-latency all-to-all buffers.
//
// Device communicators and symmetric windows are core/symmetric.h's: each
// LSA rank's window memory mapped at NCCL's flat layout (CUDA VMM), LSA
// barriers in a zeroed resource window. Where the ranks cannot (no device,
// no CUDA P2P inside the LSA team, no VMM, NCCL_WIN_ENABLE=0),
// ncclDevCommCreate is ncclInvalidUsage naming why, as NCCL's where
// symmetric memory is unavailable.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "api/api_util.h"
#include "core/group.h"
#include "nccl_device.h"

using plait::Status;
using namespace plait::api;

// The profiling names of the functions that return a value, not a result.
extern "C" {
ncclTeam_t pncclTeamWorld(ncclComm_t comm);
ncclTeam_t pncclTeamLsa(ncclComm_t comm);
ncclTeam_t pncclTeamRail(ncclComm_t comm);
int pncclTeamRankToWorld(ncclComm_t comm, ncclTeam_t team, int rank);
int pncclTeamRankToLsa(ncclComm_t comm, ncclTeam_t team, int rank);
int pncclLLA2ACalcSlots(int maxElts, int maxEltSize);
ncclResult_t pncclLsaBarrierCreateRequirement(ncclTeam_t team, int nBarriers, ncclLsaBarrierHandle_t* outHandle,
                                              ncclDevResourceRequirements_t* outReq);
ncclResult_t pncclGinBarrierCreateRequirement(ncclComm_t comm, ncclTeam_t team, int nBarriers,
                                              ncclGinBarrierHandle_t* outHandle, ncclDevResourceRequirements_t* outReq);
ncclResult_t pncclLLA2ACreateRequirement(int nBlocks, int nSlots, ncclLLA2AHandle_t* outHandle,
                                         ncclDevResourceRequirements_t* outReq);
}

// As PLAIT_API for entry points that return a value other than a result:
// bodies that cannot throw (teamsOf catches; the rest is arithmetic).
#define PLAIT_VALUE_API(ret, name, args)                                      \
  extern "C" ret nccl##name args __attribute__((weak, alias("pnccl" #name))); \
  extern "C" __attribute__((visibility("default"))) ret pnccl##name args

namespace {

// This rank's view of the world and LSA teams, or nothing (with a WARN and
// ncclGetLastError set) when comm is not a live communicator.
struct Teams {
  bool ok = false;
  int rank = 0, nranks = 0, lsaSize = 1;
};

Teams teamsOf(ncclComm_t comm, const char* call) noexcept {
  Teams t;
  try {
    if (Status s = checkComm(comm); !s.isOk()) {
      (void)fail(s, call);
      return t;
    }
    CommUse use(comm);
    if (!use.usable() || !comm->impl) {
      (void)fail(plait::invalidUsage("the communicator is being destroyed or aborted"), call);
      return t;
    }
    t.rank = comm->rank;
    t.nranks = comm->nranks;
    t.lsaSize = std::max(1, comm->impl->lsaSize());
    t.ok = true;
  } catch (...) {
    (void)exceptionAtBoundary(call);
  }
  return t;
}

}  // namespace

// Collective (at the outermost ncclGroupEnd inside a group, as NCCL's).
// Multimem and GIN are never available (Plait has no NVLS and no
// GPU-initiated networking); GIN-backed barriers are refused only where the
// rail team has more than one rank (with one, they have nothing to do).
namespace {
Status devCommCreateNow(ncclComm_t comm, ncclDevCommRequirements_t const* reqs, ncclDevComm_t* out) {
  PLAIT_RETURN_IF_ERROR(checkComm(comm));
  CommUse use(comm);
  if (!use.usable() || !comm->impl) return plait::invalidUsage("comm is being destroyed or aborted");
  return comm->impl->createDevComm(*reqs, out);
}

// A deep copy of a requirements struct and its resource list.
struct RequirementsCopy {
  explicit RequirementsCopy(const ncclDevCommRequirements_t& reqs) : top(reqs) {
    for (ncclDevResourceRequirements_t* r = reqs.resourceRequirementsList; r != nullptr; r = r->next)
      list.push_back(*r);
    for (size_t i = 0; i < list.size(); ++i) list[i].next = i + 1 < list.size() ? &list[i + 1] : nullptr;
    top.resourceRequirementsList = list.empty() ? nullptr : list.data();
  }
  ncclDevCommRequirements_t top;
  std::vector<ncclDevResourceRequirements_t> list;
};

// The caller's linked lists, walked at most this far: a cycle (or a list
// longer than any real one) is an error naming the list, not a walk without
// end (symmetric.cc keeps the same bound).
constexpr size_t kMaxListed = 4096;
template <typename Node>
bool bounded(const Node* head) {
  size_t n = 0;
  for (; head != nullptr; head = head->next)
    if (++n > kMaxListed) return false;
  return true;
}

Status unsupportedRequirements(ncclComm_t comm, ncclDevCommRequirements_t const* reqs) {
  if (!bounded(reqs->resourceRequirementsList))
    return plait::invalidArgument("reqs->resourceRequirementsList has a cycle (or over 4096 entries)");
  if (!bounded(reqs->teamRequirementsList))
    return plait::invalidArgument("reqs->teamRequirementsList has a cycle (or over 4096 entries)");
  std::string what;
  if (reqs->lsaMultimem) what += "; lsaMultimem (NVLink SHARP multicast) is never available";
  for (ncclTeamRequirements_t* t = reqs->teamRequirementsList; t != nullptr && what.empty(); t = t->next)
    if (t->multimem) what += "; a team requirement asks for multimem (NVLink SHARP multicast), never available";
  const int lsaSize = std::max(1, comm->impl->lsaSize());
  const bool railTeam = comm->nranks / lsaSize > 1;
  if (reqs->ginSignalCount > 0 || reqs->ginCounterCount > 0 || reqs->ginForceEnable ||
      (railTeam && (reqs->railGinBarrierCount > 0 || reqs->barrierCount > 0)))
    what += "; GIN (GPU-initiated networking: ginSignalCount=" + std::to_string(reqs->ginSignalCount) +
            " ginCounterCount=" + std::to_string(reqs->ginCounterCount) +
            " ginForceEnable=" + std::to_string(reqs->ginForceEnable) +
            (railTeam ? ", barriers across hosts" : "") + ") is never available";
  for (ncclDevResourceRequirements_t* r = reqs->resourceRequirementsList; r != nullptr && what.empty(); r = r->next)
    if (r->ginSignalCount > 0 || r->ginCounterCount > 0)
      what += "; a resource requirement asks for GIN signals or counters, never available";
  if (reqs->lsaLLA2ABlockCount > 0 || reqs->lsaLLA2ASlotCount > 0)
    what += "; lsaLLA2ABlockCount/lsaLLA2ASlotCount are not supported (use ncclLLA2ACreateRequirement)";
  if (what.empty()) return Status::ok();
  return plait::invalidUsage("this communicator cannot provide what reqs asks for" + what +
                             ". Plait's device API covers LSA windows and LSA barriers");
}
}  // namespace

PLAIT_API(ncclResult_t, DevCommCreate,
          (ncclComm_t comm, ncclDevCommRequirements_t const* reqs, ncclDevComm_t* outDevComm)) {
  const char* call = "ncclDevCommCreate";
  if (reqs == nullptr) return fail(plait::invalidArgument("reqs is NULL"), call);
  if (outDevComm == nullptr) return fail(plait::invalidArgument("outDevComm is NULL"), call);
  if (Status s = checkComm(comm); !s.isOk()) return fail(s, call);
  if (Status s = checkQuiet(comm); !s.isOk()) return fail(s, call);
  {
    CommUse use(comm);
    if (!use.usable() || !comm->impl) return fail(plait::invalidUsage("comm is being destroyed or aborted"), call);
    if (Status s = unsupportedRequirements(comm, reqs); !s.isOk()) return fail(s, call);
  }
  if (plait::group::active()) {
    // The requirements as they are now (the caller may reuse its structs
    // before ncclGroupEnd); the handles they point to are written at the end.
    auto copy = std::make_shared<RequirementsCopy>(*reqs);
    plait::group::deferSetup(comm, [=] { return devCommCreateNow(comm, &copy->top, outDevComm); });
    return ncclSuccess;
  }
  return fail(devCommCreateNow(comm, reqs, outDevComm), call);
} PLAIT_API_END

PLAIT_API(ncclResult_t, DevCommDestroy, (ncclComm_t comm, ncclDevComm_t const* devComm)) {
  const char* call = "ncclDevCommDestroy";
  if (devComm == nullptr) return fail(plait::invalidArgument("devComm is NULL"), call);
  if (Status s = checkComm(comm); !s.isOk()) return fail(s, call);
  CommUse use(comm);
  if (!use.usable() || !comm->impl) return fail(plait::invalidUsage("comm is being destroyed or aborted"), call);
  return fail(comm->impl->destroyDevComm(*devComm), call);
} PLAIT_API_END

PLAIT_VALUE_API(ncclTeam_t, TeamWorld, (ncclComm_t comm)) {
  const Teams t = teamsOf(comm, "ncclTeamWorld");
  return t.ok ? ncclTeam_t{t.nranks, t.rank, 1} : ncclTeam_t{0, 0, 0};
}

PLAIT_VALUE_API(ncclTeam_t, TeamLsa, (ncclComm_t comm)) {
  const Teams t = teamsOf(comm, "ncclTeamLsa");
  return t.ok ? ncclTeam_t{t.lsaSize, t.rank % t.lsaSize, 1} : ncclTeam_t{0, 0, 0};
}

PLAIT_VALUE_API(ncclTeam_t, TeamRail, (ncclComm_t comm)) {
  const Teams t = teamsOf(comm, "ncclTeamRail");
  return t.ok ? ncclTeam_t{t.nranks / t.lsaSize, t.rank / t.lsaSize, t.lsaSize} : ncclTeam_t{0, 0, 0};
}

PLAIT_VALUE_API(int, TeamRankToWorld, (ncclComm_t comm, ncclTeam_t team, int rank)) {
  const Teams t = teamsOf(comm, "ncclTeamRankToWorld");
  if (!t.ok || rank < 0 || rank >= team.nRanks) return -1;
  // In 64 bits: a team that is not this communicator's may hold any values.
  const int64_t world = t.rank + (int64_t{rank} - team.rank) * team.stride;
  return world >= 0 && world < t.nranks ? static_cast<int>(world) : -1;
}

PLAIT_VALUE_API(int, TeamRankToLsa, (ncclComm_t comm, ncclTeam_t team, int rank)) {
  const Teams t = teamsOf(comm, "ncclTeamRankToLsa");
  if (!t.ok || rank < 0 || rank >= team.nRanks) return -1;
  const int64_t lsa = t.rank % t.lsaSize + (int64_t{rank} - team.rank) * team.stride;
  return lsa >= 0 && lsa < t.lsaSize ? static_cast<int>(lsa) : -1;
}

// A barrier handle's words (nccl_device/lsa_barrier.h): 3 per barrier and
// one inbox per barrier and team member.
PLAIT_API(ncclResult_t, LsaBarrierCreateRequirement,
          (ncclTeam_t team, int nBarriers, ncclLsaBarrierHandle_t* outHandle, ncclDevResourceRequirements_t* outReq)) {
  const char* call = "ncclLsaBarrierCreateRequirement";
  if (outHandle == nullptr || outReq == nullptr) return fail(plait::invalidArgument("outHandle or outReq is NULL"), call);
  if (nBarriers < 0 || team.nRanks < 1)
    return fail(plait::invalidArgument("nBarriers " + std::to_string(nBarriers) + " over a team of " +
                                       std::to_string(team.nRanks) + " ranks"),
                call);
  std::memset(static_cast<void*>(outReq), 0, sizeof *outReq);
  outHandle->nBarriers = nBarriers;
  outHandle->bufHandle = 0;
  outReq->bufferSize = (3 + static_cast<size_t>(team.nRanks)) * nBarriers * sizeof(uint32_t);
  outReq->bufferAlign = alignof(uint32_t);
  outReq->outBufferHandle = &outHandle->bufHandle;
  return ncclSuccess;
} PLAIT_API_END

// A GIN barrier: a signal per barrier and an inbox word per barrier and team
// member (GIN itself is refused at creation; the requirement is still valid).
PLAIT_API(ncclResult_t, GinBarrierCreateRequirement,
          (ncclComm_t comm, ncclTeam_t team, int nBarriers, ncclGinBarrierHandle_t* outHandle,
           ncclDevResourceRequirements_t* outReq)) {
  const char* call = "ncclGinBarrierCreateRequirement";
  if (outHandle == nullptr || outReq == nullptr) return fail(plait::invalidArgument("outHandle or outReq is NULL"), call);
  if (Status s = checkComm(comm); !s.isOk()) return fail(s, call);
  if (nBarriers < 0 || team.nRanks < 1)
    return fail(plait::invalidArgument("nBarriers " + std::to_string(nBarriers) + " over a team of " +
                                       std::to_string(team.nRanks) + " ranks"),
                call);
  std::memset(static_cast<void*>(outReq), 0, sizeof *outReq);
  outHandle->signal0 = 0;
  outHandle->bufHandle = 0;
  outReq->bufferSize = static_cast<size_t>(team.nRanks) * nBarriers * sizeof(uint32_t);
  outReq->bufferAlign = alignof(uint32_t);
  outReq->outBufferHandle = &outHandle->bufHandle;
  outReq->ginSignalCount = nBarriers;
  outReq->outGinSignalStart = &outHandle->signal0;
  return ncclSuccess;
} PLAIT_API_END

// Low-latency all-to-all: 8 payload bytes per 16-byte slot (a flag word
// beside each).
PLAIT_VALUE_API(int, LLA2ACalcSlots, (int maxElts, int maxEltSize)) {
  if (maxElts <= 0 || maxEltSize <= 0) return 0;
  const int64_t slots = int64_t{maxElts} * ((int64_t{maxEltSize} + 7) / 8);
  return slots <= INT_MAX ? static_cast<int>(slots) : 0;  // no count of slots fits: none
}

PLAIT_API(ncclResult_t, LLA2ACreateRequirement,
          (int nBlocks, int nSlots, ncclLLA2AHandle_t* outHandle, ncclDevResourceRequirements_t* outReq)) {
  const char* call = "ncclLLA2ACreateRequirement";
  if (outHandle == nullptr || outReq == nullptr) return fail(plait::invalidArgument("outHandle or outReq is NULL"), call);
  if (nBlocks < 0 || nSlots < 0)
    return fail(plait::invalidArgument("nBlocks " + std::to_string(nBlocks) + ", nSlots " + std::to_string(nSlots)),
                call);
  std::memset(static_cast<void*>(outReq), 0, sizeof *outReq);
  outHandle->bufHandle = 0;
  outHandle->nSlots = static_cast<uint32_t>(nSlots);
  outReq->bufferSize = static_cast<size_t>(nBlocks) * (1 + 2 * static_cast<size_t>(nSlots)) * 16;
  outReq->bufferAlign = 16;
  outReq->outBufferHandle = &outHandle->bufHandle;
  return ncclSuccess;
} PLAIT_API_END
