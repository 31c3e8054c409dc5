// comm_suspend.cc — ncclCommSuspend, ncclCommResume and ncclCommMemStats.
//
// What a suspended communicator gives back is the device path's connections:
// the executor (its FIFO tables and P2P blocks in GPU memory), the ring and
// point-to-point FIFOs its kernels use, and the network connectors whose
// steps may sit in GPU memory (GPUDirect RDMA). They are made again at
// resume, by the same collective steps as at init; kernels take their
// addresses at each launch, so nothing else refers to them — except a CUDA
// graph that captured a kernel, which is why a communicator whose kernels
// were captured refuses to suspend (NCCL keeps the addresses and remaps the
// memory; Plait cannot yet). The bootstrap, the host transports,
// registrations and the device API's windows stay.
#include <cstring>
#include <string>
#include <vector>

#include "base/log.h"
#include "core/comm.h"

namespace plait {

uint64_t Communicator::deviceConnectionBytes() const {
  uint64_t n = 0;
  if (device_) n += device_->gpuBytes();
  if (deviceNet_) n += deviceNet_->gpuBytes();
  return n;
}

Communicator::MemStats Communicator::memStats() const {
  MemStats m;
  m.suspended = suspended();
  m.suspendable = m.suspended ? suspendedBytes_ : deviceConnectionBytes();
  m.persistent = symmetric_ ? symmetric_->deviceBytes() : 0;
  return m;
}

Status Communicator::agreeOnSuspend(const char* call, const Status& mine, int flags, Deadline deadline) {
  struct Answer {
    int32_t ok;
    int32_t flags;
    char why[224];
  };
  std::vector<Answer> answers(nranks_);
  std::memset(static_cast<void*>(answers.data()), 0, answers.size() * sizeof(Answer));
  answers[rank_].ok = mine.isOk() ? 1 : 0;
  answers[rank_].flags = flags;
  std::snprintf(answers[rank_].why, sizeof(answers[rank_].why), "%s", mine.message().c_str());
  Status gathered = bootstrap_->allGather(answers.data(), sizeof(Answer), deadline);
  if (!gathered.isOk()) return gathered.withContext(std::string(call) + ": agreeing with the other ranks");
  for (int r = 0; r < nranks_; ++r) {
    answers[r].why[sizeof(answers[r].why) - 1] = '\0';
    if (!answers[r].ok)
      return Status(r == rank_ ? mine.code() : Code::kInvalidUsage,
                    std::string(call) + " refused by rank " + std::to_string(r) + ": " + answers[r].why);
    if (answers[r].flags != flags)
      return invalidUsage(std::string(call) + ": rank " + std::to_string(r) + " passed flags " +
                          std::to_string(answers[r].flags) + " and rank " + std::to_string(rank_) + " " +
                          std::to_string(flags) + " (every rank must pass the same)");
  }
  return Status::ok();
}

Status Communicator::suspend(int flags) {
  constexpr const char* call = "ncclCommSuspend";
  if (flags & ~kSuspendMem)
    return invalidArgument("flags is " + std::to_string(flags) + ": the only flag is NCCL_SUSPEND_MEM (" +
                           std::to_string(kSuspendMem) + ")");
  if (aborted()) return invalidUsage("the communicator was aborted");
  if (broken_.load(std::memory_order_acquire)) return asyncError();
  if ((flags & kSuspendMem) == 0) {  // as NCCL: nothing to suspend but memory
    PLAIT_INFO(kInit, "rank %d: ncclCommSuspend without NCCL_SUSPEND_MEM: nothing to do", rank_);
    return Status::ok();
  }
  if (suspended()) return invalidUsage("the communicator is already suspended (ncclCommResume first)");
  log::ScopedLogRank logRank(rank_);
  const Deadline deadline = Deadline::afterMs(timeoutMs_);
  // This rank's refusals first, then every rank's answer: all suspend or none.
  Status mine;
  if (device_ && device_->captured())
    mine = invalidUsage("kernels of this communicator were captured into a CUDA graph, which keeps the addresses of "
                        "the memory suspending would free; such a communicator cannot suspend its memory");
  else if (device_ && !device_->drain(deadline))
    mine = Status(Code::kSystemError, "its device collectives did not finish within PLAIT_TIMEOUT (" +
                                          std::to_string(timeoutMs_) + " ms)");
  PLAIT_RETURN_IF_ERROR(agreeOnSuspend(call, mine, flags, deadline));
  // Every rank's kernels have ended: no peer reads our FIFOs any more.
  suspendedBytes_ = deviceConnectionBytes();
  {
    std::lock_guard<std::mutex> lock(partsMu_);  // abort() from another thread walks these parts
    device_.reset();     // unregisters the FIFOs from CUDA, frees its P2P block (peers hold theirs until they let go)
    deviceShm_.reset();
    deviceNet_.reset();  // after deviceShm_, which hands out its connectors
  }
  suspended_.store(true, std::memory_order_release);
  PLAIT_INFO(kInit, "rank %d: suspended; released %llu bytes of GPU memory", rank_,
             static_cast<unsigned long long>(suspendedBytes_));
  return Status::ok();
}

Status Communicator::resume() {
  constexpr const char* call = "ncclCommResume";
  if (aborted()) return invalidUsage("the communicator was aborted");
  if (broken_.load(std::memory_order_acquire)) return asyncError();
  if (!suspended()) return invalidUsage("the communicator is not suspended (ncclCommSuspend with NCCL_SUSPEND_MEM first)");
  log::ScopedLogRank logRank(rank_);
  const Deadline deadline = Deadline::afterMs(timeoutMs_);
  PLAIT_RETURN_IF_ERROR(agreeOnSuspend(call, Status::ok(), 0, deadline));
  BootstrapOob oob(*bootstrap_);
  // The same steps as at init: every rank agrees again on who can run
  // device collectives and connects the FIFOs. As during init, an abort
  // meanwhile only raises the flag (which these waits watch); the parts are
  // aborted once they are assigned.
  {
    std::lock_guard<std::mutex> lock(partsMu_);
    initRunning_ = true;
  }
  Status s = connectDevice(oob, deviceHostOptions_, hostOf_, deadline);
  {
    std::lock_guard<std::mutex> lock(partsMu_);
    initRunning_ = false;
  }
  if (aborted()) abortParts();
  if (!s.isOk()) {
    s.withContext(std::string(call) + " on rank " + std::to_string(rank_));
    breakWith(s);  // the ranks may have stopped at different steps
    return s;
  }
  suspended_.store(false, std::memory_order_release);
  PLAIT_INFO(kInit, "rank %d: resumed; %llu bytes of GPU memory for the device path", rank_,
             static_cast<unsigned long long>(deviceConnectionBytes()));
  return Status::ok();
}

}  // namespace plait
