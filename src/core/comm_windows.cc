// comm_windows.cc — the communicator's part of the device API: window
// registration (local, or collective over the LSA team with
// NCCL_WIN_COLL_SYMMETRIC: core/symmetric.h) and device communicators.
#include <algorithm>
#include <string>

#include "algorithms/device/symmetric_work.h"
#include "base/config.h"
#include "base/cuda_probe.h"
#include "base/log.h"
#include "core/comm.h"

namespace plait {
namespace {

PLAIT_PARAM_INT(kWinEnable, "WIN_ENABLE", 1,
                "1: NCCL_WIN_COLL_SYMMETRIC windows are mapped for the LSA team's kernels (the device API); 0: "
                "windows are local registrations only");
PLAIT_PARAM_INT(kSymmetricEnable, "SYMMETRIC_ENABLE", 1,
                "1: AllReduce, AllGather and ReduceScatter on device buffers in symmetric windows run the "
                "symmetric kernels (loads and stores into the LSA peers' memory); 0: the FIFO rings");
PLAIT_PARAM_INT(kSymmetricMaxBytes, "SYMMETRIC_MAX_BYTES", 0,
                "the largest collective (bytes of the whole buffer) the symmetric kernels take; 0: no limit");
PLAIT_PARAM_INT(kSymmetricBlockBytes, "SYMMETRIC_BLOCK_BYTES", 512 << 10,
                "bytes per thread block of a symmetric kernel (1 to 32 blocks)");

}  // namespace

std::string Communicator::deviceApiRefusal() const {
  if (kWinEnable.get() == 0) return "NCCL_WIN_ENABLE=0";
  const int lsaRank = rank_ % lsaSize_;
  for (int q = rank_ - lsaRank; q < rank_ - lsaRank + lsaSize_; ++q) {
    if (q == rank_) continue;
    const std::string path = device_->peerPath(q);
    if (path.rfind("P2P", 0) != 0)
      return "ranks " + std::to_string(rank_) + " and " + std::to_string(q) +
             " (one LSA team) do not reach each other by CUDA P2P (" + path + ")";
  }
  if (Status s = device_->symmetric()->probe(); !s.isOk()) return s.message();
  return std::string();
}

Status Communicator::ensureSymmetric() {
  if (symmetric_) return Status::ok();
  SymmetricSetup setup;
  setup.rank = rank_;
  setup.nranks = nranks_;
  setup.lsaSize = lsaSize_;
  setup.pids = pids_;
  setup.bootstrap = bootstrap_.get();
  setup.memory = device_->symmetric();
  setup.abortFlag = &abortFlag_;
  setup.timeoutMs = timeoutMs_;
  setup.refusal = deviceApiRefusal();
  PLAIT_ASSIGN_OR_RETURN(symmetric_, SymmetricSpace::create(setup));
  if (!symmetric_->refusal().empty())
    PLAIT_INFO(kInit, "rank %d: symmetric windows are local registrations only: %s", rank_,
               symmetric_->refusal().c_str());
  return Status::ok();
}

std::optional<SymmetricPlan> Communicator::symmetricPlan(const Task& task) const {
  if (!symmetric_ || !symmetric_->signalOffset() || lsaSize_ != nranks_ || nranks_ > kMaxSymmetricRanks ||
      kSymmetricEnable.get() == 0)
    return std::nullopt;
  const bool reduces = task.coll == CollType::kAllReduce || task.coll == CollType::kReduceScatter;
  if (!reduces && task.coll != CollType::kAllGather) return std::nullopt;
  // A rank applies its own PreMulSum scalar to every rank's data: right for
  // ncclAvg (1/n everywhere), not for a user's ncclRedOpCreatePreMulSum.
  if (reduces && task.op.kind == RedOpKind::kPreMulSum && task.ncclOp != ncclAvg) return std::nullopt;
  const size_t bytes = task.count * typeSize(task.type);
  const size_t whole = task.coll == CollType::kAllReduce ? bytes : bytes * static_cast<size_t>(nranks_);
  if (kSymmetricMaxBytes.get() > 0 && whole > static_cast<size_t>(kSymmetricMaxBytes.get())) return std::nullopt;
  const size_t sendBytes = task.coll == CollType::kReduceScatter ? whole : bytes;
  const size_t recvBytes = task.coll == CollType::kAllGather ? whole : bytes;
  const std::optional<size_t> send = symmetric_->flatOffset(task.sendbuff, sendBytes);
  const std::optional<size_t> recv = symmetric_->flatOffset(task.recvbuff, recvBytes);
  if (!send || !recv) return std::nullopt;
  SymmetricPlan plan;
  plan.flat = symmetric_->flat();
  plan.stride = symmetric_->stride();
  plan.lsaSize = lsaSize_;
  plan.lsaRank = symmetric_->lsaRank();
  plan.sendOffset = *send;
  plan.recvOffset = *recv;
  plan.signalOffset = *symmetric_->signalOffset();
  const size_t perBlock = static_cast<size_t>(std::max<int64_t>(1, kSymmetricBlockBytes.get()));
  plan.nBlocks = static_cast<int>(std::clamp<size_t>((whole + perBlock - 1) / perBlock, 1, kDeviceChannelLimit));
  return plan;
}

Status Communicator::registerWindow(void* buff, size_t bytes, int flags, void** win) {
  if (!direct_) return invalidUsage("the communicator is not initialised");
  if ((flags & NCCL_WIN_COLL_SYMMETRIC) != 0 && suspended())
    return invalidUsage("a symmetric window on a suspended communicator (ncclCommSuspend): ncclCommResume first");
  auto localOnly = [&]() -> Status {
    PLAIT_RETURN_IF_ERROR(direct_->registerBuffer(buff, bytes, RegistrationKind::kWindow, win));
    noteWindow(*win, buff, bytes);
    return Status::ok();
  };
  if ((flags & NCCL_WIN_COLL_SYMMETRIC) == 0 || !device_) return localOnly();
  if (aborted()) return invalidUsage("the communicator was aborted");
  log::ScopedLogRank logRank(rank_);
  PLAIT_RETURN_IF_ERROR(ensureSymmetric());
  if (!symmetric_->refusal().empty()) return localOnly();
  // The symmetric collectives' barrier words, before the first window (every
  // rank gets here alike: the refusal is agreed).
  if (lsaSize_ == nranks_ && nranks_ > 1) PLAIT_RETURN_IF_ERROR(symmetric_->createSignals());
  // The collective step first (a local failure before it would leave the
  // other ranks waiting), then the local registration the window also is.
  PLAIT_ASSIGN_OR_RETURN(void* window, symmetric_->registerWindow(buff, bytes, nullptr));
  void* local = nullptr;
  if (Status s = direct_->registerBuffer(buff, bytes, RegistrationKind::kWindow, &local); !s.isOk()) {
    (void)symmetric_->deregisterWindow(window, &local);
    return s;
  }
  symmetric_->attachLocalHandle(window, local);
  *win = window;
  noteWindow(window, buff, bytes);
  return Status::ok();
}

void Communicator::noteWindow(void* win, void* buff, size_t bytes) {
  std::lock_guard<std::mutex> lock(windowsMu_);
  WindowNote note;
  note.serial = ++windowSerial_;
  note.base = static_cast<char*>(buff);
  note.bytes = bytes;
  note.host = cuda::deviceOf(buff) < 0;
  if (note.host) rmaWindows_.add(note.serial, note.base, bytes);
  windowNotes_[win] = note;
}

void Communicator::forgetWindow(void* win) {
  std::lock_guard<std::mutex> lock(windowsMu_);
  auto it = windowNotes_.find(win);
  if (it == windowNotes_.end()) return;
  if (it->second.host) rmaWindows_.remove(it->second.serial);
  windowNotes_.erase(it);
}

Status Communicator::deregisterWindow(void* win) {
  if (!direct_) return invalidUsage("the communicator is not initialised");
  forgetWindow(win);  // first: the one-sided agent stops writing into it
  if (!symmetric_ || !symmetric_->isWindow(win)) return direct_->deregisterBuffer(win, RegistrationKind::kWindow);
  void* local = nullptr;
  PLAIT_RETURN_IF_ERROR(symmetric_->deregisterWindow(win, &local));
  return local != nullptr ? direct_->deregisterBuffer(local, RegistrationKind::kWindow) : Status::ok();
}

Result<void*> Communicator::windowBuffer(void* win) const {
  if (!direct_) return invalidUsage("the communicator is not initialised");
  if (symmetric_ && symmetric_->isWindow(win)) return symmetric_->windowBuffer(win);
  PLAIT_ASSIGN_OR_RETURN(Registration r, direct_->registration(win, RegistrationKind::kWindow));
  return reinterpret_cast<void*>(r.begin);
}

Status Communicator::createDevComm(const ncclDevCommRequirements& reqs, ncclDevComm* out) {
  if (suspended()) return invalidUsage("the communicator is suspended (ncclCommSuspend): ncclCommResume first");
  if (!device_)
    return invalidUsage("this communicator cannot use the device API: it has no CUDA device (" +
                        deviceUnavailable_.message() + ")");
  if (aborted()) return invalidUsage("the communicator was aborted");
  log::ScopedLogRank logRank(rank_);
  PLAIT_RETURN_IF_ERROR(ensureSymmetric());
  if (!symmetric_->refusal().empty())
    return invalidUsage("this communicator cannot use the device API: " + symmetric_->refusal());
  return symmetric_->createDevComm(reqs, out);
}

Status Communicator::destroyDevComm(const ncclDevComm& devComm) {
  if (!symmetric_)
    return invalidArgument("devComm was not created by ncclDevCommCreate on this communicator (or was destroyed)");
  return symmetric_->destroyDevComm(devComm);
}

}  // namespace plait
