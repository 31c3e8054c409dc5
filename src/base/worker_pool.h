// worker_pool.h — the threads runConcurrently (no_throw.h) runs its bodies on,
// kept from one call to the next.
//
// One thread driving several communicators (ncclCommInitAll, then a group
// with a call on each: nccl-tests' -g) runs each communicator's part of a
// ncclGroupEnd on a thread of its own, at the same time. Starting and joining
// a thread per communicator per group cost about 50 us on this VM, 200x an
// 8-byte AllReduce. So each calling thread keeps a pool: its workers wait for
// their next body by yielding for up to 200 us (back-to-back groups find them
// awake; a yield gives the core away when anything else wants it), then sleep
// on a futex until a body or the end of the calling thread wakes them. A pool's workers end, and are joined, when
// the thread that owns the pool exits.
//
// Bodies do not inherit the caller's thread-local state, and a worker's
// thread-local state outlives its body: bodies set what they rely on
// (DeviceGroupScope::Adopt, the comm's device) as they did on fresh threads.
//
// A body that calls runConcurrently on the calling thread while its pool is
// busy (a nested call) gets a pool of its own for that call, joined at its
// end; so does a call made while the thread's thread-locals are destroyed.
// After fork() the child's pools (whose threads the child does not have) are
// set aside untouched, and a new one starts on first use.
#pragma once

#include <cstddef>

#include "plait/status.hpp"

namespace plait {

// One body for one worker: run(job, i) with the data it carries. A post
// copies the job into the worker's own cache line, so the worker reaches its
// body through no pointer into the caller's memory (unless the data point
// there): data on the caller's stack, a lambda's captures, cost the worker a
// cache miss per pointer it follows, and the caller one more when its next
// call writes that stack again. With ncclCommInitAll's ranks driven by one
// thread (-g 2), that chain and its like made an 8-byte group of two ranks
// take 1.5 us instead of 1.0 (perf/results/host/launch_modes.md).
struct WorkerJob {
  Status (*run)(const WorkerJob& job, size_t index) = nullptr;
  void* data[4] = {};
};

// Runs jobs[i].run(jobs[i], i) for every i in [0, n) at the same time: i = 0
// on the calling thread, the others on its pool's workers; returns once every
// job returned. results (n entries) must come in OK: results[i] becomes job
// i's error, if it returned one. run must not throw. A worker that cannot be
// started (no memory, the process's thread limit) leaves its job unrun and
// results[i] set to the error.
void runOnWorkers(size_t n, const WorkerJob* jobs, Status* results);

}  // namespace plait
