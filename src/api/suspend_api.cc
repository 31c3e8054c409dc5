// suspend_api.cc — NCCL 2.32's ncclCommSuspend, ncclCommResume and
// ncclCommMemStats over core/comm_suspend.cc.
#include <string>

#include "api/api_util.h"

using plait::Status;
using namespace plait::api;

namespace {

// Runs `body` on a usable communicator: NCCL's arguments checks, then the
// call unless destroy or abort has begun.
template <class Body>
ncclResult_t onComm(ncclComm_t comm, const char* call, Body body) {
  if (Status s = checkComm(comm); !s.isOk()) return fail(s, call);
  CommUse use(comm);
  if (!use.usable()) return fail(plait::invalidUsage("comm is being destroyed or aborted"), call);
  if (Status s = body(); !s.isOk()) return fail(s, call);
  return ncclSuccess;
}

}  // namespace

PLAIT_API(ncclResult_t, CommSuspend, (ncclComm_t comm, int flags)) {
  return onComm(comm, "ncclCommSuspend", [&] {
    PLAIT_RETURN_IF_ERROR(checkQuiet(comm));
    return comm->impl->suspend(flags);
  });
} PLAIT_API_END

PLAIT_API(ncclResult_t, CommResume, (ncclComm_t comm)) {
  return onComm(comm, "ncclCommResume", [&] {
    PLAIT_RETURN_IF_ERROR(checkQuiet(comm));
    return comm->impl->resume();
  });
} PLAIT_API_END

PLAIT_API(ncclResult_t, CommMemStats, (ncclComm_t comm, ncclCommMemStat_t stat, uint64_t* value)) {
  return onComm(comm, "ncclCommMemStats", [&]() -> Status {
    if (value == nullptr) return plait::invalidArgument("value (the output pointer) is NULL");
    const plait::Communicator::MemStats m = comm->impl->memStats();
    switch (stat) {
      case ncclStatGpuMemSuspend: *value = m.suspendable; break;
      case ncclStatGpuMemSuspended: *value = m.suspended ? 1 : 0; break;
      case ncclStatGpuMemPersist: *value = m.persistent; break;
      case ncclStatGpuMemTotal: *value = m.suspendable + m.persistent; break;
      default:
        return plait::invalidArgument("stat is " + std::to_string(static_cast<int>(stat)) +
                                      ", not an ncclCommMemStat_t (0..3)");
    }
    return Status::ok();
  });
} PLAIT_API_END
