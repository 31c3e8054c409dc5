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

void stopBackground(ncclComm_t comm) {
  std::unique_ptr<HostStream> stream;
  {
    std::lock_guard<std::mutex> lock(comm->backgroundMu);
    stream = std::move(comm->background);
  }
  stream.reset();  // waits for queued work, which returns at once after an abort
}

}  // namespace plait::api
