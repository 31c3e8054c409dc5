// cuda_executor.cc — the CUDA executor (DESIGN.md §2 step 4, §3): turns a
// device task into one launch of the ring kernels of algorithms/device/ on
// the caller's stream, with the tuner's device plan, the communicator's
// rings and its device FIFOs: in GPU memory for peers the device reaches
// (transport/p2p/), else in shared host memory registered with CUDA and
// mapped for the kernels.
//
// Errors and abort: one small block of mapped pinned memory holds the abort
// word every kernel polls (ncclCommAbort sets it) and one status word per
// channel that a failing kernel writes (time-out, peer aborted, size
// mismatch); asyncError() reads them, so ncclCommGetAsyncError sees a kernel
// failure without any host callback on the stream (CUDA graphs replay the
// same launch, and the same words).
//
// Under PLAIT_DEVICE_EMULATION the same code runs against emu/'s runtime.
// Run on one H100 and one H200 (scripts/gpu_check.sh, perf/results/device/):
// forked ranks sharing the GPU through P2P FIFOs (CUDA IPC) and through
// host-registered shared memory, every collective and point-to-point call, a
// graph capture and replay, ncclCommAbort ending a kernel stuck on a killed
// peer, compute-sanitizer memcheck clean; ranks as threads of one process
// sharing the device (device_coll_perf). UNVERIFIED ON HARDWARE: ranks on
// distinct GPUs at once (P2P between devices, PCIe ordering between them).
#include <cuda_runtime_api.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <cstring>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "algorithms/device/device_launch.h"
#include "algorithms/device/device_work.h"
#include "algorithms/types.h"
#include "base/cuda_probe.h"
#include "base/log.h"
#include "core/device_backend.h"
#include "device/net_gpu_memory.h"
#include "device/scoped_device.h"
#include "device/symmetric_memory.h"
#include "device/vmm.h"
#include "plait/status.hpp"
#include "transport/p2p/p2p_transport.h"

namespace plait {
namespace {

Status cudaFailure(cudaError_t err, const std::string& what) {
  return Status(Code::kCudaError, what + " failed: " + cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
}

DeviceColl deviceCollOf(CollType c) {
  switch (c) {
    case CollType::kAllGather: return DeviceColl::kAllGather;
    case CollType::kReduceScatter: return DeviceColl::kReduceScatter;
    case CollType::kBroadcast: return DeviceColl::kBroadcast;
    case CollType::kReduce: return DeviceColl::kReduce;
    default: return DeviceColl::kAllReduce;
  }
}

// Layout of the mapped control block: the abort word, then a status word
// per channel.
constexpr size_t kAbortWord = 0;
constexpr size_t kStatusWords = 1;
constexpr size_t kControlWords = kStatusWords + kMaxDeviceChannels;
static_assert(kDeviceChannelLimit == kMaxDeviceChannels, "the core connects at most the channels a kernel carries");
static_assert(kMaxSymmetricBlocks <= kMaxDeviceChannels, "a symmetric kernel's blocks report in the channels' words");

class CudaExecutor final : public DeviceBackend {
 public:
  explicit CudaExecutor(const DeviceBackendSetup& setup) : setup_(setup) {}
  ~CudaExecutor() override;
  Status init();
  Status enqueue(const Task& task, const DevicePlan& plan) override;
  Status enqueueP2p(const std::vector<DeviceP2pRequest>& requests, const std::vector<void*>& streams,
                    void* launchEvent) override;
  Status enqueueSymmetric(const Task& task, const SymmetricPlan& plan) override;
  Status asyncError() const override;
  void abort() override;
  bool drain(Deadline deadline) override;
  std::string description() const override { return description_; }
  std::string peerPath(int peer) const override {
    return peer >= 0 && static_cast<size_t>(peer) < peerPaths_.size() ? peerPaths_[peer] : std::string();
  }
  std::shared_ptr<SymmetricMemory> symmetric() override {
    std::call_once(symmetricOnce_, [&] { symmetric_ = device::makeSymmetricMemory(setup_.cudaDev); });
    return symmetric_;
  }
  uint64_t gpuBytes() const override { return p2p_ ? p2p_->ownBytes() : 0; }
  bool captured() const override { return captured_.load(std::memory_order_acquire); }
  Status copySync(void* dst, const void* src, size_t bytes, bool toDevice, void* stream, Deadline deadline) override;
  void joinBack(void* userStream) override {
    ScopedDevice scope(setup_.cudaDev);
    Status s = join(static_cast<cudaStream_t>(userStream), internal_);
    if (!s.isOk()) PLAIT_WARN(kColl, "rank %d: %s", setup_.rank, s.message().c_str());
  }

 private:
  Status connectP2p();
  Status mapFifo(const DeviceFifoMemory& fifo, void* p2pMemory, DeviceFifo* out);
  Status buildWork(const Task& task, const DevicePlan& plan, DeviceWork* w, int* nChannels) const;
  Status track(cudaStream_t stream);
  Status join(cudaStream_t waiter, cudaStream_t waited);
  // Launches on the communicator's stream joined with the users' (or on the
  // first user's while it is captured); `event` (a launchCompletionEvent,
  // or null) is recorded on the launch stream right after the kernel.
  template <class Launch>
  Status launchJoined(const std::vector<cudaStream_t>& users, const char* what, void* event, Launch launch);

  DeviceBackendSetup setup_;
  std::string description_;
  std::unique_ptr<P2pTransport> p2p_;  // FIFOs in GPU memory to peers our device reaches; null: none
  std::vector<std::string> peerPaths_;  // per rank: how we reach it (peerPath)
  std::once_flag symmetricOnce_;
  std::shared_ptr<SymmetricMemory> symmetric_;  // made on first use
  std::atomic<bool> captured_{false};  // a launch went into a graph (captured())
  std::vector<void*> registered_;      // host ranges this executor registered with CUDA
  std::vector<DeviceFifo> recv_, send_;  // per channel, device addresses
  std::vector<DeviceFifo> p2pSend_, p2pRecv_;  // per rank, device addresses (none for ourselves)
  DeviceFifo* p2pTables_ = nullptr;        // mapped pinned: p2pSend_ then p2pRecv_, for the kernels
  DeviceFifo* p2pTablesDevice_ = nullptr;  // its device address
  uint32_t* control_ = nullptr;        // mapped pinned host memory (kControlWords)
  uint32_t* controlDevice_ = nullptr;  // its device address
  uint64_t timeoutCycles_ = 0;
  // The communicator's own stream: every kernel runs there, joined with the
  // caller's streams, so kernels of one communicator run in call order and
  // kernels of different communicators (a group spanning several) run at once.
  cudaStream_t internal_ = nullptr;
  mutable std::mutex mu_;
  std::vector<std::pair<cudaStream_t, cudaEvent_t>> lastLaunch_;  // per stream: an event after our last kernel
};

Status CudaExecutor::init() {
  ScopedDevice scope(setup_.cudaDev);
  char bus[32] = {};
  if (cudaDeviceGetPCIBusId(bus, sizeof(bus), setup_.cudaDev) != cudaSuccess) (void)cudaGetLastError();
  description_ = "CUDA device " + std::to_string(setup_.cudaDev) + (bus[0] ? std::string(" (bus ") + bus + ")" : "");
  if (setup_.nranks > kMaxDeviceRanks)
    return invalidUsage(std::to_string(setup_.nranks) + " ranks: the device kernels carry ring orders of at most " +
                        std::to_string(kMaxDeviceRanks) + " ranks");
  // First: its exchanges are collective, so no rank may leave before them.
  PLAIT_RETURN_IF_ERROR(connectP2p());
  void* control = nullptr;
  cudaError_t err = cudaHostAlloc(&control, kControlWords * sizeof(uint32_t), cudaHostAllocMapped | cudaHostAllocPortable);
  if (err != cudaSuccess) return cudaFailure(err, "cudaHostAlloc of the abort and status words");
  control_ = static_cast<uint32_t*>(control);
  std::memset(control_, 0, kControlWords * sizeof(uint32_t));
  void* dev = nullptr;
  err = cudaHostGetDevicePointer(&dev, control, 0);
  if (err != cudaSuccess) return cudaFailure(err, "cudaHostGetDevicePointer of the abort and status words");
  controlDevice_ = static_cast<uint32_t*>(dev);
  err = cudaStreamCreateWithFlags(&internal_, cudaStreamNonBlocking);
  if (err != cudaSuccess) return cudaFailure(err, "cudaStreamCreateWithFlags");
  err = deviceCyclesForMs(setup_.cudaDev, setup_.timeoutMs, &timeoutCycles_);
  if (err != cudaSuccess) return cudaFailure(err, "reading the device clock rate");
  const size_t nChannels = setup_.recv.size();
  if (nChannels == 0 || nChannels > static_cast<size_t>(kMaxDeviceChannels) || setup_.send.size() != nChannels)
    return internalError("device executor: " + std::to_string(nChannels) + " channels");
  recv_.resize(nChannels);
  send_.resize(nChannels);
  for (size_t c = 0; c < nChannels && setup_.nranks > 1; ++c) {
    PLAIT_RETURN_IF_ERROR(mapFifo(setup_.recv[c], p2p_ ? p2p_->ringRecv(c) : nullptr, &recv_[c]));
    PLAIT_RETURN_IF_ERROR(mapFifo(setup_.send[c], p2p_ ? p2p_->ringSend(c) : nullptr, &send_[c]));
  }
  p2pSend_.resize(setup_.nranks);
  p2pRecv_.resize(setup_.nranks);
  for (int r = 0; r < setup_.nranks; ++r) {
    if (r == setup_.rank) continue;
    if (static_cast<size_t>(r) >= setup_.p2pSend.size() || static_cast<size_t>(r) >= setup_.p2pRecv.size())
      return internalError("device executor: no point-to-point FIFOs for rank " + std::to_string(r));
    PLAIT_RETURN_IF_ERROR(mapFifo(setup_.p2pSend[r], p2p_ ? p2p_->p2pSend(r) : nullptr, &p2pSend_[r]));
    PLAIT_RETURN_IF_ERROR(mapFifo(setup_.p2pRecv[r], p2p_ ? p2p_->p2pRecv(r) : nullptr, &p2pRecv_[r]));
  }
  void* tables = nullptr;
  const size_t tableBytes = 2 * static_cast<size_t>(setup_.nranks) * sizeof(DeviceFifo);
  err = cudaHostAlloc(&tables, tableBytes, cudaHostAllocMapped | cudaHostAllocPortable);
  if (err != cudaSuccess) return cudaFailure(err, "cudaHostAlloc of the point-to-point FIFO tables");
  p2pTables_ = static_cast<DeviceFifo*>(tables);
  for (int r = 0; r < setup_.nranks; ++r) {
    p2pTables_[r] = p2pSend_[r];
    p2pTables_[setup_.nranks + r] = p2pRecv_[r];
  }
  err = cudaHostGetDevicePointer(&tables, tables, 0);
  if (err != cudaSuccess) return cudaFailure(err, "cudaHostGetDevicePointer of the point-to-point FIFO tables");
  p2pTablesDevice_ = static_cast<DeviceFifo*>(tables);
  return Status::ok();
}

// Chooses how the kernels reach each peer (transport/p2p/: GPU memory when
// both devices can, else the shared host memory the core connected) and
// connects the P2P FIFOs. Every rank runs both exchanges.
Status CudaExecutor::connectP2p() {
  const int n = setup_.nranks;
  peerPaths_.assign(n, "");
  if (n == 1) return Status::ok();
  if (setup_.oob == nullptr || setup_.busIds.size() != static_cast<size_t>(n) ||
      setup_.p2pRefusal.size() != static_cast<size_t>(n))
    return internalError("device executor: no out-of-band exchange for the P2P transport");
  P2pPeerQuery query;
  query.rank = setup_.rank;
  query.nranks = n;
  query.cudaDev = setup_.cudaDev;
  query.busIds = setup_.busIds;
  query.refusal = setup_.p2pRefusal;
  PLAIT_ASSIGN_OR_RETURN(P2pPeers peers, choosePeers(*setup_.oob, query, setup_.deadline));
  P2pTransportOptions o;
  o.rank = setup_.rank;
  o.nranks = n;
  o.cudaDev = setup_.cudaDev;
  o.use = peers.use;
  for (size_t c = 0; c < setup_.rings.size() && c < setup_.recv.size(); ++c) {
    const int pos = setup_.positions[c];
    o.ringPrev.push_back(setup_.rings[c][(pos + n - 1) % n]);
    o.ringNext.push_back(setup_.rings[c][(pos + 1) % n]);
  }
  o.ring = setup_.recv.empty() ? FifoShape{} : setup_.recv[0].shape;
  for (const DeviceFifoMemory& f : setup_.p2pRecv)
    if (f.memory != nullptr) o.p2p = f.shape;
  if (!o.ring.valid()) o.ring = FifoShape{8, 128 << 10};
  if (!o.p2p.valid()) o.p2p = o.ring;
  PLAIT_ASSIGN_OR_RETURN(p2p_, P2pTransport::connect(*setup_.oob, o, setup_.deadline));
  const int myPid = static_cast<int>(::getpid());
  for (int r = 0; r < n; ++r) {
    if (r == setup_.rank) continue;
    if (peers.use[r] == 0) {
      peerPaths_[r] = "SHM (" + peers.why[r] + ")";
    } else {
      const bool sameProcess = r < static_cast<int>(setup_.pids.size()) && setup_.pids[r] == myPid;
      peerPaths_[r] = sameProcess ? "P2P/direct pointer" : "P2P/IPC";
    }
  }
  return Status::ok();
}

// The device address of one FIFO: `p2pMemory` when the edge is P2P (GPU
// memory), else the core's shared host memory, registered with CUDA (mapped,
// every context). A network connector with GPUDirect RDMA has its steps in
// this device's memory already: only its control page is host memory.
Status CudaExecutor::mapFifo(const DeviceFifoMemory& fifo, void* p2pMemory, DeviceFifo* out) {
  if (p2pMemory != nullptr) {
    out->memory = p2pMemory;
    out->nSteps = fifo.shape.nSteps;
    out->stepBytes = fifo.shape.stepBytes;
    return Status::ok();
  }
  if (fifo.memory == nullptr) return internalError("device executor: a ring FIFO has no memory");
  const size_t bytes = fifo.steps != nullptr ? kFifoControlBytes : fifo.shape.totalBytes();
  out->steps = fifo.steps;
  cudaError_t err = cudaHostRegister(fifo.memory, bytes, cudaHostRegisterMapped | cudaHostRegisterPortable);
  if (err != cudaSuccess) return cudaFailure(err, "cudaHostRegister of a " + std::to_string(bytes) + "-byte ring FIFO");
  registered_.push_back(fifo.memory);
  void* dev = nullptr;
  err = cudaHostGetDevicePointer(&dev, fifo.memory, 0);
  if (err != cudaSuccess) return cudaFailure(err, "cudaHostGetDevicePointer of a ring FIFO");
  out->memory = dev;
  out->nSteps = fifo.shape.nSteps;
  out->stepBytes = fifo.shape.stepBytes;
  return Status::ok();
}

CudaExecutor::~CudaExecutor() {
  ScopedDevice scope(setup_.cudaDev);
  for (auto& [stream, event] : lastLaunch_) (void)cudaEventDestroy(event);
  if (internal_ != nullptr) (void)cudaStreamDestroy(internal_);
  for (void* p : registered_) (void)cudaHostUnregister(p);
  p2p_.reset();
  if (control_ != nullptr) (void)cudaFreeHost(control_);
  if (p2pTables_ != nullptr) (void)cudaFreeHost(p2pTables_);
  (void)cudaGetLastError();
}

Status CudaExecutor::buildWork(const Task& task, const DevicePlan& plan, DeviceWork* w, int* nChannels) const {
  const size_t elem = typeSize(task.type);
  const int channels = std::clamp(plan.nChannels, 1, static_cast<int>(recv_.size()));
  w->coll = deviceCollOf(task.coll);
  w->sendbuff = task.sendbuff;
  w->recvbuff = task.recvbuff;
  w->count = task.count;
  w->blockStride = task.count;
  w->rank = setup_.rank;
  w->root = task.root;
  w->type = task.type;
  w->elemSize = elem;
  const bool reduces = isDeviceReduction(w->coll);
  w->op = reduces ? task.op : RedOp{};
  w->scalarPtr = reduces ? task.deviceScalar : nullptr;
  w->nranks = setup_.nranks;
  w->alignElems = std::max<size_t>(1, 64 / elem);
  const FifoShape& shape = setup_.recv[0].shape;
  // As the host executor (collectives.cc): whole elements per step, chunks a
  // multiple of the alignment and at most half the FIFO.
  w->sliceBytes = std::max(elem, std::min(plan.sliceBytes, shape.stepBytes) / elem * elem);
  const size_t sliceElems = std::max<size_t>(1, w->sliceBytes / elem);
  const size_t maxChunk = sliceElems * std::max(1, shape.nSteps / 2);
  const size_t align = w->alignElems;
  const size_t chunk = std::min(maxChunk, std::max(align, plan.chunkBytes / elem / align * align));
  w->chunkElems = std::max<size_t>(1, chunk / align * align);
  if (w->chunkElems > maxChunk) w->chunkElems = maxChunk;  // an alignment larger than half the FIFO
  w->abortFlag = controlDevice_ + kAbortWord;
  w->timeoutCycles = timeoutCycles_;
  w->channelStatus = controlDevice_ + kStatusWords;
  for (int c = 0; c < channels; ++c) {
    DeviceChannel& ch = w->channels[c];
    ch.recv = recv_[c];
    ch.send = send_[c];
    ch.position = setup_.positions[c];
    for (int p = 0; p < setup_.nranks; ++p) ch.ring[p] = static_cast<uint8_t>(setup_.rings[c][p]);
  }
  *nChannels = channels;
  if (const char* why = validateDeviceWork(*w, channels))
    return internalError(std::string("device work for ") + collName(task.coll) + " is invalid: " + why);
  return Status::ok();
}

Status CudaExecutor::enqueue(const Task& task, const DevicePlan& plan) {
  if (task.count == 0) return Status::ok();
  if (AtomicRef<uint32_t>(control_[kAbortWord]).load(mo::acquire) != 0)
    return invalidUsage("the communicator was aborted");
  ScopedDevice scope(setup_.cudaDev);
  DeviceWork work;
  int nChannels = 1;
  PLAIT_RETURN_IF_ERROR(buildWork(task, plan, &work, &nChannels));
  return launchJoined({static_cast<cudaStream_t>(task.cudaStream)}, collName(task.coll), task.launchEvent,
                      [&](cudaStream_t stream) { return launchCollective(work, nChannels, stream); });
}

// The symmetric kernels read the communicator's abort word and report in
// the channels' status words, so asyncError() and abort() cover them too.
Status CudaExecutor::enqueueSymmetric(const Task& task, const SymmetricPlan& plan) {
  if (task.count == 0) return Status::ok();
  if (AtomicRef<uint32_t>(control_[kAbortWord]).load(mo::acquire) != 0)
    return invalidUsage("the communicator was aborted");
  ScopedDevice scope(setup_.cudaDev);
  SymmetricWork w;
  w.coll = deviceCollOf(task.coll);
  w.type = task.type;
  w.elemSize = typeSize(task.type);
  w.op = isDeviceReduction(w.coll) ? task.op : RedOp{};
  w.flat = plan.flat;
  w.stride = plan.stride;
  w.nranks = plan.lsaSize;
  w.rank = plan.lsaRank;
  w.sendOffset = plan.sendOffset;
  w.recvOffset = plan.recvOffset;
  w.signalOffset = plan.signalOffset;
  w.count = task.count;
  w.alignElems = std::max<size_t>(1, 64 / w.elemSize);
  w.abortFlag = controlDevice_ + kAbortWord;
  w.timeoutCycles = timeoutCycles_;
  w.blockStatus = controlDevice_ + kStatusWords;
  const int nBlocks = std::clamp(plan.nBlocks, 1, kMaxSymmetricBlocks);
  if (const char* why = validateSymmetricWork(w, nBlocks))
    return internalError(std::string("symmetric work for ") + collName(task.coll) + " is invalid: " + why);
  return launchJoined({static_cast<cudaStream_t>(task.cudaStream)}, collName(task.coll), task.launchEvent,
                      [&](cudaStream_t stream) { return launchSymmetric(w, nBlocks, stream); });
}

// Launches on the communicator's stream after the work already on `users`,
// and makes each of `users` wait for the launch. While the first user stream
// is captured into a graph the launch goes there directly (the graph orders
// it; its replays run outside this communicator's stream).
template <class Launch>
Status CudaExecutor::launchJoined(const std::vector<cudaStream_t>& users, const char* what, void* event,
                                  Launch launch) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(users[0], &capture) != cudaSuccess) {
    (void)cudaGetLastError();
    capture = cudaStreamCaptureStatusNone;
  }
  const bool direct = capture != cudaStreamCaptureStatusNone;
  if (direct) captured_.store(true, std::memory_order_release);
  cudaStream_t stream = direct ? users[0] : internal_;
  for (size_t i = direct ? 1 : 0; i < users.size(); ++i) PLAIT_RETURN_IF_ERROR(join(stream, users[i]));
  const cudaError_t err = launch(stream);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return cudaFailure(err, std::string("launching the ") + what + " kernel");
  }
  if (event != nullptr) {
    if (cudaError_t e = cudaEventRecord(static_cast<cudaEvent_t>(event), stream); e != cudaSuccess) {
      (void)cudaGetLastError();
      return cudaFailure(e, std::string("recording the launchCompletionEvent of the ") + what + " kernel");
    }
  }
  for (size_t i = direct ? 1 : 0; i < users.size(); ++i) {
    if (DeviceGroupScope* group = DeviceGroupScope::current(); !direct && group != nullptr) {
      group->defer(this, users[i]);  // at the end of the group (ncclGroupEnd)
    } else {
      PLAIT_RETURN_IF_ERROR(join(users[i], stream));
    }
  }
  return track(stream);
}

// Lanes: every send to a peer in one, every receive from it in another
// (a FIFO has one producer and one consumer), copies in their own.
Status CudaExecutor::enqueueP2p(const std::vector<DeviceP2pRequest>& requests, const std::vector<void*>& streams,
                                void* launchEvent) {
  if (streams.empty()) return Status::ok();
  if (AtomicRef<uint32_t>(control_[kAbortWord]).load(mo::acquire) != 0)
    return invalidUsage("the communicator was aborted");
  auto work = std::make_unique<DeviceP2pWork>();  // ~3.9 KiB: not on the caller's stack
  std::vector<int> sendLane(setup_.nranks, -1), recvLane(setup_.nranks, -1);
  size_t sliceBytes = 0;
  auto add = [&](DeviceP2pKind kind, void* buff, size_t bytes, int peer, int lane) {
    if (work->nOps == kMaxDeviceP2pOps) return false;
    DeviceP2pOp& op = work->ops[work->nOps++];
    op.kind = kind;
    op.buff = buff;
    op.bytes = bytes;
    op.peer = peer;
    op.lane = static_cast<uint16_t>(lane);
    return true;
  };
  const Status tooMany = invalidUsage(
      "a group holds more than " + std::to_string(kMaxDeviceP2pOps) +
      " point-to-point transfers on device buffers (one kernel runs them all at once; a local copy counts twice); "
      "split it");
  for (const DeviceP2pRequest& q : requests) {
    if (q.bytes == 0) continue;
    if (q.kind == DeviceP2pRequest::kCopy) {
      const int lane = work->nLanes++;
      if (!add(DeviceP2pKind::kCopy, const_cast<void*>(q.src), q.bytes, setup_.rank, lane) ||
          !add(DeviceP2pKind::kCopyDst, q.dst, q.bytes, setup_.rank, lane))
        return tooMany;
      continue;
    }
    const bool send = q.kind == DeviceP2pRequest::kSend;
    if (q.peer < 0 || q.peer >= setup_.nranks || q.peer == setup_.rank)
      return internalError("device point-to-point with peer " + std::to_string(q.peer));
    int& lane = send ? sendLane[q.peer] : recvLane[q.peer];
    if (lane < 0) lane = work->nLanes++;
    if (!add(send ? DeviceP2pKind::kSend : DeviceP2pKind::kRecv, send ? const_cast<void*>(q.src) : q.dst, q.bytes,
             q.peer, lane))
      return tooMany;
    sliceBytes = (send ? p2pSend_ : p2pRecv_)[q.peer].stepBytes;  // every rank's p2p FIFOs share one shape (checked at init)
  }
  if (work->nOps == 0) return Status::ok();
  work->sliceBytes = sliceBytes;
  work->abortFlag = controlDevice_ + kAbortWord;
  work->timeoutCycles = timeoutCycles_;
  work->laneStatus = controlDevice_ + kStatusWords;
  work->sendFifos = p2pTablesDevice_;
  work->recvFifos = p2pTablesDevice_ + setup_.nranks;
  work->nranks = setup_.nranks;
  if (const char* why = validateDeviceP2pWork(*work))
    return internalError(std::string("device point-to-point work is invalid: ") + why);
  ScopedDevice scope(setup_.cudaDev);
  std::vector<cudaStream_t> users;
  for (void* st : streams) users.push_back(static_cast<cudaStream_t>(st));
  return launchJoined(users, "point-to-point", launchEvent,
                      [&](cudaStream_t stream) { return launchP2p(*work, stream); });
}

// Makes `waiter` wait for the work enqueued on `waited` so far.
Status CudaExecutor::join(cudaStream_t waiter, cudaStream_t waited) {
  cudaEvent_t event = nullptr;
  cudaError_t err = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
  if (err != cudaSuccess) return cudaFailure(err, "cudaEventCreateWithFlags");
  err = cudaEventRecord(event, waited);
  if (err == cudaSuccess) err = cudaStreamWaitEvent(waiter, event, 0);
  (void)cudaEventDestroy(event);  // released once the wait is done
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    return cudaFailure(err, "joining the streams of a group");
  }
  return Status::ok();
}

// Records an event after the launch so that drain() can wait for it. Not
// while the stream is being captured into a graph: the launch then runs when
// the graph does, which the user orders (as with NCCL, a graph must not
// outlive its communicator).
Status CudaExecutor::track(cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess) {
    (void)cudaGetLastError();
    capture = cudaStreamCaptureStatusNone;
  }
  if (capture != cudaStreamCaptureStatusNone) return Status::ok();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = std::find_if(lastLaunch_.begin(), lastLaunch_.end(), [&](const auto& e) { return e.first == stream; });
  if (it == lastLaunch_.end()) {
    cudaEvent_t event = nullptr;
    const cudaError_t err = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    if (err != cudaSuccess) return cudaFailure(err, "cudaEventCreateWithFlags");
    lastLaunch_.emplace_back(stream, event);
    it = lastLaunch_.end() - 1;
  }
  const cudaError_t err = cudaEventRecord(it->second, stream);
  if (err != cudaSuccess) return cudaFailure(err, "cudaEventRecord after a collective kernel");
  return Status::ok();
}

Status CudaExecutor::asyncError() const {
  for (int c = 0; c < kMaxDeviceChannels; ++c) {
    const uint32_t s = AtomicRef<uint32_t>(control_[kStatusWords + c]).load(mo::acquire);
    if (s == 0) continue;
    const auto status = static_cast<DeviceStatus>(s);
    const Code code = status == DeviceStatus::kAborted ? Code::kInvalidUsage : Code::kRemoteError;
    return Status(code, "a collective kernel on " + description_ + " stopped on channel " + std::to_string(c) + ": " +
                            deviceStatusName(status));
  }
  return Status::ok();
}

void CudaExecutor::abort() {
  AtomicRef<uint32_t>(control_[kAbortWord]).store(1, mo::release);
  if (p2p_) {  // peers' kernels waiting on this rank's P2P FIFOs give up too
    ScopedDevice scope(setup_.cudaDev);
    p2p_->markAborted();
  }
}

bool CudaExecutor::drain(Deadline deadline) {
  ScopedDevice scope(setup_.cudaDev);
  std::lock_guard<std::mutex> lock(mu_);
  auto sleep = std::chrono::microseconds(50);
  for (auto& [stream, event] : lastLaunch_) {
    for (;;) {
      const cudaError_t err = cudaEventQuery(event);
      if (err == cudaSuccess) break;
      if (err != cudaErrorNotReady) {  // a broken context: nothing will run any more
        (void)cudaGetLastError();
        break;
      }
      if (deadline.expired()) return false;
      std::this_thread::sleep_for(sleep);
      sleep = std::min(sleep * 2, std::chrono::microseconds((5000)));
    }
  }
  return true;
}

Status CudaExecutor::copySync(void* dst, const void* src, size_t bytes, bool toDevice, void* stream,
                              Deadline deadline) {
  if (AtomicRef<uint32_t>(control_[kAbortWord]).load(mo::acquire) != 0)
    return invalidUsage("the communicator was aborted");
  ScopedDevice scope(setup_.cudaDev);
  const auto s = static_cast<cudaStream_t>(stream);
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(s, &capture) != cudaSuccess) {
    (void)cudaGetLastError();
    capture = cudaStreamCaptureStatusNone;
  }
  if (capture != cudaStreamCaptureStatusNone)
    return invalidUsage("the stream is being captured into a CUDA graph, and this operation copies through host "
                        "memory and waits for it (PLAIT_REPRODUCIBLE on device buffers): it cannot be captured");
  cudaError_t err = cudaMemcpyAsync(dst, src, bytes, toDevice ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, s);
  if (err != cudaSuccess) return cudaFailure(err, toDevice ? "cudaMemcpyAsync to the device" : "cudaMemcpyAsync from the device");
  cudaEvent_t done = nullptr;
  err = cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
  if (err == cudaSuccess) err = cudaEventRecord(done, s);
  if (err != cudaSuccess) {
    if (done != nullptr) (void)cudaEventDestroy(done);
    return cudaFailure(err, "recording the end of a staging copy");
  }
  Status result = Status::ok();
  auto sleep = std::chrono::microseconds(20);
  for (;;) {
    err = cudaEventQuery(done);
    if (err == cudaSuccess) break;
    if (err != cudaErrorNotReady) {
      result = cudaFailure(err, "a staging copy");
      break;
    }
    if (AtomicRef<uint32_t>(control_[kAbortWord]).load(mo::acquire) != 0) {
      result = invalidUsage("the communicator was aborted during a staging copy");
      break;
    }
    if (deadline.expired()) {
      result = remoteError("a staging copy of " + std::to_string(bytes) +
                           " bytes did not finish before the deadline (the stream's earlier work still runs)");
      break;
    }
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(2000));
  }
  (void)cudaEventDestroy(done);
  return result;
}

Result<std::unique_ptr<DeviceBackend>> createCudaExecutor(const DeviceBackendSetup& setup) {
  auto executor = std::make_unique<CudaExecutor>(setup);
  PLAIT_RETURN_IF_ERROR(executor->init());
  return std::unique_ptr<DeviceBackend>(std::move(executor));
}

// The probe (base/cuda_probe.h) asks this runtime, the one the executor
// calls: with libcudart linked statically and its symbols hidden, no other
// code could find it.
cuda::RuntimeEntryPoints runtimeEntryPoints() {
  cuda::RuntimeEntryPoints e;
  e.pointerAttributes = [](void* attributes, const void* ptr) {
    return static_cast<int>(cudaPointerGetAttributes(static_cast<cudaPointerAttributes*>(attributes), ptr));
  };
  e.getLastError = [] { return static_cast<int>(cudaGetLastError()); };
  e.getDevice = [](int* device) { return static_cast<int>(cudaGetDevice(device)); };
  e.setDevice = [](int device) { return static_cast<int>(cudaSetDevice(device)); };
  e.getDeviceCount = [](int* count) { return static_cast<int>(cudaGetDeviceCount(count)); };
  e.deviceGetPCIBusId = [](char* out, int outBytes, int device) {
    return static_cast<int>(cudaDeviceGetPCIBusId(out, outBytes, device));
  };
  e.malloc = [](void** ptr, size_t bytes) { return static_cast<int>(cudaMalloc(ptr, bytes)); };
  e.free = [](void* ptr) { return static_cast<int>(cudaFree(ptr)); };
  e.errorString = [](int error) { return cudaGetErrorString(static_cast<cudaError_t>(error)); };
  e.vmmAllocate = [](void** ptr, size_t bytes, std::string* why) {
    return static_cast<int>(device::vmm::allocate(ptr, bytes, why));
  };
  e.vmmFree = [](void* ptr, std::string* why) { return static_cast<int>(device::vmm::release(ptr, why)); };
  return e;
}

// Registers the executor and its runtime when the library loads (libnccl
// links this archive whole).
[[maybe_unused]] const bool kRegistered = [] {
  cuda::installRuntime(runtimeEntryPoints());
  registerDeviceBackend(&createCudaExecutor);
  registerNetGpuMemory(&device::makeNetGpuMemory);
  return true;
}();

}  // namespace
}  // namespace plait
