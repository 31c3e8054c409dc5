#include "base/wait.h"

#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <ctime>
#include <string>

#include "algorithms/portability.h"
#include "base/config.h"
#include "base/log.h"

namespace plait {

PLAIT_PARAM_INT(kWaitSpin, "WAIT_SPIN", 1000,
                "pause-instruction polls before a waiting rank starts yielding (ignored when oversubscribed)");
PLAIT_PARAM_INT(kWaitYield, "WAIT_YIELD", 64, "sched_yield polls before a waiting rank sleeps on a futex");
PLAIT_PARAM_INT(kWaitSpinDedicatedUs, "WAIT_SPIN_DEDICATED_US", 2000,
                "microseconds a rank on a core of its own spins before it sleeps on a futex (no yielding)");

namespace {

constexpr int64_t kSliceNs = 1'000'000;           // longest single futex sleep
constexpr int64_t kPeerCheckNs = 100'000'000;     // peer liveness check period while sleeping
constexpr int kSpinCheckEvery = 64;               // spin polls between abort/deadline checks

// Sleeps until *word != expected, a FUTEX_WAKE, a signal or `ns` elapse.
void futexWait(std::atomic<uint32_t>* word, uint32_t expected, int64_t ns) {
  timespec ts{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

bool aborted(const WaitContext& ctx) {
  return ctx.abortFlag != nullptr && ctx.abortFlag->load(std::memory_order_relaxed) != 0;
}

std::string peerText(const WaitContext& ctx) {
  std::string s = ctx.peerRank >= 0 ? "rank " + std::to_string(ctx.peerRank) : std::string("peer");
  if (ctx.peerPid > 0) s += " (pid " + std::to_string(ctx.peerPid) + ")";
  return s;
}

const char* whatText(const WaitContext& ctx) { return ctx.what && *ctx.what ? ctx.what : "a wait"; }

Status abortedStatus(const WaitContext& ctx) {
  return remoteError(std::string("aborted during ") + whatText(ctx));
}

Status timeoutStatus(const WaitContext& ctx, uint64_t startNs) {
  uint64_t waitedMs = (nowNs() - startNs) / 1'000'000;
  std::string msg = "timed out after " + std::to_string(waitedMs) + " ms during " + whatText(ctx);
  if (ctx.peerRank >= 0 || ctx.peerPid > 0) msg += " (waiting for " + peerText(ctx) + ")";
  return remoteError(std::move(msg));
}

Status deadPeerStatus(const WaitContext& ctx) {
  return remoteError(peerText(ctx) + " died during " + whatText(ctx));
}

thread_local WaitCheck tlsWaitCheck;

// The checks made between polls; OK means keep waiting. `deadline` is the
// wait's own (waitSlow): the sooner of ctx.deadline and ctx.waitTimeoutMs.
Status checkStop(const WaitContext& ctx, Deadline deadline, uint64_t startNs) {
  if (aborted(ctx)) return abortedStatus(ctx);
  if (deadline.expired()) return timeoutStatus(ctx, startNs);
  return Status::ok();
}

// Phase 1: bounded spinning. True once ready.
bool spinPhase(bool (*ready)(void*), void* arg, const WaitContext& ctx, Deadline deadline, int64_t iterations,
               uint64_t startNs, Status* stop) {
  for (int64_t i = 1; i <= iterations; ++i) {
    cpuPause();
    if (ready(arg)) return true;
    if (i % kSpinCheckEvery == 0) {
      *stop = checkStop(ctx, deadline, startNs);
      if (!stop->isOk()) return false;
    }
  }
  return false;
}

// Phase 1 on a dedicated core: spin for up to `ns`. True once ready.
bool timedSpinPhase(bool (*ready)(void*), void* arg, const WaitContext& ctx, Deadline deadline, int64_t ns,
                    uint64_t startNs, Status* stop) {
  const uint64_t until = startNs + static_cast<uint64_t>(ns);
  for (int64_t i = 1;; ++i) {
    cpuPause();
    if (ready(arg)) return true;
    if (i % kSpinCheckEvery == 0) {
      *stop = checkStop(ctx, deadline, startNs);
      if (!stop->isOk() || nowNs() >= until) return false;
    }
  }
}

// Phase 2: bounded yielding. True once ready.
bool yieldPhase(bool (*ready)(void*), void* arg, const WaitContext& ctx, Deadline deadline, int64_t iterations,
                uint64_t startNs, Status* stop) {
  for (int64_t i = 0; i < iterations; ++i) {
    sched_yield();
    if (ready(arg)) return true;
    *stop = checkStop(ctx, deadline, startNs);
    if (!stop->isOk()) return false;
  }
  return false;
}

// Phase 3: futex sleeps of at most kSliceNs until ready or stopped.
Status sleepPhase(bool (*ready)(void*), void* arg, std::atomic<uint32_t>* futexWord,
                  std::atomic<uint32_t>* sleepers, const WaitContext& ctx, Deadline deadline, uint64_t startNs) {
  uint64_t nextPeerCheck = nowNs() + kPeerCheckNs;
  for (;;) {
    uint32_t seen = futexWord->load(std::memory_order_acquire);
    if (ready(arg)) return Status::ok();
    sleepers->fetch_add(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with the fence in wake()
    if (ready(arg)) {
      sleepers->fetch_sub(1, std::memory_order_relaxed);
      return Status::ok();
    }
    int64_t slice = kSliceNs;
    if (deadline.at() != Clock::time_point::max()) {
      int64_t left = std::chrono::duration_cast<std::chrono::nanoseconds>(deadline.at() - Clock::now()).count();
      if (left < slice) slice = left > 0 ? left : 0;
    }
    if (slice > 0) futexWait(futexWord, seen, slice);
    sleepers->fetch_sub(1, std::memory_order_relaxed);

    if (ready(arg)) return Status::ok();
    PLAIT_RETURN_IF_ERROR(checkStop(ctx, deadline, startNs));
    uint64_t now = nowNs();
    if (now >= nextPeerCheck) {
      nextPeerCheck = now + kPeerCheckNs;
      if (ctx.peerPid > 0 && !processAlive(ctx.peerPid)) return ready(arg) ? Status::ok() : deadPeerStatus(ctx);
      if (tlsWaitCheck.check != nullptr) {
        Status s = tlsWaitCheck.check(tlsWaitCheck.arg);
        if (!s.isOk()) return ready(arg) ? Status::ok() : s;
      }
    }
  }
}

}  // namespace

namespace detail {

Status waitSlow(bool (*ready)(void*), void* readyArg, std::atomic<uint32_t>* futexWord,
                std::atomic<uint32_t>* sleepers, const WaitContext& ctx) {
  // Most waits for a small message end within a few hundred nanoseconds:
  // poll a little before reading the clock and working out the deadline,
  // which in a VM cost about as much as the hand-off itself.
  if (!ctx.oversubscribed)
    for (int i = 0; i < kSpinCheckEvery; ++i) {
      cpuPause();
      if (ready(readyArg)) return Status::ok();
    }
  uint64_t startNs = nowNs();
  // This wait's own deadline, if sooner than the operation's. The context
  // itself is read in place, never copied: the other end of a connector may
  // write ctx.peerFailure while this wait runs (it is read only after that
  // end's abort flag was seen; a copy here read it unsynchronized).
  Deadline deadline = ctx.deadline;
  if (ctx.waitTimeoutMs >= 0) {
    const Deadline own = Deadline::afterMs(ctx.waitTimeoutMs);
    if (own.at() < deadline.at()) deadline = own;
  }
  Status stop;
  if (ctx.dedicatedCore && !ctx.oversubscribed) {
    // A negative setting means no spinning, not (cast to unsigned) forever.
    const int64_t spinNs = std::max<int64_t>(0, kWaitSpinDedicatedUs.get()) * 1000;
    if (timedSpinPhase(ready, readyArg, ctx, deadline, spinNs, startNs, &stop)) return Status::ok();
    if (!stop.isOk()) return ready(readyArg) ? Status::ok() : stop;
  } else {
    if (!ctx.oversubscribed && spinPhase(ready, readyArg, ctx, deadline, kWaitSpin.get(), startNs, &stop))
      return Status::ok();
    if (!stop.isOk()) return ready(readyArg) ? Status::ok() : stop;
    if (yieldPhase(ready, readyArg, ctx, deadline, kWaitYield.get(), startNs, &stop)) return Status::ok();
    if (!stop.isOk()) return ready(readyArg) ? Status::ok() : stop;
  }
  Status s = sleepPhase(ready, readyArg, futexWord, sleepers, ctx, deadline, startNs);
  if (!s.isOk()) PLAIT_INFO(kShm, "wait failed: %s", s.toString().c_str());
  return s;
}

}  // namespace detail

namespace detail {
void wakeSlow(std::atomic<uint32_t>* futexWord) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(futexWord), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}
}  // namespace detail

ScopedWaitCheck::ScopedWaitCheck(WaitCheck check) : previous_(tlsWaitCheck) { tlsWaitCheck = check; }
ScopedWaitCheck::~ScopedWaitCheck() { tlsWaitCheck = previous_; }

std::string describePeer(const WaitContext& ctx) { return peerText(ctx); }

Status abortedError(const WaitContext& ctx) { return abortedStatus(ctx); }

Status peerAbortedError(const WaitContext& ctx) {
  if (ctx.peerFailure != nullptr) return remoteError(peerText(ctx) + ": " + ctx.peerFailure + " during " + whatText(ctx));
  return remoteError(peerText(ctx) + " aborted during " + whatText(ctx));
}

bool hostOversubscribed(int localRanks) {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return false;
  return localRanks > CPU_COUNT(&set);
}

bool processAlive(int pid) {
  if (pid <= 0) return true;
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  // A dead child that nobody has reaped yet still answers kill(); read its state.
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", pid);
  FILE* f = std::fopen(path, "r");
  if (f == nullptr) return !(kill(pid, 0) != 0 && errno == ESRCH);  // no /proc: trust kill()
  char buf[512];
  size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  // "pid (comm) S ...": the state follows the last ')' (comm may contain ')').
  const char* close = nullptr;
  for (const char* p = buf; *p; ++p)
    if (*p == ')') close = p;
  if (close == nullptr || close[1] != ' ') return true;
  char state = close[2];
  if (state == 'Z' || state == 'X') return false;
  // A process being killed closes its sockets before it becomes a zombie: a
  // peer that saw the connection close must already find it dying. The
  // kernel marks it PF_EXITING (0x4 in the flags, field 9) before that.
  unsigned ppid = 0, flags = 0;
  int pgrp = 0, session = 0, tty = 0, tpgid = 0;
  if (std::sscanf(close + 4, "%u %d %d %d %d %u", &ppid, &pgrp, &session, &tty, &tpgid, &flags) == 6 &&
      (flags & 0x4u) != 0)
    return false;
  return true;
}

}  // namespace plait
