// comm_rma.cc — the communicator's one-sided operations (ncclPutSignal,
// ncclSignal, ncclWaitSignal; plaitGet, plaitWaitAnySignal,
// plaitTestSignal) over its agent (rma/rma_service.h).
#include <string>

#include "base/log.h"
#include "core/comm.h"

namespace plait {

Status Communicator::ensureRma() {
  std::lock_guard<std::mutex> setup(rmaMu_);
  if (rma_) return Status::ok();
  if (!bootstrap_) return invalidUsage("the communicator is not initialised");
  log::ScopedLogRank logRank(rank_);
  rma::ServiceSetup s;
  s.rank = rank_;
  s.nranks = nranks_;
  int localRank = 0;
  for (int r = 0; r < rank_; ++r)
    if (hostOf_.size() == static_cast<size_t>(nranks_) && hostOf_[r] == hostOf_[rank_]) ++localRank;
  s.localRank = localRank;
  BootstrapOob oob(*bootstrap_);
  s.oob = &oob;
  s.windows = &rmaWindows_;
  s.abortFlag = &abortFlag_;
  s.hostOf = hostOf_;
  for (int r = 0; r < nranks_; ++r) {
    const PeerInfo& p = bootstrap_->peer(r);
    s.peerNames.push_back("rank " + std::to_string(r) + " (host " + p.hostname + ", pid " + std::to_string(p.pid) +
                          ")");
  }
  PLAIT_ASSIGN_OR_RETURN(std::unique_ptr<rma::Service> service,
                         rma::Service::create(s, Deadline::afterMs(timeoutMs_)));
  std::lock_guard<std::mutex> parts(partsMu_);
  rma_ = std::move(service);
  if (aborted()) rma_->abort();
  return Status::ok();
}

Result<size_t> Communicator::windowBytesFrom(void* win, size_t offset) const {
  std::lock_guard<std::mutex> lock(windowsMu_);
  auto it = windowNotes_.find(win);
  if (it == windowNotes_.end())
    return invalidArgument("peerWin is not a window registered on this communicator (ncclCommWindowRegister)");
  if (!it->second.host)
    return invalidUsage("peerWin is a window of CUDA device memory: Plait's one-sided operations move host memory "
                        "only so far");
  if (offset > it->second.bytes)
    return invalidArgument("peerWinOffset " + std::to_string(offset) + " is past the end of the window (" +
                           std::to_string(it->second.bytes) + " bytes on this rank)");
  return it->second.bytes - offset;
}

Result<uint64_t> Communicator::windowSerial(void* win) const {
  std::lock_guard<std::mutex> lock(windowsMu_);
  auto it = windowNotes_.find(win);
  if (it == windowNotes_.end()) return invalidArgument("peerWin is not a window registered on this communicator");
  return it->second.serial;
}

Status Communicator::putSignal(const void* src, size_t bytes, int peer, void* win, size_t offset, bool signal) {
  if (aborted() || revoked()) return invalidUsage("the communicator was aborted or revoked");
  if (suspended()) return invalidUsage("the communicator is suspended (ncclCommSuspend): call ncclCommResume first");
  uint64_t serial = 0;
  if (win != nullptr) {
    PLAIT_ASSIGN_OR_RETURN(serial, windowSerial(win));
  }
  PLAIT_RETURN_IF_ERROR(ensureRma());
  log::ScopedLogRank logRank(rank_);
  return rma_->put(peer, serial, offset, src, bytes, signal, Deadline::afterMs(timeoutMs_));
}

Status Communicator::waitSignals(const std::vector<rma::SignalWait>& waits) {
  if (aborted() || revoked()) return invalidUsage("the communicator was aborted or revoked");
  if (suspended()) return invalidUsage("the communicator is suspended (ncclCommSuspend): call ncclCommResume first");
  PLAIT_RETURN_IF_ERROR(ensureRma());
  log::ScopedLogRank logRank(rank_);
  return rma_->waitAll(waits, Deadline::afterMs(timeoutMs_));
}

Result<int> Communicator::waitAnySignal(const std::vector<rma::SignalWait>& waits) {
  if (aborted() || revoked()) return invalidUsage("the communicator was aborted or revoked");
  PLAIT_RETURN_IF_ERROR(ensureRma());
  log::ScopedLogRank logRank(rank_);
  return rma_->waitAny(waits, Deadline::afterMs(timeoutMs_));
}

Result<bool> Communicator::testSignals(const std::vector<rma::SignalWait>& waits) {
  if (aborted() || revoked()) return invalidUsage("the communicator was aborted or revoked");
  PLAIT_RETURN_IF_ERROR(ensureRma());
  log::ScopedLogRank logRank(rank_);
  return rma_->test(waits);
}

Status Communicator::get(void* dst, size_t bytes, int peer, void* win, size_t offset) {
  if (aborted() || revoked()) return invalidUsage("the communicator was aborted or revoked");
  if (suspended()) return invalidUsage("the communicator is suspended (ncclCommSuspend): call ncclCommResume first");
  PLAIT_ASSIGN_OR_RETURN(uint64_t serial, windowSerial(win));
  PLAIT_RETURN_IF_ERROR(ensureRma());
  log::ScopedLogRank logRank(rank_);
  return rma_->get(peer, serial, offset, dst, bytes, Deadline::afterMs(timeoutMs_));
}

}  // namespace plait
