// rma_api.cc — NCCL 2.32's one-sided operations: ncclPutSignal, ncclSignal,
// ncclWaitSignal, and Plait's plaitGet, plaitWaitAnySignal, plaitTestSignal
// (plait/rma.h; core/comm_rma.cc, rma/rma_service.h). Arguments are
// checked as NCCL 2.32 checks them (sigIdx, ctx and flags 0, opCnt > 0, a
// window and a source buffer for a put), each refusal naming the argument;
// the operation then runs now (stream NULL), on a Plait host stream, or at
// the end of the calling thread's group.
#include <functional>
#include <string>
#include <vector>

#include "algorithms/types.h"
#include "api/api_util.h"
#include "core/group.h"
#include "core/host_stream.h"
#include "plait/rma.h"

using plait::Status;
using namespace plait::api;

namespace {

Status checkSlot(int sigIdx, int ctx, const char* where) {
  if (sigIdx != 0)
    return plait::invalidArgument(std::string(where) + "sigIdx is " + std::to_string(sigIdx) +
                                  ": NCCL 2.32 has one signal per peer (sigIdx 0)");
  if (ctx != 0)
    return plait::invalidArgument(std::string(where) + "ctx is " + std::to_string(ctx) +
                                  ": NCCL 2.32 has one context (ctx 0)");
  return Status::ok();
}

// What ncclPutSignal and ncclSignal both take: the communicator, the peer
// to signal, NCCL 2.32's one signal and context, no flags.
Status checkTarget(ncclComm_t comm, int peer, int sigIdx, int ctx, unsigned int flags) {
  PLAIT_RETURN_IF_ERROR(checkComm(comm));
  PLAIT_RETURN_IF_ERROR(checkRoot(peer, comm->nranks, "peer"));
  PLAIT_RETURN_IF_ERROR(checkSlot(sigIdx, ctx, ""));
  if (flags != 0) return plait::invalidArgument("flags is " + std::to_string(flags) + ": must be 0");
  return Status::ok();
}

// The checks every one-sided call shares; fills the task's placement
// (host stream or blocking). One-sided operations move host memory only.
Status common(ncclComm_t comm, std::vector<UsedBuffer> used, cudaStream_t stream, plait::Task* task) {
  PLAIT_RETURN_IF_ERROR(checkComm(comm));
  PLAIT_RETURN_IF_ERROR(checkQuiet(comm));
  PLAIT_RETURN_IF_ERROR(placeTask(comm, used, stream, task));
  if (task->onDevice)
    return plait::invalidUsage(
        used.empty() || used.front().count == 0
            ? "stream is a CUDA stream: Plait's one-sided operations run on the host so far; pass NULL to block, "
              "or a Plait host stream"
            : "localbuff is CUDA device memory: Plait's one-sided operations move host memory only so far");
  return Status::ok();
}

// Runs `op` now, on the task's host stream, or at the end of the group.
ncclResult_t dispatch(ncclComm_t comm, const plait::Task& task, const char* call, std::function<Status()> op) {
  if (plait::group::active()) {
    plait::group::deferSetup(comm, [comm, op] {
      CommUse use(comm);
      return use.usable() ? op() : plait::invalidUsage("comm is being destroyed or aborted");
    });
    return ncclSuccess;
  }
  if (task.stream != nullptr) {
    comm->inflight.fetch_add(1, std::memory_order_seq_cst);
    task.stream->enqueue([comm, op] {
      Status s = comm->closing.load() ? plait::invalidUsage("comm was destroyed before queued work ran") : op();
      comm->inflight.fetch_sub(1, std::memory_order_release);
      return s;
    });
    return ncclSuccess;
  }
  CommUse use(comm);
  if (!use.usable()) return fail(plait::invalidUsage("comm is being destroyed or aborted"), call);
  return fail(op(), call);
}

ncclResult_t refuse(const Status& s, const char* call) {
  if (plait::group::active()) plait::group::recordError(s);
  return fail(s, call);
}

}  // namespace

namespace {

// What a put and a get both check: a local buffer, a window, a range of it.
// Windows are registered alike on every rank: this rank's size of the
// window bounds the transfer (the peer checks its own again). Sets *bytes.
Status checkTransfer(ncclComm_t comm, const void* localbuff, size_t count, ncclDataType_t datatype,
                     ncclWindow_t peerWin, size_t peerWinOffset, cudaStream_t stream, plait::Task* task,
                     size_t* bytes) {
  PLAIT_RETURN_IF_ERROR(checkType(datatype));
  if (localbuff == nullptr) return plait::invalidArgument("localbuff is NULL");
  if (peerWin == nullptr) return plait::invalidArgument("peerWin is NULL");
  if (count > (SIZE_MAX >> 4) / plait::typeSize(datatype))
    return plait::invalidArgument("count " + std::to_string(count) + " overflows the addressable size");
  *bytes = count * plait::typeSize(datatype);
  PLAIT_RETURN_IF_ERROR(common(comm, {{localbuff, count, "localbuff"}}, stream, task));
  CommUse use(comm);  // the window table is the communicator's: abort on another thread must wait
  if (!use.usable()) return plait::invalidUsage("comm is being destroyed or aborted");
  PLAIT_ASSIGN_OR_RETURN(size_t room, comm->impl->windowBytesFrom(peerWin, peerWinOffset));
  if (*bytes > room)
    return plait::invalidArgument("count " + std::to_string(count) + " (" + std::to_string(*bytes) +
                                  " bytes) from peerWinOffset " + std::to_string(peerWinOffset) +
                                  " runs past the window's end (" + std::to_string(room) + " bytes left)");
  return Status::ok();
}

}  // namespace

PLAIT_API(ncclResult_t, PutSignal,
          (const void* localbuff, size_t count, ncclDataType_t datatype, int peer, ncclWindow_t peerWin,
           size_t peerWinOffset, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm, cudaStream_t stream)) {
  const char* call = "ncclPutSignal";
  plait::Task task;
  size_t bytes = 0;
  Status s = checkTarget(comm, peer, sigIdx, ctx, flags);
  if (s.isOk()) s = checkTransfer(comm, localbuff, count, datatype, peerWin, peerWinOffset, stream, &task, &bytes);
  if (!s.isOk()) return refuse(s, call);
  void* win = peerWin;
  return dispatch(comm, task, call, [=] {
    return comm->impl->putSignal(localbuff, bytes, peer, win, peerWinOffset, /*signal=*/true);
  });
} PLAIT_API_END

extern "C" __attribute__((visibility("default"))) ncclResult_t plaitGet(
    void* localbuff, size_t count, ncclDataType_t datatype, int peer, ncclWindow_t peerWin, size_t peerWinOffset,
    ncclComm_t comm, cudaStream_t stream) try {
  const char* call = "plaitGet";
  plait::Task task;
  size_t bytes = 0;
  Status s = checkComm(comm);
  if (s.isOk()) s = checkRoot(peer, comm->nranks, "peer");
  if (s.isOk()) s = checkTransfer(comm, localbuff, count, datatype, peerWin, peerWinOffset, stream, &task, &bytes);
  if (!s.isOk()) return refuse(s, call);
  void* win = peerWin;
  return dispatch(comm, task, call, [=] { return comm->impl->get(localbuff, bytes, peer, win, peerWinOffset); });
} PLAIT_API_END

PLAIT_API(ncclResult_t, Signal, (int peer, int sigIdx, int ctx, unsigned int flags, ncclComm_t comm,
                                 cudaStream_t stream)) {
  const char* call = "ncclSignal";
  plait::Task task;
  Status s = checkTarget(comm, peer, sigIdx, ctx, flags);
  if (s.isOk()) s = common(comm, {}, stream, &task);
  if (!s.isOk()) return refuse(s, call);
  return dispatch(comm, task, call, [=] { return comm->impl->putSignal(nullptr, 0, peer, nullptr, 0, true); });
} PLAIT_API_END

namespace {

// Checks NCCL 2.32's descriptor rules; fills `waits`.
Status parseDescs(ncclComm_t comm, int nDesc, const ncclWaitSignalDesc_t* signalDescs,
                  std::vector<plait::rma::SignalWait>* waits) {
  PLAIT_RETURN_IF_ERROR(checkComm(comm));
  if (nDesc <= 0) return plait::invalidArgument("nDesc is " + std::to_string(nDesc) + ": must be > 0");
  if (signalDescs == nullptr) return plait::invalidArgument("signalDescs is NULL");
  for (int i = 0; i < nDesc; ++i) {
    const ncclWaitSignalDesc_t& d = signalDescs[i];
    const std::string where = "signalDescs[" + std::to_string(i) + "].";
    if (d.opCnt <= 0) return plait::invalidArgument(where + "opCnt is " + std::to_string(d.opCnt) + ": must be > 0");
    if (d.peer < 0 || d.peer >= comm->nranks)
      return plait::invalidArgument(where + "peer is " + std::to_string(d.peer) + ", not a rank of the " +
                                    std::to_string(comm->nranks) + "-rank communicator");
    PLAIT_RETURN_IF_ERROR(checkSlot(d.sigIdx, d.ctx, where.c_str()));
    waits->push_back({d.peer, static_cast<uint64_t>(d.opCnt)});
  }
  return Status::ok();
}

}  // namespace

PLAIT_API(ncclResult_t, WaitSignal, (int nDesc, ncclWaitSignalDesc_t* signalDescs, ncclComm_t comm,
                                     cudaStream_t stream)) {
  const char* call = "ncclWaitSignal";
  plait::Task task;
  std::vector<plait::rma::SignalWait> waits;
  Status s = parseDescs(comm, nDesc, signalDescs, &waits);
  if (s.isOk()) s = common(comm, {}, stream, &task);
  if (!s.isOk()) return refuse(s, call);
  return dispatch(comm, task, call, [=] { return comm->impl->waitSignals(waits); });
} PLAIT_API_END

extern "C" __attribute__((visibility("default"))) ncclResult_t plaitWaitAnySignal(
    int nDesc, const ncclWaitSignalDesc_t* signalDescs, int* which, ncclComm_t comm) try {
  const char* call = "plaitWaitAnySignal";
  if (which == nullptr) return fail(plait::invalidArgument("which is NULL"), call);
  *which = -1;
  std::vector<plait::rma::SignalWait> waits;
  Status s = parseDescs(comm, nDesc, signalDescs, &waits);
  if (s.isOk()) s = checkQuiet(comm);
  if (!s.isOk()) return fail(s, call);
  CommUse use(comm);
  if (!use.usable()) return fail(plait::invalidUsage("comm is being destroyed or aborted"), call);
  auto got = comm->impl->waitAnySignal(waits);
  if (!got.isOk()) return fail(got.status(), call);
  *which = *got;
  return ncclSuccess;
} PLAIT_API_END

extern "C" __attribute__((visibility("default"))) ncclResult_t plaitTestSignal(
    int nDesc, const ncclWaitSignalDesc_t* signalDescs, int* done, ncclComm_t comm) try {
  const char* call = "plaitTestSignal";
  if (done == nullptr) return fail(plait::invalidArgument("done is NULL"), call);
  *done = 0;
  std::vector<plait::rma::SignalWait> waits;
  Status s = parseDescs(comm, nDesc, signalDescs, &waits);
  if (s.isOk()) s = checkQuiet(comm);
  if (!s.isOk()) return fail(s, call);
  CommUse use(comm);
  if (!use.usable()) return fail(plait::invalidUsage("comm is being destroyed or aborted"), call);
  auto got = comm->impl->testSignals(waits);
  if (!got.isOk()) return fail(got.status(), call);
  *done = *got ? 1 : 0;
  return ncclSuccess;
} PLAIT_API_END
