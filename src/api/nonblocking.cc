// nonblocking.cc — a non-blocking communicator's background work: calls that
// would block run on a host stream of the communicator's own, in the order
// they were made, and return ncclInProgress at once (as NCCL's non-blocking
// communicators do); the caller polls ncclCommGetAsyncError.
#include "api/api_util.h"

namespace plait::api {

ncclResult_t runInBackground(ncclComm_t comm, std::function<Status()> work,
                             std::function<void(const Status&)> skipped) {
  HostStream* stream;
  {
    std::lock_guard<std::mutex> lock(comm->backgroundMu);
    if (!comm->background) comm->background = std::make_unique<HostStream>();
    stream = comm->background.get();
  }
  comm->inflight.fetch_add(1, std::memory_order_seq_cst);  // as CommUse, until the work ran
  stream->enqueue([comm, work = std::move(work), skipped = std::move(skipped)] {
    Status s;
    if (comm->closing.load(std::memory_order_seq_cst) != 0) {
      s = invalidUsage("comm was destroyed or aborted before its queued call ran");
      if (skipped) skipped(s);
    } else {
      s = work();
    }
    comm->inflight.fetch_sub(1, std::memory_order_release);
    return s;
  });
  return ncclInProgress;
}

bool backgroundPending(ncclComm_t comm, Status* firstError) {
  std::lock_guard<std::mutex> lock(comm->backgroundMu);
  if (!comm->background) return false;
  if (!comm->background->idle()) return true;
  *firstError = comm->background->synchronize(0);  // idle: returns at once, with the first error since
  return false;
}

Status checkQuiet(ncclComm_t comm) {
  if (comm->blocking) return Status::ok();
  std::lock_guard<std::mutex> lock(comm->backgroundMu);
  if (!comm->background || comm->background->idle()) return Status::ok();
  return invalidArgument("an earlier non-blocking call on comm is still in progress: wait until "
                         "ncclCommGetAsyncError stops reporting ncclInProgress");
}

Status waitForStreams(ncclComm_t comm) {
  if (comm->onStreams.load(std::memory_order_acquire) == 0) [[likely]]
    return Status::ok();
  const int64_t timeoutMs = operationTimeoutMs();
  const Deadline deadline = Deadline::afterMs(timeoutMs);
  long napUs = 20;
  while (comm->onStreams.load(std::memory_order_acquire) != 0) {
    if (comm->closing.load(std::memory_order_acquire) != 0)
      return invalidUsage("comm was destroyed or aborted while this call waited for its operations on host streams");
    if (deadline.expired())
      return remoteError("timed out after " + std::to_string(timeoutMs) + " ms waiting for " +
                         std::to_string(comm->onStreams.load()) +
                         " operation(s) queued on host streams before this call (PLAIT_TIMEOUT)");
    timespec ts{0, napUs * 1000};
    nanosleep(&ts, nullptr);
    napUs = std::min(1000L, napUs * 2);
  }
  return Status::ok();
}

void stopBackground(ncclComm_t comm) {
  std::unique_ptr<HostStream> stream;
  {
    std::lock_guard<std::mutex> lock(comm->backgroundMu);
    stream = std::move(comm->background);
  }
  stream.reset();  // waits for queued work, which returns at once after an abort
}

}  // namespace plait::api
