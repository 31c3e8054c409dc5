// rma_local.cc — the service's local side (rma_service.h): puts to peers on
// this host through their pages (rma_page.h), and every wait for signals
// (counted in this rank's page, by local writers and by the agent alike).
#include <algorithm>
#include <cstring>

#include "base/cma.h"
#include "base/config.h"
#include "base/log.h"
#include "base/tsan.h"
#include "base/wait.h"
#include "rma/rma_service.h"

namespace plait::rma {
namespace {

PLAIT_PARAM_INT(kRmaShm, "RMA_SHM", 1,
                "1: one-sided puts to peers on this host write their windows directly (a copy between threads, "
                "process_vm_writev between processes) and count the signal in their shared page; 0: every put "
                "goes through the network connections");

struct PageInfo {
  int32_t pid = 0;
  int32_t fd = -1;
  uint64_t address = 0;
};

}  // namespace

Status Service::connectLocal(const ServiceSetup& setup, Deadline deadline) {
  std::vector<PageInfo> all(nranks_);
  all[rank_].pid = static_cast<int32_t>(::getpid());
  all[rank_].fd = page_.fd();
  all[rank_].address = page_.address();
  PLAIT_RETURN_IF_ERROR(setup.oob->allGather(all.data(), sizeof(PageInfo), deadline));
  const bool sameHosts = setup.hostOf.size() == static_cast<size_t>(nranks_);
  for (int q = 0; q < nranks_; ++q) {
    pids_[q] = all[q].pid;
    if (q == rank_ || kRmaShm.get() == 0 || !sameHosts || setup.hostOf[q] != setup.hostOf[rank_]) continue;
    Result<Page> mapped = Page::map(all[q].pid, all[q].fd, nranks_);
    if (!mapped.isOk()) {
      PLAIT_INFO(kNet, "rank %d: puts to %s go through the network: %s", rank_, peerNames_[q].c_str(),
                 mapped.status().message().c_str());
      continue;
    }
    peerPages_[q] = std::move(*mapped);
    peerPageHome_[q] = all[q].address;
    if (all[q].pid != all[rank_].pid) {
      // Another process: its windows are written with process_vm_writev,
      // which needs ptrace permission over it. Try it on the probe word.
      const uint64_t probe = all[q].address + (reinterpret_cast<uint64_t>(&peerPages_[q].signal(rank_).probe) -
                                               peerPages_[q].address());
      const uint32_t word = 1;
      if (const int err = cmaWrite(all[q].pid, probe, &word, sizeof word); err != 0) {
        PLAIT_INFO(kNet, "rank %d: puts to %s go through the network: process_vm_writev: %s", rank_,
                   peerNames_[q].c_str(), std::strerror(err));
        peerPages_[q] = Page();
        continue;
      }
    }
    local_[q] = 1;
  }
  return Status::ok();
}

void Service::releaseToOwner(int peer, const void* inPeerPage) const {
#ifdef PLAIT_TSAN
  if (pids_[peer] != static_cast<int>(::getpid())) return;  // another process: TSan sees none of it
  const uint64_t offset = reinterpret_cast<uint64_t>(inPeerPage) - peerPages_[peer].address();
  tsanRelease(reinterpret_cast<const void*>(peerPageHome_[peer] + offset));
#else
  (void)peer;
  (void)inPeerPage;
#endif
}

Status Service::putLocal(int peer, uint64_t window, uint64_t offset, const void* src, uint64_t bytes, bool signal) {
  Page& pg = peerPages_[peer];
  // A put the peer cannot take is reported in its page too: its wait for
  // this rank's signals then fails saying why, as it would over the network.
  auto refuse = [&](uint64_t size, const std::string& why) {
    SignalSlot& mine = pg.signal(rank_);
    mine.window = window;
    mine.offset = offset;
    mine.bytes = bytes;
    mine.size = size;
    releaseToOwner(peer, &mine.failed);
    mine.failed.store(1, std::memory_order_release);
    pg.wakeWaiters();
    return invalidUsage("a put into " + peerNames_[peer] + "'s window: " + why);
  };
  if (bytes > 0 || window != 0) {
    const int i = pg.find(window);
    if (i < 0) return refuse(0, missingWindow(window));
    WindowSlot& w = pg.window(i);
    w.writers.fetch_add(1, std::memory_order_seq_cst);
    if (w.serial.load(std::memory_order_seq_cst) != window) {  // deregistered meanwhile
      w.writers.fetch_sub(1, std::memory_order_release);
      return refuse(0, missingWindow(window));
    }
    const uint64_t size = w.bytes.load(std::memory_order_acquire);
    const uint64_t base = w.base.load(std::memory_order_acquire);
    if (std::string why = rangeError(window, offset, bytes, size); !why.empty()) {
      w.writers.fetch_sub(1, std::memory_order_release);
      return refuse(size, why);
    }
    int err = 0;
    if (pids_[peer] == static_cast<int>(::getpid()))
      std::memcpy(reinterpret_cast<char*>(base + offset), src, bytes);
    else
      err = cmaWrite(pids_[peer], base + offset, src, bytes);
    releaseToOwner(peer, &w.writers);
    w.writers.fetch_sub(1, std::memory_order_release);
    if (err != 0)
      return remoteError("writing into " + peerNames_[peer] + "'s window: " + cmaErrorText(pids_[peer], err, true));
  }
  if (signal) {
    releaseToOwner(peer, &pg.signal(rank_).count);
    pg.raise(rank_);
  }
  return Status::ok();
}

bool Service::anyRemote(const std::vector<SignalWait>& waits) const {
  return std::any_of(waits.begin(), waits.end(), [&](const SignalWait& w) { return w.peer != rank_ && !local_[w.peer]; });
}

Status Service::aborted() const {
  if (aborted_.load(std::memory_order_acquire) ||
      (abortFlag_ != nullptr && abortFlag_->load(std::memory_order_acquire) != 0))
    return remoteError("aborted during ncclWaitSignal");
  return Status::ok();
}

std::string Service::starved(const SignalWait& w, uint64_t target) const {
  const uint64_t got = received(w.peer);
  if (got >= target) return std::string();
  std::string why;
  const SignalSlot& slot = page_.signal(w.peer);
  if (slot.failed.load(std::memory_order_acquire) != 0) {
    why = "its put of " + std::to_string(slot.bytes) + " bytes could not land: " +
          (slot.size == 0 ? missingWindow(slot.window) : rangeError(slot.window, slot.offset, slot.bytes, slot.size));
  } else {
    std::lock_guard<std::mutex> lock(waitMu_);
    why = failures_[w.peer];
  }
  if (why.empty()) return why;
  return "waiting for " + std::to_string(target - consumed_[w.peer]) + " signal(s) from " + peerNames_[w.peer] +
         ", " + std::to_string(got - consumed_[w.peer]) + " came, then " + why;
}

Status Service::waitFor(const char* what, Deadline deadline, const std::function<bool()>& ready,
                        const std::function<Status()>& blocked, const std::vector<SignalWait>& waits) {
  if (anyRemote(waits)) touch();
  WaitContext ctx;
  ctx.deadline = deadline;
  ctx.abortFlag = abortFlag_;
  ctx.what = what;
  // Checked about every 100 ms while the wait sleeps: this service's own
  // abort, and peers that can no longer signal.
  ScopedWaitCheck check(WaitCheck{
      [](const void* arg) { return (*static_cast<const std::function<Status()>*>(arg))(); }, &blocked});
  Status s = waitUntil([&] { return ready(); }, &page_.head().futex, &page_.head().sleepers, ctx);
  if (s.isOk()) return s;
  if (Status why = blocked(); !why.isOk()) return why;  // more precise than "aborted"
  if (!deadline.expired()) return s;
  if (waits.empty()) return remoteError(std::string("timed out in ") + what);
  std::string have;
  for (const SignalWait& w : waits)
    have += (have.empty() ? "" : "; ") + peerNames_[w.peer] + ": " + std::to_string(received(w.peer) - consumed_[w.peer]) +
            " of " + std::to_string(w.count);
  return remoteError(std::string("timed out in ") + what + " (signals received so far: " + have + ")");
}

Status Service::waitAll(const std::vector<SignalWait>& waits, Deadline deadline) {
  // Waits on one peer add up; targets are absolute counts.
  std::vector<uint64_t> targets(waits.size());
  {
    std::lock_guard<std::mutex> lock(waitMu_);
    std::vector<uint64_t> sum(nranks_, 0);
    for (size_t i = 0; i < waits.size(); ++i) {
      sum[waits[i].peer] += waits[i].count;
      targets[i] = consumed_[waits[i].peer] + sum[waits[i].peer];
    }
  }
  auto ready = [&] {
    for (size_t i = 0; i < waits.size(); ++i)
      if (received(waits[i].peer) < targets[i]) return false;
    return true;
  };
  std::function<Status()> blocked = [&]() -> Status {  // any starved peer ends the wait
    PLAIT_RETURN_IF_ERROR(aborted());
    for (size_t i = 0; i < waits.size(); ++i)
      if (std::string why = starved(waits[i], targets[i]); !why.empty()) return remoteError(why);
    return Status::ok();
  };
  PLAIT_RETURN_IF_ERROR(waitFor("ncclWaitSignal", deadline, ready, blocked, waits));
  std::lock_guard<std::mutex> lock(waitMu_);
  for (size_t i = 0; i < waits.size(); ++i) consumed_[waits[i].peer] = std::max(consumed_[waits[i].peer], targets[i]);
  return Status::ok();
}

Result<bool> Service::test(const std::vector<SignalWait>& waits) {
  PLAIT_RETURN_IF_ERROR(aborted());
  if (anyRemote(waits)) touch();  // a poll loop keeps the agent landing promptly
  std::vector<uint64_t> targets(waits.size()), sum(nranks_, 0);
  {
    std::lock_guard<std::mutex> lock(waitMu_);
    bool ready = true;
    for (size_t i = 0; i < waits.size(); ++i) {
      sum[waits[i].peer] += waits[i].count;
      targets[i] = consumed_[waits[i].peer] + sum[waits[i].peer];
      ready = ready && received(waits[i].peer) >= targets[i];
    }
    if (ready) {
      for (size_t i = 0; i < waits.size(); ++i)
        consumed_[waits[i].peer] = std::max(consumed_[waits[i].peer], targets[i]);
      return true;
    }
  }
  for (size_t i = 0; i < waits.size(); ++i)  // starved() takes waitMu_ itself
    if (std::string why = starved(waits[i], targets[i]); !why.empty()) return remoteError(why);
  return false;
}

Result<int> Service::waitAny(const std::vector<SignalWait>& waits, Deadline deadline) {
  std::vector<uint64_t> targets(waits.size());
  {
    std::lock_guard<std::mutex> lock(waitMu_);
    for (size_t i = 0; i < waits.size(); ++i) targets[i] = consumed_[waits[i].peer] + waits[i].count;
  }
  int which = -1;
  auto ready = [&] {
    for (size_t i = 0; i < waits.size(); ++i)
      if (received(waits[i].peer) >= targets[i]) {
        which = static_cast<int>(i);
        return true;
      }
    return false;
  };
  std::function<Status()> blocked = [&]() -> Status {  // only when every peer is starved
    PLAIT_RETURN_IF_ERROR(aborted());
    std::string why;
    for (size_t i = 0; i < waits.size(); ++i) {
      std::string one = starved(waits[i], targets[i]);
      if (one.empty()) return Status::ok();
      why += (why.empty() ? "" : "; ") + one;
    }
    return remoteError("a wait for any of " + std::to_string(waits.size()) + " signal(s): " + why);
  };
  PLAIT_RETURN_IF_ERROR(waitFor("a wait for any signal", deadline, ready, blocked, waits));
  std::lock_guard<std::mutex> lock(waitMu_);
  consumed_[waits[which].peer] += waits[which].count;
  return which;
}

}  // namespace plait::rma
