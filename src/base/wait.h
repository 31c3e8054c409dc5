// wait.h — how Plait waits for a word in shared memory to change (DESIGN.md §4).
//
// The policy: spin with a pause instruction a bounded number of times (skipped
// when the host is oversubscribed: a spinning rank would hold the core its peer
// needs), then sched_yield a bounded number of times, then sleep on a futex in
// slices of at most 1 ms. Between slices the waiter checks the deadline, the
// communicator's abort flag and (about every 100 ms) whether the peer process
// is still alive, so no wait can outlive its operation's deadline, an abort or
// a dead peer by more than a few milliseconds (100 ms for a dead peer).
//
// The sleep/wake protocol. A waiter announces itself in `sleepers` (a counter
// the waker can read cheaply) before its last look at the state, then sleeps
// on `futexWord` with the value it read before that look. A waker first
// publishes the state (a store that changes `futexWord`), then calls wake(),
// which issues a StoreLoad fence and a FUTEX_WAKE only if `sleepers` is
// non-zero. The two fences make "waker sees no sleeper" imply "sleeper sees the
// new state", so no wake-up is lost; a wake-up for a change that does not
// alter `futexWord` (an abort flag) can at worst be noticed one slice (1 ms)
// late.
//
// Futexes are process-shared (not FUTEX_PRIVATE): the words normally live in
// a segment mapped by several processes.
//
// Tunables: PLAIT_WAIT_SPIN (pause iterations before yielding, default 1000:
// 20-110 us depending on the CPU's pause latency, longer than a normal step
// hand-off, shorter than a scheduler slice) and PLAIT_WAIT_YIELD (sched_yield
// calls before sleeping, default 64: about as long again when the core is idle,
// and bounded when it is not). A rank on a core no other local rank may use
// (WaitContext::dedicatedCore) spins for PLAIT_WAIT_SPIN_DEDICATED_US
// (default 2000) and then sleeps, without yielding: like an MPI rank bound to
// its core, it keeps the core when a competing process wants it.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "base/clock.h"
#include "plait/status.hpp"

namespace plait {

// What a wait needs to know besides the word it waits on. One per communicator
// (or per connector); read-only while a wait runs, so the owner updates
// `deadline` and `what` between operations, not during them.
struct WaitContext {
  Deadline deadline = Deadline::never();  // of the current operation
  // A bound on each single wait, counted from when it starts to block (-1:
  // none). Cheaper than a per-operation deadline: nothing is computed unless
  // a wait actually blocks.
  int64_t waitTimeoutMs = -1;
  const std::atomic<uint32_t>* abortFlag = nullptr;  // non-zero: the communicator is aborting
  int peerPid = -1;      // checked about every 100 ms in the sleeping phase; dead -> kRemoteError
  int peerRank = -1;     // for messages
  bool oversubscribed = false;  // more local ranks than cores: never spin, go straight to yield/futex
  // The peer runs on CPUs this rank may not use, and no helper thread of
  // this rank needs this rank's CPU to make the awaited progress: spin for
  // up to PLAIT_WAIT_SPIN_DEDICATED_US, then sleep, never yield (a yield
  // hands a competing process a whole scheduler slice).
  bool dedicatedCore = false;
  const char* what = "";  // e.g. "allreduce recv from rank 3", for messages
  // Why the other end of a connector went away, when it knows better than
  // "aborted" (a network proxy: "connection to 10.0.0.2:41000 closed by the
  // peer"). Written before the other end's abort mark is stored with
  // release, read only after it was seen; null: plain "aborted".
  const char* peerFailure = nullptr;
};

// A check that the operation running on this thread adds to every wait's
// slow path: called about every 100 ms while the wait sleeps (with the peer
// liveness check); a non-OK status ends the wait with that status. Installed
// per thread by ScopedWaitCheck, so the transports need not know about it.
struct WaitCheck {
  Status (*check)(const void* arg) = nullptr;
  const void* arg = nullptr;
};
class ScopedWaitCheck {
 public:
  explicit ScopedWaitCheck(WaitCheck check);
  ~ScopedWaitCheck();
  ScopedWaitCheck(const ScopedWaitCheck&) = delete;
  ScopedWaitCheck& operator=(const ScopedWaitCheck&) = delete;

 private:
  WaitCheck previous_;
};

namespace detail {
// The out-of-line part of waitUntil: everything after the first failed check.
// `ready` is called as ready(readyArg).
Status waitSlow(bool (*ready)(void*), void* readyArg, std::atomic<uint32_t>* futexWord,
                std::atomic<uint32_t>* sleepers, const WaitContext& ctx);
}  // namespace detail

// Blocks until ready() returns true.
//
// `futexWord` is a 32-bit word that changes whenever ready() may have become
// true; `sleepers` is the word wake() reads to decide whether to FUTEX_WAKE.
// Both may be in memory shared between processes. ready() must be cheap and
// free of side effects; it is called many times.
//
// Returns Status::ok() once ready() is true, or
//   kRemoteError "rank 3 (pid 1234) died during <what>" when ctx.peerPid is
//     gone (checked only while sleeping, about every 100 ms),
//   kRemoteError "aborted during <what>" when *ctx.abortFlag is non-zero,
//   kRemoteError "timed out after N ms during <what>" at ctx.deadline.
// ready() is checked once more before any of these is returned.
// The fast path (ready() is true at once) costs only that call.
// Thread-safe: any number of threads may wait on the same words.
template <typename Ready>
inline Status waitUntil(Ready ready, std::atomic<uint32_t>* futexWord, std::atomic<uint32_t>* sleepers,
                        const WaitContext& ctx) {
  if (__builtin_expect(static_cast<bool>(ready()), 1)) return Status::ok();
  return detail::waitSlow([](void* arg) -> bool { return (*static_cast<Ready*>(arg))(); }, &ready, futexWord,
                          sleepers, ctx);
}

namespace detail {
void wakeSlow(std::atomic<uint32_t>* futexWord);  // the FUTEX_WAKE system call
}  // namespace detail

// Wakes every thread sleeping on `futexWord`. Call it after the store that
// made their ready() true. When nobody sleeps it costs a StoreLoad fence and
// one read of `sleepers` (no system call, no write to shared memory).
// Thread-safe; never blocks.
inline void wake(std::atomic<uint32_t>* futexWord, std::atomic<uint32_t>* sleepers) {
  std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with the fence in the sleeping waiter
  if (__builtin_expect(sleepers->load(std::memory_order_relaxed) != 0, 0)) detail::wakeSlow(futexWord);
}

// "rank 3 (pid 1234)", "rank 3", "peer (pid 1234)" or "peer", from ctx.
std::string describePeer(const WaitContext& ctx);
// kRemoteError "rank 3 (pid 1234) aborted during <what>": for waits that see
// the peer's own abort flag (e.g. FifoControl::senderAborted).
Status peerAbortedError(const WaitContext& ctx);
// kRemoteError "aborted during <what>": what waitUntil returns for the abort
// flag, for waits that see this side's own abort mark.
Status abortedError(const WaitContext& ctx);

// True when `localRanks` exceed the CPUs this process may run on
// (sched_getaffinity); false if the affinity cannot be read.
bool hostOversubscribed(int localRanks);

// True unless `pid` is known to be gone (no such process, or a zombie).
// Exposed for the bootstrap's heartbeat and for tests; costs a system call
// and a small /proc read.
bool processAlive(int pid);

}  // namespace plait
