// comm.h — the communicator: what one rank owns to talk to the others.
//
// A Communicator is created collectively (every rank of the id constructs
// one and calls init with its rank), owns its bootstrap, transports, channel workers and tuner,
// and runs operations. It is used by one thread at a time except abort(),
// which any thread may call while an operation runs: every wait then returns
// within milliseconds and the operation fails. After a failed operation the
// communicator is broken (its pipelines are torn): later operations fail with
// the same error until it is destroyed, as with NCCL.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <mutex>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/wait.h"
#include "core/bootstrap.h"
#include "core/channel_workers.h"
#include "core/device_backend.h"
#include "core/direct.h"
#include "core/live_ranks.h"
#include "core/op_board.h"
#include "core/op_status.h"
#include "core/reproducible.h"
#include "core/symmetric.h"
#include "core/task.h"
#include "core/tuner.h"
#include "rma/rma_service.h"
#include "algorithms/primitives.h"
#include "plait/status.hpp"
#include "transport/net/net_transport.h"
#include "transport/shm/shm_transport.h"

namespace plait {

// PLAIT_TIMEOUT in milliseconds: how long any wait for a peer may block.
int64_t operationTimeoutMs();
// PLAIT_P2P_LINE_MAX_BYTES as set here (clamped to an int32), which the
// ranks agree on at init (rank 0's), and what an agreed `setting` means: the
// largest block of an AlltoAll, Gather or Scatter sent through the line FIFOs,
// at most kLineMaxMessageBytes; the default depends on whether the
// communicator is 2 ranks with a core each (decided alike on every rank).
int32_t lineP2pSetting();
size_t lineP2pMaxBytes(int64_t setting, bool corePerRankPair);
// PLAIT_P2P_SCATTER_CMA_MIN_BYTES and _MAX_BYTES: an error naming the one
// that is negative.
Status checkP2pSettings();

// A rank of this host in some communicator, and its process.
struct PeerProcess {
  int rank = -1;
  int pid = 0;
};

// "; dead: rank 2 (pid 51)" for those of `peers` whose process is gone, and
// apart those that left after aborting or destroying (per `board`, may be
// null); `whose` follows each rank (" of the parent communicator"). Empty
// when all live.
class OpBoard;
std::string deadPeersText(const std::vector<PeerProcess>& peers, const OpBoard* board, const std::string& whose);

struct CommOptions {
  int maxChannels = -1;  // from ncclConfig_t.maxCTAs; -1: PLAIT_NCHANNELS decides
  bool blocking = true;
  std::string name;
  int cudaDev = -1;  // the caller's CUDA device at creation; -1: none
  // For a child (split, shrink, grow): the parent's local peers, so that a
  // failed init names those that died (the child's own table may not exist).
  std::vector<PeerProcess> parentPeers;
  // The bootstrap root's process when it is on this host (BootstrapOptions).
  int rootPid = 0;
  // A communicator the live-ranks mode made for the survivors of its parent
  // (core/live_ranks.h): never in that mode itself, whatever the environment.
  bool liveChild = false;
};


class Communicator {
 public:
  // Two-step creation, so a handle exists (and abort() works) while init()
  // blocks: construct, then init() collectively.
  Communicator(int rank, int nranks) : rank_(rank), nranks_(nranks) {}
  Status init(const ncclUniqueId& id, const CommOptions& options);
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  // The device API's LSA team size (nccl_device.h): the largest number that
  // divides every host's run of consecutive ranks; 1 when a host's ranks are
  // not consecutive. Its LSA rank is rank() % lsaSize().
  int lsaSize() const { return lsaSize_; }
  uint64_t opCount() const { return opCount_; }
  // One line for a status report (core/status_report.h): this rank's
  // collective and for how long, and where this host's ranks are.
  std::string statusLine() const;
  // This host's other ranks and their processes (empty before the bootstrap).
  std::vector<PeerProcess> localPeerProcesses() const;

  // Runs one operation to completion on the calling thread (and the channel
  // workers). Returns its error, or the error that broke the communicator.
  // In the live-ranks mode (PLAIT_LIVE_RANKS, core/live_ranks.h) a
  // collective goes on over the survivors when a rank dies.
  Status run(const Task& task);
  // The live-ranks mode's state, or null when the mode is off.
  const LiveRanks* liveRanks() const { return live_.get(); }
  // ncclCommRegister / ncclCommWindowRegister and their deregistration
  // (core/direct.h). Thread-safe. Arguments are checked by the caller.
  Status registerBuffer(void* buff, size_t bytes, RegistrationKind kind, void** handle) {
    if (!direct_) return invalidUsage("the communicator is not initialised");
    return direct_->registerBuffer(buff, bytes, kind, handle);
  }
  Status deregisterBuffer(void* handle, RegistrationKind kind) {
    if (!direct_) return invalidUsage("the communicator is not initialised");
    return direct_->deregisterBuffer(handle, kind);
  }
  // ncclCommWindowRegister: with NCCL_WIN_COLL_SYMMETRIC on a communicator
  // whose ranks can use the device API, collective (core/symmetric.h; *win
  // is the device ncclWindow_vidmem); otherwise, as NCCL, a local
  // registration. The window also counts as a registration of the range.
  Status registerWindow(void* buff, size_t bytes, int flags, void** win);
  Status deregisterWindow(void* win);
  // The buffer a window of this communicator was registered with.
  Result<void*> windowBuffer(void* win) const;
  // ncclDevCommCreate (collective) / ncclDevCommDestroy (local).
  Status createDevComm(const ncclDevCommRequirements& reqs, ncclDevComm* out);
  Status destroyDevComm(const ncclDevComm& devComm);
  // Runs the operations of one group (ncclGroupEnd): core/executor.cc says
  // in which order.
  Status runGroup(const std::vector<Task>& tasks);
  // The error that broke the communicator, if any (ncclCommGetAsyncError).
  Status asyncError() const;
  // Thread-safe; idempotent. Unblocks every wait of this communicator and
  // tells peers (through the shared FIFOs) that this rank is going away.
  void abort();
  bool aborted() const { return userAborted_.load(std::memory_order_acquire); }
  // ncclCommRevoke (comm_shrink.cc): operations in flight fail fast (on the
  // peers too: the FIFOs are marked aborted), later ones are refused; the
  // bootstrap keeps working, so split and shrink can follow. Thread-safe.
  Status revoke();
  bool revoked() const { return revoked_.load(std::memory_order_acquire); }
  // ncclCommSplit's collective part over this communicator: every rank
  // calls it with its color (< 0: NCCL_SPLIT_NOCOLOR) and key; each rank
  // with a color learns its rank and size in the new communicator and the
  // id to create it with (the id's root runs in the new rank 0's process).
  struct SplitResult {
    bool member = false;
    int rank = 0;
    int nranks = 0;
    ncclUniqueId id{};
    int rootRank = -1;  // the rank of this communicator whose process hosts the child's bootstrap root
  };
  Result<SplitResult> split(int color, int key);
  // ncclCommShrink's part over this communicator, called by every rank not
  // in `excluded` (sorted, checked by the caller): the lowest survivor makes
  // the new id and sends it to the others point to point over the
  // bootstrap (the excluded ranks may be dead), with the list, which each
  // survivor compares with its own. With `abortInFlight`
  // (NCCL_SHRINK_ABORT) the communicator is revoked first.
  Result<SplitResult> shrink(const std::vector<int>& excluded, bool abortInFlight);
  // ncclCommGetUniqueId (comm_grow.cc): an id whose bootstrap root runs in
  // this process, for growing this communicator. One at a time: a second
  // call before ncclCommGrow consumed the first is refused. Thread-safe.
  Result<ncclUniqueId> makeGrowId();
  // ncclCommGrow's collective step over this communicator: exactly one rank
  // passes `id` (the one makeGrowId gave it), every rank the same
  // `newNranks` (> nranks()); every rank returns the id. Consumes it.
  Result<ncclUniqueId> agreeOnGrow(const ncclUniqueId* id, int newNranks);
  // The predicted time of an operation (ncclGroupSimulateEnd).
  double estimateUs(const Task& task) const;
  // ncclCommSuspend / ncclCommResume (comm_suspend.cc), collective. With
  // kSuspendMem, suspend waits for this rank's kernels, agrees with every
  // rank, and releases the device path's connections (FIFOs, P2P blocks,
  // network steps in GPU memory); operations are then refused until resume
  // connects them again. Without it, nothing happens (as NCCL).
  static constexpr int kSuspendMem = 0x01;
  Status suspend(int flags);
  Status resume();
  bool suspended() const { return suspended_.load(std::memory_order_acquire); }
  // One-sided operations on host memory (comm_rma.cc, rma/rma_service.h):
  // ncclPutSignal (bytes 0 with a null window: ncclSignal) and
  // ncclWaitSignal. The first such call on a communicator connects the
  // agent, collectively: every rank's first one-sided call (any of the
  // three) meets the others' there, as in NCCL. `win` is this rank's handle
  // of the window; the peer resolves the same registration of its own.
  Status putSignal(const void* src, size_t bytes, int peer, void* win, size_t offset, bool signal);
  Status waitSignals(const std::vector<rma::SignalWait>& waits);
  // The C++ API's any-of wait: the index of the wait that was met.
  Result<int> waitAnySignal(const std::vector<rma::SignalWait>& waits);
  // plaitTestSignal: never blocks; true (consumed) when all were met.
  Result<bool> testSignals(const std::vector<rma::SignalWait>& waits);
  // plaitGet: `bytes` at `offset` of peer's part of window `win` into dst.
  Status get(void* dst, size_t bytes, int peer, void* win, size_t offset);
  // Bytes of a window from `offset` on, or why `win` is not one.
  Result<size_t> windowBytesFrom(void* win, size_t offset) const;
  // The registration serial that names `win` on every rank.
  Result<uint64_t> windowSerial(void* win) const;
  // ncclCommMemStats: GPU memory this communicator allocated itself.
  struct MemStats {
    uint64_t suspendable = 0;  // the device path's connections (kept as they were while suspended)
    uint64_t persistent = 0;   // the device API's structures and signal memory
    bool suspended = false;
  };
  MemStats memStats() const;

 private:
  friend class LiveRanks;  // runs on this communicator, agrees over its bootstrap
  // run() without the live-ranks mode.
  Status runHere(const Task& task);
  Status initSteps(const ncclUniqueId& id, const CommOptions& options);
  Result<int> agreeOnSettings(int wantChannels, Deadline deadline);
  Status connectTransports(Deadline deadline, int nChannels);
  // The CUDA executor's part of init and of each device task (device_path.cc).
  Status connectDevice(OobExchange& oob, const ShmTransportOptions& hostOptions, const std::vector<uint64_t>& hostOf,
                       Deadline deadline);
  Status deviceUnavailableReason(const std::vector<DeviceIdentity>& ids) const;
  std::vector<std::string> p2pRefusals(const std::vector<DeviceIdentity>& ids) const;
  std::shared_ptr<NetGpuMemory> netGpuMemory(const std::vector<uint64_t>& hostOf) const;
  Status runOnDevice(const Task& task);
  // The device API's space, made collectively on first use (comm_windows.cc).
  Status ensureSymmetric();
  Status ensureRma();
  // Records a new window under the next registration serial (one-sided
  // puts name windows by it) and, for host memory, in rmaWindows_.
  void noteWindow(void* win, void* buff, size_t bytes);
  void forgetWindow(void* win);
  std::string deviceApiRefusal() const;
  // How `task` runs as a symmetric kernel (its buffers in windows, every rank
  // in one LSA team), or nothing: then it runs on the FIFO rings.
  std::optional<SymmetricPlan> symmetricPlan(const Task& task) const;
  Status runDeviceP2p(const std::vector<Task>& tasks);
  void releaseDevice();
  uint64_t deviceConnectionBytes() const;
  // Every rank's answer to one suspend/resume step; the first refusal is
  // every rank's error.
  Status agreeOnSuspend(const char* call, const Status& mine, int flags, Deadline deadline);
  Status execute(const Task& task);
  template <class Body> Status guarded(const char* what, Body body);
  Status runRingCollective(const Task& task, const Plan& plan);
  Status runRingCollectiveChannel(const Task& task, const Plan& plan, int channel);
  HostPrimitives makePrimitives(const Task& task, const Plan& plan, int channel) const;
  size_t ringChunkElems(const Plan& plan, size_t sliceBytes, size_t elem, size_t align) const;
  Status runLocalCopy(const Task& task);
  // firstWaits: `first` may wait for peers (it runs other collectives), so
  // no send of the batch may need this rank until it returns.
  Status runP2p(std::span<const Task> tasks, const std::function<Status()>& first = nullptr,
                bool firstWaits = true);
  Status runLineP2p(const Task& task);
  // The one-shot collectives (core/one_shot.cc).
  Status runOneShot(const Task& task, size_t bytes);
  Status runOneShotAllReduce(const Task& task, size_t bytes);
  Status runOneShotLines(const Task& task, size_t bytes, ReduceCopyFn fn, bool preOp);
  Status runOneShotCopy(const Task& task);
  Status runOneShotReduce(const Task& task);
  // Halving-doubling AllReduce, binomial-tree Broadcast and Reduce (core/log_depth.cc).
  Status runLogDepth(const Task& task, const Plan& plan);
  // The reproducible mode (core/reproducible.cc, PLAIT_REPRODUCIBLE).
  // out = inputs[0] op inputs[1] op ... op inputs[n-1], left to right (or,
  // in the exact mode, their exact sum rounded once): the same on every rank
  // and path. PreMulSum inputs come scaled (and rounded) by their own rank.
  void foldInRankOrder(const Task& task, const void* const* inputs, void* out, size_t count);
  bool reproducibleOrder(const Task& task) const;
  Status runReproducible(const Task& task, size_t bytes);
  Status runOrderedExchange(const Task& task);
  Status runReproducibleOnDevice(const Task& task);
  Status exchangeAndFold(const Task& task, const std::vector<size_t>& offs, const std::vector<size_t>& counts,
                         size_t slotElems, void* dst);
  void breakWith(const Status& status);
  void abortParts();
  // Collective numbering and the local peers' view of it (core/op_board.h).
  void announce(const Task& task);
  void announceBatch();
  void noteFirstRegistration();
  Result<bool> directWorthAgreeing(const Task& task);
  Status runGroupTasks(const std::vector<Task>& tasks);
  Status checkAgreement() const;
  WaitCheck agreementCheck() const;
  Status withDeadPeers(Status s) const;
  std::string whereRanksAre() const;
  void logPlanOnce(const Task& task, size_t bytes, const Plan& plan);
  Status unrunnableSelection(const Task& task, size_t bytes) const;
  void tagged(const Task& task, size_t bytes, const char* algo) const;

  int rank_ = 0;
  int nranks_ = 1;
  int lsaSize_ = 1;
  std::string name_;
  std::atomic<uint32_t> abortFlag_{0};  // every wait of the data path watches it (abort, revoke)
  std::atomic<bool> userAborted_{false};
  std::atomic<bool> revoked_{false};
  uint32_t shrinks_ = 0;  // shrinks started, counted alike on the survivors (tags their messages)
  std::mutex partsMu_;       // orders abort() against init() assigning the parts below
  bool initRunning_ = false;
  bool initFailed_ = false;  // set by init(): the destructor then sweeps dead ranks' segments it cannot name
  int64_t timeoutMs_ = 0;
  uint64_t opCount_ = 0;
  std::unique_ptr<Bootstrap> bootstrap_;
  std::unique_ptr<NetTransport> net_;  // edges to other hosts; null when all ranks share one
  std::unique_ptr<ShmTransport> shm_;
  std::unique_ptr<Tuner> tuner_;
  HostCosts hostCosts_;  // rank 0's PLAIT_HOST_COSTS (or the defaults), agreed at init
  std::unique_ptr<ChannelWorkers> workers_;
  std::unique_ptr<DirectPath> direct_;
  std::unique_ptr<OpBoard> board_;  // null without local peers
  std::unique_ptr<OpStatus> status_;  // null without ranks on other hosts
  OpBoard::Line announced_;  // this rank's current collective, for status_ and status reports
  std::atomic<uint64_t> announcedNs_{0};
  std::atomic<bool> inCall_{false};  // an operation runs on this communicator (status reports)
  int cudaDev_ = -1;
  std::vector<DeviceIdentity> devices_;   // per rank, exchanged at init
  int deviceChannels_ = 0;                // ring channels the device path connected
  std::unique_ptr<ShmTransport> deviceShm_;  // ring FIFOs only kernels use (host ones cache their counters)
  std::unique_ptr<NetTransport> deviceNet_;  // the kernels' edges to other hosts, with their own proxy
  std::unique_ptr<DeviceBackend> device_;    // null: device buffers are refused with deviceUnavailable_
  std::unique_ptr<SymmetricSpace> symmetric_;  // the device API's windows; made on first use
  struct WindowNote {
    uint64_t serial = 0;
    char* base = nullptr;
    size_t bytes = 0;
    bool host = false;  // host memory: one-sided puts may land in it
  };
  mutable std::mutex windowsMu_;
  uint64_t windowSerial_ = 0;              // windows registered so far, counted alike on every rank
  std::map<void*, WindowNote> windowNotes_;  // by handle
  rma::WindowTable rmaWindows_;            // host windows the one-sided agent may write, by serial
  std::unique_ptr<rma::Service> rma_;      // made by the first one-sided call (under partsMu_)
  std::mutex rmaMu_;                       // one-sided setup
  Status deviceUnavailable_;
  ShmTransportOptions deviceHostOptions_;  // what connectDevice got at init (resume connects again)
  std::vector<uint64_t> hostOf_;          // per rank: its host
  std::atomic<bool> suspended_{false};
  uint64_t suspendedBytes_ = 0;           // deviceConnectionBytes() when suspended
  std::mutex growMu_;
  std::optional<ncclUniqueId> growId_;    // made by makeGrowId, not yet consumed by a grow
  uint64_t collSeq_ = 0;            // collectives (not Send/Recv) started, counted alike on every rank
  uint64_t publishedSeq_ = 0;       // the last collSeq_ announced on the op board
  mutable std::atomic<bool> disagreed_{false};  // board_ saw ranks in different collectives  // registrations; zero-copy collectives when every rank is local
  std::vector<int> ringPositions_;  // per channel: this rank's position in that ring
  std::vector<std::vector<int>> rings_;  // per channel: ranks in ring order
  std::vector<int> pids_;                // per rank (liveness checks)
  bool oversubscribed_ = false;          // more local ranks than cores
  bool alltoallCma_ = false;             // AlltoAll may copy by cross-memory attach (PLAIT_ALLTOALL_CMA)
  bool alltoallPut_ = false;             // AlltoAll's P2P_PUT_* blocks are written instead (ranks share cores)
  bool dedicatedCores_ = false;          // local ranks on disjoint CPUs (base/cpu_mask.h)
  // 2 ranks on one host with a core each, judged on their CPU masks as
  // exchanged (never on a rank's own fallback guess): the same on both.
  bool corePerRankPair_ = false;
  int32_t p2pLineSetting_ = -1;  // PLAIT_P2P_LINE_MAX_BYTES as agreed (rank 0's)
  bool cma_ = false;                     // local ranks may read each other's memory (process_vm_readv)
  std::vector<char> scratch_;     // one-shot in-place staging
  std::vector<const void*> oneShotInputs_;
  std::vector<unsigned char> oneShotStage_;  // nranks x kLineMaxMessageBytes
  size_t lineP2pMaxBytes_ = 0;  // AlltoAll, Gather, Scatter blocks up to this go by line FIFOs (0: never)
  int reproducible_ = 0;                 // PLAIT_REPRODUCIBLE, agreed at init: kReproducible*
  bool liveMode_ = false;                // PLAIT_LIVE_RANKS, agreed at init (never on a live child)
  std::unique_ptr<LiveRanks> live_;      // made at init when liveMode_
  std::vector<char> reproScratch_;       // the ordered exchange's receive slots (made on first use)
  std::vector<char> deviceStage_;        // device buffers' host copies in the reproducible mode
  mutable std::mutex errorMu_;
  Status brokenBy_;
  std::atomic<bool> broken_{false};
  uint64_t loggedSizes_[10] = {0};  // per CollType: log2 sizes already shown
};

}  // namespace plait
