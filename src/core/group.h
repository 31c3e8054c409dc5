// group.h — ncclGroupStart/End: operations issued inside a group are
// collected per thread and launched together at the outermost End.
//
// NCCL's group depth is per thread, and so is Plait's: this thread-local
// state (depth, pending operations, first error) is the library's only
// hidden state and lives here alone. Operations on one communicator run in
// issue order; operations on different communicators (ranks as threads in
// one process, as with ncclCommInitAll) run concurrently, one thread each,
// so a group over several communicators cannot deadlock on itself.
#pragma once

#include <functional>
#include <vector>

#include "core/task.h"
#include "nccl.h"
#include "plait/status.hpp"

namespace plait::group {

// A pending operation names its communicator by the user's handle, never by
// the Communicator behind it: destroy or abort may free that one before the
// group ends (handles outlive their communicators as tombstones), so End
// checks each handle when it runs the group.
struct PendingOp {
  ncclComm_t comm = nullptr;
  Task task;
};

bool active();                   // inside a group on this thread
void start();
// Decrements the depth; at depth 0 runs what was collected through `run`
// (called once per communicator with its operations) and returns the first
// error of the group, including errors recorded by recordError.
// `run` may run on several threads at once (one per communicator); an
// exception it throws becomes that communicator's error. A plain function,
// so a worker reaches it without reading the caller's stack (worker_pool.h).
using GroupRun = Status (*)(ncclComm_t comm, std::vector<Task>& tasks);
Status end(GroupRun run);
void enqueue(ncclComm_t comm, const Task& task);
// Defers a collective setup call on communicator `comm` (its creation, a
// symmetric window registration, a device communicator) to the outermost
// End, where they run before any operation: one thread per communicator,
// each communicator's calls in call order. NCCL lets one thread create
// several ranks, and register their windows, inside a group.
void deferSetup(const void* comm, std::function<Status()> setup);
// Remembers an argument error of a call inside the group; End reports it.
void recordError(const Status& status);
// Operations pending on this thread (ncclGroupSimulateEnd).
const std::vector<PendingOp>& pending();
int depth();

}  // namespace plait::group
