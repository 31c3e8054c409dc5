#include "base/worker_pool.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "algorithms/portability.h"
#include "base/clock.h"
#include "base/no_throw.h"
#include "base/wait.h"

namespace plait {

namespace {

constexpr uint64_t kIdlePollNs = 200'000;  // how long an idle worker polls before it sleeps
constexpr int kIdleSpins = 2000;           // of those polls, the first with a pause instruction, then yields

// One worker: a thread that runs the job posted to it, then waits for the next.
// `posted` counts the jobs posted (and is bumped once more to stop it); the
// worker stores that count in `finished` when the job returned. Each word is
// a futex with its own sleeper count (wait.h's protocol). The owner writes
// the first cache line, the worker the second: a post is one line's move to
// the worker, a finish one line's move back.
struct Worker {
  // Written by the pool's owner before `posted` is bumped (release), read by
  // the worker after it saw the bump (acquire).
  alignas(64) std::atomic<uint32_t> posted{0};
  std::atomic<uint32_t> postedSleepers{0};
  bool stop = false;
  size_t index = 0;
  WorkerJob job;
  // Written by the worker before `finished` (release), read by the owner
  // after it saw it (acquire).
  alignas(64) std::atomic<uint32_t> finished{0};
  std::atomic<uint32_t> finishedSleepers{0};
  Status result;
  // kIdleSpins, or none when the pool's threads outnumber the CPUs; set by
  // the owner while the worker may be polling.
  std::atomic<int> idleSpins{0};
  std::thread thread;

  void loop();
  void idleUntilPosted(uint32_t seen);
  void post(const WorkerJob& j, size_t i);
  void waitFinished();
  void stopAndJoin();
};

// Waits for a job, without a deadline: an idle worker is no call's wait, and
// its owner always posts once more (a job, or the stop) before it goes away.
void Worker::idleUntilPosted(uint32_t seen) {
  const uint64_t start = nowNs();
  for (int i = 1; posted.load(std::memory_order_acquire) == seen; ++i) {
    if (i % 16 == 0 && nowNs() >= start + kIdlePollNs) break;
    if (i < idleSpins.load(std::memory_order_relaxed)) cpuPause();
    else sched_yield();
  }
  while (posted.load(std::memory_order_acquire) == seen) {
    postedSleepers.fetch_add(1, std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with the fence in wake()
    if (posted.load(std::memory_order_acquire) == seen)
      syscall(SYS_futex, reinterpret_cast<uint32_t*>(&posted), FUTEX_WAIT, seen, nullptr, nullptr, 0);
    postedSleepers.fetch_sub(1, std::memory_order_relaxed);
  }
}

void Worker::loop() {
  uint32_t seen = 0;
  for (;;) {
    idleUntilPosted(seen);
    seen = posted.load(std::memory_order_acquire);
    if (stop) return;
    result = job.run(job, index);
    finished.store(seen, std::memory_order_release);
    wake(&finished, &finishedSleepers);
  }
}

void Worker::post(const WorkerJob& j, size_t i) {
  job = j;
  index = i;
  posted.fetch_add(1, std::memory_order_release);
  wake(&posted, &postedSleepers);
}

// Bounded by the job itself: a body is a library call with its own deadline.
// Never returns before the job did (it reads the caller's frame): the wait
// has no deadline or abort flag, and the caller's per-thread wait check is
// off for it, so no early return can come, and the loop would outlast one.
void Worker::waitFinished() {
  const uint32_t target = posted.load(std::memory_order_relaxed);
  WaitContext ctx;
  ctx.oversubscribed = idleSpins.load(std::memory_order_relaxed) == 0;  // yield the CPU the job needs
  ctx.what = "a communicator's part of a group run on another thread";
  ScopedWaitCheck noCheck(WaitCheck{});
  auto done = [&] { return finished.load(std::memory_order_acquire) == target; };
  while (!done()) (void)waitUntil(done, &finished, &finishedSleepers, ctx);
}

void Worker::stopAndJoin() {
  stop = true;
  posted.fetch_add(1, std::memory_order_release);
  wake(&posted, &postedSleepers);
  thread.join();
}

// Bumped in a fork's child (pthread_atfork), so a pool can tell it belongs to
// the parent without a getpid() system call per use.
std::atomic<uint32_t> forkCount{0};
void afterForkInChild() { forkCount.fetch_add(1, std::memory_order_relaxed); }
[[maybe_unused]] const int atForkRegistered = pthread_atfork(nullptr, nullptr, afterForkInChild);

class Pool {
 public:
  Pool() = default;
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;
  ~Pool() {
    for (auto& w : workers_) w->stopAndJoin();
  }

  bool busy() const { return busy_; }
  uint32_t forks() const { return forks_; }
  Pool* setAside = nullptr;  // the next pool set aside after fork (kept reachable)

  void run(size_t n, const WorkerJob* jobs, Status* results) {
    struct Busy {
      bool& flag;
      ~Busy() { flag = false; }  // also when starting a worker throws
    } busy{busy_ = true};
    Status startError;
    while (workers_.size() + 1 < n && startError.isOk()) {
      try {
        workers_.push_back(std::make_unique<Worker>());
      } catch (...) {
        startError = statusFromCurrentException().withContext("starting a thread");
        break;
      }
      Worker* w = workers_.back().get();
      try {
        w->thread = std::thread([w] { w->loop(); });
      } catch (...) {  // std::system_error: no thread; the worker never ran
        startError = statusFromCurrentException().withContext("starting a thread");
        workers_.pop_back();
      }
    }
    // Idle workers spin only while every thread of the pool can have a CPU.
    if (workers_.size() != spinsSetFor_) {
      spinsSetFor_ = workers_.size();
      const int spins = hostOversubscribed(static_cast<int>(workers_.size()) + 1) ? 0 : kIdleSpins;
      for (auto& w : workers_) w->idleSpins.store(spins, std::memory_order_relaxed);
    }
    const size_t started = std::min(n - 1, workers_.size());
    // Before any post: copying a Status may throw, and nothing may unwind
    // past jobs that run.
    for (size_t i = started + 1; i < n; ++i) results[i] = startError;
    for (size_t i = 1; i <= started; ++i) workers_[i - 1]->post(jobs[i], i);
    results[0] = jobs[0].run(jobs[0], 0);
    for (size_t i = 0; i < started; ++i) {
      workers_[i]->waitFinished();
      // An OK result stays where it is: moving it would write the worker's line.
      if (!workers_[i]->result.isOk()) results[i + 1] = std::move(workers_[i]->result);
    }
  }

 private:
  std::vector<std::unique_ptr<Worker>> workers_;
  bool busy_ = false;
  size_t spinsSetFor_ = 0;  // the pool size the workers' idleSpins were set for
  uint32_t forks_ = forkCount.load(std::memory_order_relaxed);  // the process this pool's threads are in
};

// Pools left behind in a forked child: their threads exist only in the
// parent, so they are never joined or freed, only kept reachable.
Pool* setAsidePools = nullptr;

// The thread's pool, and whether the thread is exiting. Plain thread-locals
// with no destructor of their own, so they stay readable after the reaper
// below ran (a store to the reaper's own members in its destructor would be
// dead to the compiler).
constinit thread_local Pool* tlsPool = nullptr;
constinit thread_local bool tlsExiting = false;

// Registered with the thread's exit when the thread's first pool is made;
// ends and joins that pool's workers.
struct PoolReaper {
  ~PoolReaper() {
    if (tlsPool != nullptr && tlsPool->forks() == forkCount.load(std::memory_order_relaxed)) delete tlsPool;
    tlsPool = nullptr;
    tlsExiting = true;
  }
};
thread_local PoolReaper tlsReaper;

// The thread's pool, or nullptr once the thread's thread-locals are being
// destroyed (a later thread-local's or, on the main thread, a static
// destructor's group): then the caller runs on a pool of its own.
Pool* threadPool() {
  if (tlsExiting) return nullptr;
  if (tlsPool != nullptr && tlsPool->forks() != forkCount.load(std::memory_order_relaxed)) {  // a fork's child
    tlsPool->setAside = setAsidePools;
    setAsidePools = tlsPool;
    tlsPool = nullptr;
  }
  if (tlsPool == nullptr) {
    [[maybe_unused]] PoolReaper& reaper = tlsReaper;  // its destructor now runs at the thread's exit
    tlsPool = new Pool();
  }
  return tlsPool;
}

}  // namespace

void runOnWorkers(size_t n, const WorkerJob* jobs, Status* results) {
  if (n == 0) return;
  if (n == 1) {
    results[0] = jobs[0].run(jobs[0], 0);
    return;
  }
  Pool* pool = nullptr;
  try {
    pool = threadPool();
  } catch (...) {
    for (size_t i = 1; i < n; ++i) results[i] = statusFromCurrentException().withContext("starting a thread");
    results[0] = jobs[0].run(jobs[0], 0);
    return;
  }
  if (pool == nullptr || pool->busy()) {  // nested, or the thread is exiting: workers joined on return
    Pool own;
    own.run(n, jobs, results);
    return;
  }
  pool->run(n, jobs, results);
}

}  // namespace plait
