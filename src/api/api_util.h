// api_util.h — what every C entry point shares: the communicator handle,
// error mapping and the thread's last error message.
//
// `struct ncclComm` is the handle users hold. It outlives the communicator it
// points to: destroy and abort free the Communicator but keep this small
// shell (a tombstone of a few dozen bytes), so a call on a destroyed
// communicator is reported as such instead of reading freed memory.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/comm.h"
#include "plait/stream.hpp"
#include "nccl.h"
#include "plait/status.hpp"

struct ncclComm {
  static constexpr uint64_t kLive = 0x706c616974636f6dULL;  // "plaitcom"
  static constexpr uint64_t kDead = 0xdeadc0de0000dead;
  uint64_t magic = kLive;
  std::atomic<int> closing{0};      // destroy/abort started
  std::atomic<int> initState{0};    // 0 ready, 1 initialising (non-blocking), 2 failed
  // API calls currently using impl. A line of its own: the thread that runs
  // a rank's part of a group (a library worker, with ncclCommInitAll's ranks
  // on one thread) writes it, while the calling thread reads the fields
  // around it to check its next call's arguments.
  alignas(64) std::atomic<int> inflight{0};
  // Operations queued on host streams (plait::HostStream) that have not yet
  // finished: a call without a stream waits for them first (waitForStreams),
  // as CUDA's legacy default stream waits for the other streams' work.
  std::atomic<int> onStreams{0};
  alignas(64) std::unique_ptr<plait::Communicator> impl;
  std::thread initThread;           // non-blocking initialisation
  plait::Status initError;
  int rank = -1;
  int nranks = 0;
  int cudaDev = -1;  // the CUDA device current when it was created; -1 without CUDA
  bool blocking = true;
  struct UserOp {
    bool live = false;
    ncclDataType_t type = ncclFloat32;
    ncclScalarResidence_t residence = ncclScalarHostImmediate;
    uint64_t scalarBits = 0;         // host-immediate value
    const void* scalarPtr = nullptr;  // read at each call (ncclScalarDevice)
  };
  std::mutex opsMu;
  std::vector<UserOp> userOps;
  // Non-blocking communicators (config.blocking = 0): calls that would block
  // (host operations without a stream, split, shrink) run here in order and
  // return ncclInProgress; ncclCommGetAsyncError says ncclInProgress until
  // they are done, then their first error once (api/nonblocking.cc).
  std::mutex backgroundMu;
  std::unique_ptr<plait::HostStream> background;  // made on first use
  // A non-blocking split, shrink or grow hands out the child's shell before
  // the agreement over the parent has decided its rank and size (see
  // deferChild): `impl` is bound later, under this lock, unless destroy or
  // abort began; retire takes it once after setting `closing`.
  std::mutex bindMu;
};

namespace plait::api {

// Records the message for ncclGetLastError, logs it at WARN once, and maps
// the code to ncclResult_t. Inline: every call returns through it, and the
// success path is one test.
ncclResult_t failSlow(const Status& status, const char* call);
inline ncclResult_t fail(const Status& status, const char* call) {
  return status.isOk() ? ncclSuccess : failSlow(status, call);
}
ncclResult_t toResult(Code code);
const char* lastError();

// NCCL_CONFIG_INITIALIZER's and NCCL_COLLCONFIG_INITIALIZER's magic.
constexpr unsigned kConfigMagic = 0xcafebeef;
// ncclConfig_t into CommOptions (comm_config.cc); null: the defaults.
Status readCommConfig(const ncclConfig_t* config, CommOptions* out);

// Creates communicator `rank` of `nranks` over `id` into *out (blocking,
// non-blocking or deferred to the group's end as `config` and the calling
// thread's group say); `call` names the API function in errors.
// `parentPeers`: for a child, its parent's local peers (CommOptions).
ncclResult_t initRank(ncclComm_t* out, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config, const char* call,
                      std::vector<PeerProcess> parentPeers = {}, int rootPid = 0);
// initRank for a communicator made from `parent` (split, grow, shrink):
// without a config it keeps the parent's blocking mode; a failed init names
// the parent's local ranks that died.
// `rootRank`: the parent's rank that hosts the child's bootstrap root (-1:
// unknown); its death ends the child's init at once when it is on this host.
ncclResult_t initChild(ncclComm_t parent, ncclComm_t* out, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config,
                       const char* call, int rootRank = -1);
// What the agreement over a parent (split, shrink, grow) decided for this
// rank's child.
using ChildPlan = Communicator::SplitResult;
// Whether a split, shrink or grow of `parent` runs in its background (a
// non-blocking parent outside a group): see deferChild.
bool defersChild(ncclComm_t parent);
// The non-blocking split, shrink and grow: returns ncclInProgress at once.
// When `member`, *out is the child's shell, initialising (ncclCommGetAsyncError
// on it says ncclInProgress, then ncclSuccess or the error); else *out stays
// NULL (NCCL_SPLIT_NOCOLOR). `agree` (the collective step over the parent)
// and then the child's init run in order on the parent's background stream,
// so ncclCommGetAsyncError on the parent reports the agreement. Destroying or
// aborting the child before its init ran skips the init; the parent's
// destroy before the agreement ran fails the child.
ncclResult_t deferChild(ncclComm_t parent, ncclComm_t* out, ncclConfig_t* config, const char* call, bool member,
                        std::function<plait::Result<ChildPlan>()> agree);

// Non-blocking communicators (nonblocking.cc). Queues `work` on comm's
// background stream, holding the communicator (as CommUse) until it ran;
// returns ncclInProgress. `work` does not run once destroy or abort began:
// `skipped` (if any) runs instead, with the reason.
ncclResult_t runInBackground(ncclComm_t comm, std::function<Status()> work,
                             std::function<void(const Status&)> skipped = nullptr);
// Whether background work is queued or running; else its first error since
// the last call (each error is reported once).
bool backgroundPending(ncclComm_t comm, Status* firstError);
// Waits for background work (destroy and abort, after the abort flag).
void stopBackground(ncclComm_t comm);
// For calls that talk to the other ranks without going through the
// background queue (suspend, resume, windows, device communicators,
// one-sided calls): on a non-blocking communicator with queued work still
// running, an error (as NCCL refuses any call while one is in progress);
// both would drive the bootstrap at once, which is not thread-safe.
Status checkQuiet(ncclComm_t comm);
// Waits until no operation of `comm` is queued on a host stream, so a call
// without one never runs beside them on another thread (both would drive the
// communicator's connections and number its operations). Bounded by
// PLAIT_TIMEOUT; ends early with an error once the communicator is destroyed
// or aborted.
Status waitForStreams(ncclComm_t comm);

// Argument checks; each names the argument and its value. The checks are
// inline and build their error in the out-of-line *Error function, so a
// valid argument costs a compare or two (they run on every call).
Status commError(ncclComm_t comm);
Status typeError(ncclDataType_t type, const char* name);
Status rootError(int root, int nranks, const char* name);
Status bufferError(const char* name);
inline Status checkComm(ncclComm_t comm) {  // live and initialised
  if (comm != nullptr && comm->magic == ncclComm::kLive && comm->closing.load(std::memory_order_acquire) == 0 &&
      comm->initState.load(std::memory_order_acquire) == 0) [[likely]]
    return Status::ok();
  return commError(comm);
}
inline Status checkType(ncclDataType_t type, const char* name = "datatype") {
  if (static_cast<int>(type) >= 0 && static_cast<int>(type) < ncclNumTypes) [[likely]]
    return Status::ok();
  return typeError(type, name);
}
inline Status checkRoot(int root, int nranks, const char* name = "root") {
  if (root >= 0 && root < nranks) [[likely]]
    return Status::ok();
  return rootError(root, nranks, name);
}
inline Status checkBuffer(const void* ptr, size_t count, const char* name) {
  if (count == 0 || ptr != nullptr) [[likely]]
    return Status::ok();
  return bufferError(name);
}
// A buffer an operation reads or writes on this rank (count in elements).
struct UsedBuffer {
  const void* ptr;
  size_t count;
  const char* name;
};
// Decides where the operation runs from its buffers and stream: host
// buffers on the host executor (stream NULL: blocking; a plait::HostStream:
// queued there), CUDA device buffers as a kernel on the CUDA stream `stream`
// (NULL: CUDA's default stream). Fills task->stream or task->onDevice and
// task->cudaStream. Mixed host/device buffers, device buffers of another
// device than the communicator's, host buffers on a CUDA stream and device
// buffers on a host stream are invalid arguments naming the buffer.
Status placeTask(ncclComm_t comm, std::span<const UsedBuffer> used, cudaStream_t stream, Task* task);
// Resolves a built-in or user op for `type` into task->op.
Status resolveOp(ncclComm_t comm, ncclRedOp_t op, ncclDataType_t type, Task* task);
// Applies a caller's per-call configuration (the nccl*Config entry points;
// null: none) to a placed task (coll_config.cc).
Status applyCollConfig(const ncclCollConfig_t* config, Task* task);

// What an entry point returns when an exception reached the C boundary:
// ncclSystemError for std::bad_alloc (out of memory), ncclInternalError for
// anything else, with the exception's text in ncclGetLastError. Converts to
// the entry point's return type.
struct BoundaryError {
  ncclResult_t result;
  operator ncclResult_t() const { return result; }
  operator const char*() const { return "unexpected C++ exception inside Plait (see ncclGetLastError)"; }
};
// Call only from a catch handler; `function` is the entry point's name.
BoundaryError exceptionAtBoundary(const char* function) noexcept;

// Holds a communicator for the duration of one API call, so abort or
// destroy on another thread waits until the call is out.
class CommUse {
 public:
  explicit CommUse(ncclComm_t comm) : comm_(comm) { comm_->inflight.fetch_add(1, std::memory_order_seq_cst); }
  ~CommUse() { comm_->inflight.fetch_sub(1, std::memory_order_release); }
  // False once destroy/abort started (the call must not touch impl).
  bool usable() const { return comm_->closing.load(std::memory_order_seq_cst) == 0; }

 private:
  ncclComm_t comm_;
};

}  // namespace plait::api

// Defines `pncclX` and makes `ncclX` a weak alias of it, so profilers can
// interpose on either name (as NCCL does). The body is a function-try-block
// closed by PLAIT_API_END: no C++ exception crosses the C boundary (an
// exception there would be std::terminate in the caller's process).
#define PLAIT_API(ret, name, args)                                                    \
  extern "C" ret nccl##name args __attribute__((weak, alias("pnccl" #name)));         \
  extern "C" __attribute__((visibility("default"))) ret pnccl##name args try
#define PLAIT_API_END \
  catch (...) {       \
    return plait::api::exceptionAtBoundary(__func__); \
  }
