// init_api.cc — ids, communicator creation and teardown.
#include <cstring>
#include <thread>

#include "api/api_util.h"
#include "base/config.h"
#include "base/cuda_probe.h"
#include "base/log.h"
#include "base/no_throw.h"
#include "core/bootstrap.h"
#include "core/group.h"

using plait::Status;
using namespace plait::api;

namespace {

void printVersionOnce() {
  static std::once_flag once;
  std::call_once(once, [] {
    const auto lvl = plait::log::level();
    if (lvl == plait::log::Level::kVersion || lvl >= plait::log::Level::kInfo)
      fprintf(stderr, "PLAIT version %s (NCCL API %d.%d.%d)\n", PLAIT_VERSION_STRING, NCCL_MAJOR, NCCL_MINOR,
              NCCL_PATCH);
  });
}

// Creates the communicator behind `shell`; runs on the caller's thread or, for
// non-blocking configs, on the shell's init thread.
void initShell(ncclComm_t shell, ncclUniqueId id, plait::CommOptions options) {
  Status s = plait::noThrow([&] { return shell->impl->init(id, options); });
  if (s.isOk()) {
    shell->initState.store(0, std::memory_order_release);
  } else {
    shell->initError = std::move(s);
    shell->initState.store(2, std::memory_order_release);
  }
}

}  // namespace

namespace plait::api {
ncclResult_t initRank(ncclComm_t* out, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config,
                      const char* call, std::vector<plait::PeerProcess> parentPeers, int rootPid) {
  printVersionOnce();
  if (out == nullptr) return fail(plait::invalidArgument("comm (the output pointer) is NULL"), call);
  *out = nullptr;
  plait::CommOptions options;
  if (Status s = readCommConfig(config, &options); !s.isOk()) return fail(s, call);
  options.parentPeers = std::move(parentPeers);
  options.rootPid = rootPid;
  if (nranks < 1) return fail(plait::invalidArgument("nranks is " + std::to_string(nranks) + "; must be ≥ 1"), call);
  if (rank < 0 || rank >= nranks)
    return fail(plait::invalidArgument("rank is " + std::to_string(rank) + ", outside [0, " + std::to_string(nranks) +
                                       ")"),
                call);
  auto* shell = new ncclComm();
  shell->rank = rank;
  shell->nranks = nranks;
  shell->cudaDev = plait::cuda::currentDevice();  // as NCCL: the caller's current device
  options.cudaDev = shell->cudaDev;
  shell->blocking = options.blocking;
  shell->impl = std::make_unique<plait::Communicator>(rank, nranks);
  if (plait::group::active()) {  // created at the outermost ncclGroupEnd, with the group's other ranks
    shell->initState.store(1, std::memory_order_release);
    plait::group::deferSetup(shell, [shell, id, options] {
      CommUse use(shell);  // an abort before or during the group's End waits for (or skips) this
      if (!use.usable()) return plait::invalidUsage("comm was destroyed or aborted before ncclGroupEnd created it");
      initShell(shell, id, options);
      return shell->initState.load() == 2 ? shell->initError : Status::ok();
    });
    *out = shell;
    return ncclSuccess;
  }
  if (!options.blocking) {
    shell->initState.store(1, std::memory_order_release);
    shell->initThread = std::thread(initShell, shell, id, options);
    *out = shell;
    return ncclInProgress;
  }
  initShell(shell, id, options);
  if (shell->initState.load() == 2) {
    ncclResult_t r = fail(shell->initError, call);
    delete shell;
    return r;
  }
  *out = shell;
  return ncclSuccess;
}

ncclResult_t initChild(ncclComm_t parent, ncclComm_t* out, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config,
                       const char* call, int rootRank) {
  ncclConfig_t inherited = NCCL_CONFIG_INITIALIZER;
  inherited.blocking = parent->blocking ? 1 : 0;
  std::vector<plait::PeerProcess> parentPeers;
  {
    CommUse use(parent);
    if (use.usable()) parentPeers = parent->impl->localPeerProcesses();
  }
  int rootPid = 0;
  for (const plait::PeerProcess& p : parentPeers)
    if (p.rank == rootRank) rootPid = p.pid;
  return initRank(out, nranks, id, rank, config ? config : &inherited, call, std::move(parentPeers), rootPid);
}

bool defersChild(ncclComm_t parent) { return !parent->blocking && !plait::group::active(); }

namespace {

// A deferred child's init, on the parent's background stream after the
// agreement gave `plan`; the parent is held (runInBackground).
void bindAndInitChild(ncclComm_t parent, ncclComm_t shell, const ChildPlan& plan, plait::CommOptions options) {
  options.parentPeers = parent->impl->localPeerProcesses();
  for (const plait::PeerProcess& p : options.parentPeers)
    if (p.rank == plan.rootRank) options.rootPid = p.pid;
  {
    std::lock_guard<std::mutex> bind(shell->bindMu);
    if (shell->closing.load(std::memory_order_seq_cst) != 0) {
      shell->initError = plait::invalidUsage("comm was destroyed or aborted before its initialisation ran");
      shell->initState.store(2, std::memory_order_release);
      return;
    }
    shell->rank = plan.rank;
    shell->nranks = plan.nranks;
    shell->impl = std::make_unique<plait::Communicator>(plan.rank, plan.nranks);
    shell->inflight.fetch_add(1, std::memory_order_seq_cst);  // as CommUse, until its init returned
  }
  initShell(shell, plan.id, std::move(options));
  shell->inflight.fetch_sub(1, std::memory_order_release);
}

}  // namespace

ncclResult_t deferChild(ncclComm_t parent, ncclComm_t* out, ncclConfig_t* config, const char* call, bool member,
                        std::function<plait::Result<ChildPlan>()> agree) {
  ncclConfig_t inherited = NCCL_CONFIG_INITIALIZER;
  inherited.blocking = 0;  // the parent's mode (non-blocking: the only parent that defers)
  plait::CommOptions options;
  if (Status s = readCommConfig(config ? config : &inherited, &options); !s.isOk()) return fail(s, call);
  ncclComm_t shell = nullptr;
  if (member) {
    shell = new ncclComm();
    shell->cudaDev = plait::cuda::currentDevice();  // the caller's, as initRank
    options.cudaDev = shell->cudaDev;
    shell->blocking = options.blocking;
    shell->initState.store(1, std::memory_order_release);
  }
  *out = shell;
  auto failChild = [shell, call](const Status& s) {
    if (shell == nullptr) return;
    shell->initError = Status(s.code(), std::string(call) + ": " + s.message());
    shell->initState.store(2, std::memory_order_release);
  };
  return runInBackground(
      parent,
      [parent, shell, options, failChild, agree = std::move(agree)]() -> Status {
        plait::Result<ChildPlan> plan = plait::invalidUsage("no agreement");
        Status thrown = plait::noThrow([&] {
          plan = agree();
          return Status::ok();
        });
        if (!thrown.isOk()) plan = thrown;
        if (!plan.isOk()) {
          failChild(plan.status());
          return plan.status();
        }
        if (shell != nullptr) bindAndInitChild(parent, shell, *plan, options);
        return Status::ok();  // the child's own init reports on the child
      },
      failChild);
}
}  // namespace plait::api

namespace {

// Waits for in-flight calls to leave, then frees the communicator; the shell
// stays as a tombstone so later calls on the handle fail cleanly.
void retire(ncclComm_t comm, bool abort) {
  comm->closing.store(1, std::memory_order_seq_cst);
  {
    // A deferred child (deferChild) binds impl under this lock only while
    // `closing` is clear: from here on it either is bound, and its init holds
    // `inflight`, or it never will be.
    std::lock_guard<std::mutex> bind(comm->bindMu);
    if (abort && comm->impl) comm->impl->abort();
  }
  if (comm->initThread.joinable()) comm->initThread.join();
  // Calls still inside the communicator leave within their own wait bounds
  // (at once after an abort). Past twice PLAIT_TIMEOUT something is wrong:
  // keep the communicator's memory (a leak) rather than free it under them.
  const int64_t graceMs =
      plait::addWaitMs(plait::addWaitMs(plait::operationTimeoutMs(), plait::operationTimeoutMs()), 1000);
  const plait::Deadline deadline = plait::Deadline::afterMs(graceMs);
  while (comm->inflight.load(std::memory_order_seq_cst) != 0) {
    if (deadline.expired()) {
      PLAIT_WARN(kInit, "rank %d: %d call(s) still inside the communicator after %lld ms; leaving it allocated",
                 comm->rank, comm->inflight.load(), static_cast<long long>(graceMs));
      (void)comm->impl.release();
      break;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  stopBackground(comm);  // its queued calls saw `closing` and skip; none is inside impl now
  comm->impl.reset();
  comm->magic = ncclComm::kDead;
  // The shell stays allocated (and reachable, for leak checkers) as a tombstone.
  static std::mutex tombMu;
  static auto* tombstones = new std::vector<ncclComm_t>();
  std::lock_guard<std::mutex> lock(tombMu);
  tombstones->push_back(comm);
}

}  // namespace

PLAIT_API(ncclResult_t, GetVersion, (int* version)) {
  if (version == nullptr) return fail(plait::invalidArgument("version is NULL"), "ncclGetVersion");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
} PLAIT_API_END

PLAIT_API(ncclResult_t, GetUniqueId, (ncclUniqueId* uniqueId)) {
  printVersionOnce();
  if (uniqueId == nullptr) return fail(plait::invalidArgument("uniqueId is NULL"), "ncclGetUniqueId");
  auto id = plait::createUniqueId();
  if (!id.isOk()) return fail(id.status(), "ncclGetUniqueId");
  *uniqueId = *id;
  return ncclSuccess;
} PLAIT_API_END

PLAIT_API(ncclResult_t, CommInitRankConfig,
          (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank, ncclConfig_t* config)) {
  return initRank(comm, nranks, commId, rank, config, "ncclCommInitRankConfig");
} PLAIT_API_END

PLAIT_API(ncclResult_t, CommInitRank, (ncclComm_t * comm, int nranks, ncclUniqueId commId, int rank)) {
  return initRank(comm, nranks, commId, rank, nullptr, "ncclCommInitRank");
} PLAIT_API_END

PLAIT_API(ncclResult_t, CommInitRankScalable,
          (ncclComm_t * newcomm, int nranks, int myrank, int nId, ncclUniqueId* commIds, ncclConfig_t* config)) {
  if (nId < 1 || commIds == nullptr)
    return fail(plait::invalidArgument("commIds must hold at least one id (nId is " + std::to_string(nId) + ")"),
                "ncclCommInitRankScalable");
  // Plait's bootstrap root scales by itself; the first id names it.
  return initRank(newcomm, nranks, commIds[0], myrank, config, "ncclCommInitRankScalable");
} PLAIT_API_END

namespace {

// ncclCommInitAll's devices exist (checked before any rank starts, so a bad
// entry cannot leave the others waiting for it).
Status checkDevlist(bool cuda, int ndev, const int* devlist) {
  if (!cuda) return Status::ok();  // host ranks: the list only labels them
  const int devices = plait::cuda::deviceCount();
  for (int i = 0; i < ndev; ++i) {
    const int device = devlist != nullptr ? devlist[i] : i;
    if (device < 0 || device >= devices)
      return plait::invalidArgument((devlist != nullptr ? "devlist[" + std::to_string(i) + "] = " : "device ") +
                                    std::to_string(device) + " is not a CUDA device of this process (" +
                                    std::to_string(devices) + " visible)");
  }
  return Status::ok();
}

}  // namespace

PLAIT_API(ncclResult_t, CommInitAll, (ncclComm_t * comms, int ndev, const int* devlist)) {
  const char* call = "ncclCommInitAll";
  if (comms == nullptr) return fail(plait::invalidArgument("comm (the output array) is NULL"), call);
  if (ndev < 1) return fail(plait::invalidArgument("ndev is " + std::to_string(ndev) + "; must be ≥ 1"), call);
  // With a CUDA runtime and a device in the process, rank i's communicator
  // belongs to devlist[i] (the first ndev devices when devlist is NULL), as
  // in NCCL. A runtime without devices (libcudart on a CPU-only machine, as
  // in a PLAIT_WITH_CUDA build here) leaves host ranks, as without CUDA.
  const bool cuda = plait::cuda::runtimeLoaded() && plait::cuda::deviceCount() > 0;
  if (Status s = checkDevlist(cuda, ndev, devlist); !s.isOk()) return fail(s, call);
  ncclUniqueId id;
  if (ncclResult_t r = pncclGetUniqueId(&id); r != ncclSuccess) return r;
  for (int i = 0; i < ndev; ++i) comms[i] = nullptr;
  const std::vector<Status> results = plait::runConcurrently(static_cast<size_t>(ndev), [&](size_t i) {
    const int device = devlist != nullptr ? devlist[i] : static_cast<int>(i);
    if (cuda && !plait::cuda::setCurrentDevice(device))
      return plait::invalidArgument("devlist[" + std::to_string(i) + "] = " + std::to_string(device) +
                                    " is not a CUDA device of this process");
    if (initRank(&comms[i], ndev, id, static_cast<int>(i), nullptr, call) == ncclSuccess) return Status::ok();
    return plait::Status(plait::Code::kInvalidUsage, plait::api::lastError());
  });
  for (int i = 0; i < ndev; ++i) {
    if (results[i].isOk()) continue;
    for (int j = 0; j < ndev; ++j)
      if (comms[j]) {
        retire(comms[j], true);
        comms[j] = nullptr;
      }
    return fail(plait::Status(results[i].code(), "rank " + std::to_string(i) + ": " + results[i].message()), call);
  }
  return ncclSuccess;
} PLAIT_API_END

PLAIT_API(ncclResult_t, CommFinalize, (ncclComm_t comm)) {
  if (Status s = checkComm(comm); !s.isOk()) return fail(s, "ncclCommFinalize");
  // Blocking host operations are complete when their call returns; stream
  // work is owned by its stream and completes by stream synchronisation; a
  // non-blocking communicator's background calls are done when
  // ncclCommGetAsyncError stops saying ncclInProgress.
  Status first;
  if (backgroundPending(comm, &first)) return ncclInProgress;
  if (!first.isOk()) return fail(first, "ncclCommFinalize");
  return ncclSuccess;
} PLAIT_API_END

PLAIT_API(ncclResult_t, CommDestroy, (ncclComm_t comm)) {
  if (comm == nullptr) return ncclSuccess;  // as NCCL: destroying NULL is a no-op
  if (comm->magic != ncclComm::kLive)
    return fail(plait::invalidArgument("comm was already destroyed or aborted"), "ncclCommDestroy");
  if (comm->closing.exchange(1)) return fail(plait::invalidUsage("comm is already being destroyed"), "ncclCommDestroy");
  retire(comm, /*abort=*/false);
  return ncclSuccess;
} PLAIT_API_END

PLAIT_API(ncclResult_t, CommAbort, (ncclComm_t comm)) {
  if (comm == nullptr) return ncclSuccess;
  if (comm->magic != ncclComm::kLive)
    return fail(plait::invalidArgument("comm was already destroyed or aborted"), "ncclCommAbort");
  if (comm->closing.exchange(1)) return ncclSuccess;
  retire(comm, /*abort=*/true);
  return ncclSuccess;
} PLAIT_API_END

// Collective over the parent: every rank calls it. Ranks of one color form a
// new communicator ordered by key (ties by parent rank); NCCL_SPLIT_NOCOLOR
// gives NULL. The child has its own bootstrap and transports (splitShare is
// accepted; resources are not shared yet). Without a config the child keeps
// the parent's blocking mode.
PLAIT_API(ncclResult_t, CommSplit, (ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config)) {
  const char* call = "ncclCommSplit";
  if (newcomm == nullptr) return fail(plait::invalidArgument("newcomm (the output pointer) is NULL"), call);
  *newcomm = nullptr;  // whatever the answer: a caller may poll it
  if (Status s = checkComm(comm); !s.isOk()) return fail(s, call);
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
    return fail(plait::invalidArgument("color is " + std::to_string(color) +
                                       "; must be ≥ 0 or NCCL_SPLIT_NOCOLOR"),
                call);
  plait::CommOptions probe;
  if (Status s = readCommConfig(config, &probe); !s.isOk()) return fail(s, call);
  if (defersChild(comm))
    return deferChild(comm, newcomm, config, call, color != NCCL_SPLIT_NOCOLOR,
                      [comm, color, key] { return comm->impl->split(color, key); });
  plait::Result<plait::Communicator::SplitResult> split = plait::invalidUsage("comm is being destroyed or aborted");
  {
    CommUse use(comm);
    if (use.usable()) split = comm->impl->split(color, key);
  }
  if (!split.isOk()) return fail(split.status(), call);
  if (!split->member) return ncclSuccess;
  return initChild(comm, newcomm, split->nranks, split->id, split->rank, config, call, split->rootRank);
} PLAIT_API_END

