// device_backend.h — what the core asks of the CUDA executor (src/device/),
// without knowing CUDA: the communicator hands it the rings and the FIFO
// memory at init, then one device task at a time; the backend turns each into
// a kernel launch on the caller's stream and reports kernel-side failures.
//
// The core is built without CUDA headers. Builds with the executor
// (PLAIT_WITH_CUDA or PLAIT_DEVICE_EMULATION) link src/device/, which
// registers its factory from a static initialiser; other builds have none and
// device buffers are refused by the API with a message that says so.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "core/task.h"
#include "plait/status.hpp"
#include "transport/fifo.h"
#include "transport/oob.h"

namespace plait {

class NetGpuMemory;  // transport/net/net_transport.h

// One end of a ring FIFO in host memory shared with the peer (transport/
// fifo.h's layout). The backend maps it for the device.
struct DeviceFifoMemory {
  void* memory = nullptr;
  FifoShape shape;
  // Device memory holding the step buffers instead (a network connector
  // with GPUDirect RDMA): then only the control page at `memory` is host
  // memory to map.
  void* steps = nullptr;
};

// Most channels (thread blocks per rank and kernel) a device collective may
// use: algorithms/device's kMaxDeviceChannels (the executor checks they agree).
constexpr int kDeviceChannelLimit = 32;

struct DeviceBackendSetup {
  int rank = 0;
  int nranks = 1;
  int cudaDev = -1;                   // the communicator's device
  std::vector<std::vector<int>> rings;  // per channel: ranks in ring order
  std::vector<int> positions;           // per channel: this rank's position in rings[c]
  std::vector<DeviceFifoMemory> recv;   // per channel: from the ring predecessor (our memory)
  std::vector<DeviceFifoMemory> send;   // per channel: to the ring successor (its memory, mapped here)
  std::vector<DeviceFifoMemory> p2pSend;  // per rank: to that rank (its memory); none for ourselves
  std::vector<DeviceFifoMemory> p2pRecv;  // per rank: from that rank (our memory); none for ourselves
  int64_t timeoutMs = 0;                // PLAIT_TIMEOUT: the kernel-side deadline of each wait
  // For the backend's own connections (FIFOs in GPU memory between devices
  // that reach each other, transport/p2p/): the exchange is collective, and
  // every rank's factory runs it the same way, failures included.
  OobExchange* oob = nullptr;
  Deadline deadline = Deadline::never();
  std::vector<std::string> busIds;      // per rank: its device's PCI bus id
  std::vector<int> pids;                // per rank: its process (threads of ours share memory by address)
  std::vector<std::string> p2pRefusal;  // per rank: why P2P to it is forbidden (NCCL_P2P_DISABLE/LEVEL), "" if not
};

// One send, receive or local copy of a group's point-to-point batch on
// device buffers (AlltoAll, Gather and Scatter decomposed into these).
struct DeviceP2pRequest {
  enum Kind : uint8_t { kSend, kRecv, kCopy } kind = kCopy;
  int peer = -1;
  const void* src = nullptr;  // kSend, kCopy
  void* dst = nullptr;        // kRecv, kCopy
  size_t bytes = 0;
};

// How the tuner wants one device collective run (core/tuner.h's ring plan).
struct DevicePlan {
  int nChannels = 1;
  size_t sliceBytes = 0;
  size_t chunkBytes = 0;
};

// Where a symmetric collective (algorithms/device/symmetric_work.h) finds
// its buffers: the LSA team's flat range (core/symmetric.h) and the offsets
// of the send buffer, the receive buffer and the signal window in each
// rank's share of it.
struct SymmetricPlan {
  char* flat = nullptr;
  size_t stride = 0;
  int lsaSize = 1;
  int lsaRank = 0;
  size_t sendOffset = 0;
  size_t recvOffset = 0;
  size_t signalOffset = 0;
  int nBlocks = 1;
};

// A device buffer of this process described for a peer process
// (src/device/peer_memory.h): plain bytes, sent as they are.
struct DeviceRangeExport {
  uint32_t kind = 0;            // 1: CUDA VMM (a POSIX fd travels beside it); 2: CUDA IPC (the handle below)
  int32_t device = -1;          // the owner's CUDA device
  uint64_t ownerBase = 0;       // the allocation's address in the owner (for messages)
  uint64_t allocationSize = 0;  // the whole allocation as mapped
  uint64_t offset = 0;          // of the range inside the allocation
  uint64_t size = 0;            // of the range
  uint8_t ipc[64] = {};         // kind 2: the cudaIpcMemHandle_t
};

// A peer's allocation mapped into this process.
struct DeviceMapping {
  void* range = nullptr;    // the peer's buffer, as this process addresses it
  void* mapping = nullptr;  // where the allocation is mapped
  size_t mappingSize = 0;
  uint32_t kind = 0;
  bool reserved = false;  // the mapping reserved its own address space (unmapping frees it)
};

// What the device API's windows (core/symmetric.h) ask of CUDA: address
// space, VMM memory shared with the LSA team's processes, and the small
// structures kernels read. Thread-safe.
class SymmetricMemory {
 public:
  virtual ~SymmetricMemory() = default;
  // OK when this rank's device can map peers' memory at chosen addresses
  // (CUDA VMM with POSIX fd handles); else what is missing.
  virtual Status probe() = 0;
  // The driver's allocation granularity (address space and mappings are multiples of it).
  virtual size_t granularity() = 0;
  // The device's memory rounded up to 4 GiB: NCCL's default share of each
  // LSA rank in the flat window space.
  virtual size_t deviceMemoryBytes() = 0;
  virtual Result<void*> reserve(size_t bytes) = 0;
  virtual void unreserve(void* at, size_t bytes) = 0;
  // Describes [ptr, ptr + bytes) of this process's device memory for a
  // peer; *fd gets a new POSIX fd for VMM memory (the caller closes it).
  virtual Result<DeviceRangeExport> exportRange(const void* ptr, size_t bytes, int* fd) = 0;
  // Maps a peer's allocation (VMM: at `at`, or anywhere when null).
  virtual Result<DeviceMapping> map(const DeviceRangeExport& range, int fd, void* at) = 0;
  virtual Status unmap(const DeviceMapping& mapping) = 0;
  // Device memory holding a copy of host[0, bytes) (structures kernels read).
  virtual Result<void*> upload(const void* host, size_t bytes) = 0;
  virtual void freeUpload(void* device) = 0;
  // Zeroed VMM memory of at least `bytes` on this rank's device, and its release.
  virtual Result<void*> allocateZeroed(size_t bytes) = 0;
  virtual Status release(void* ptr) = 0;
  // Device memory held now through upload() and allocateZeroed() (not
  // mappings of peers' memory): ncclCommMemStats' persistent bytes.
  virtual uint64_t bytesHeld() const = 0;
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  // Enqueues `task` (a collective on device buffers, task.cudaStream) and
  // returns without waiting for it. Errors found before the launch are
  // returned; failures inside the kernel surface through asyncError().
  virtual Status enqueue(const Task& task, const DevicePlan& plan) = 0;
  // Enqueues a group's sends, receives and copies (in call order) as one
  // launch, so that no send waits on a receive of a later launch. The
  // operations came on `streams` (one or more; as in NCCL, all of them are
  // joined: the launch waits for the work before it on each, and each waits
  // for the launch).
  // `launchEvent` (a cudaEvent_t, or null) is recorded once the kernel is
  // launched (ncclCollConfig_t.launchCompletionEvent); enqueue() and
  // enqueueSymmetric() take it from Task::launchEvent.
  virtual Status enqueueP2p(const std::vector<DeviceP2pRequest>& requests, const std::vector<void*>& streams,
                            void* launchEvent) = 0;
  // Enqueues `task` (AllReduce, AllGather or ReduceScatter whose buffers lie
  // in windows, every rank in one LSA team) as a symmetric kernel: loads and
  // stores into the peers' window memory, no FIFO. Same asynchrony and
  // error reporting as enqueue().
  virtual Status enqueueSymmetric(const Task& task, const SymmetricPlan& plan) = 0;
  // The first failure a kernel reported (a time-out, a peer that aborted),
  // or OK. Thread-safe; never blocks.
  virtual Status asyncError() const = 0;
  // Makes every running and later kernel of this communicator give up at
  // its next poll. Thread-safe; idempotent.
  virtual void abort() = 0;
  // Waits until every kernel launched so far has ended, at most until
  // `deadline`; false if some still run (their memory must then be leaked,
  // not freed under them).
  virtual bool drain(Deadline deadline) = 0;
  // Makes `userStream` wait for everything this backend launched so far
  // (the join-back of a group's launches; see DeviceGroupScope).
  virtual void joinBack(void* userStream) = 0;
  // "CUDA device 3 (bus 0000:41:00.0)": for logs and errors.
  virtual std::string description() const = 0;
  // How this rank's kernels reach `peer`: "P2P/IPC", "P2P/direct pointer",
  // or "SHM (<why not P2P>)". For the INFO line per peer.
  virtual std::string peerPath(int peer) const = 0;
  // The device API's memory operations (never null for a live backend).
  // Shared: the device API's windows keep it while the backend is
  // re-created (ncclCommSuspend / ncclCommResume).
  virtual std::shared_ptr<SymmetricMemory> symmetric() = 0;
  // Device memory this backend allocated for its FIFOs (P2P blocks): what
  // ncclCommSuspend releases, with the network steps in GPU memory.
  virtual uint64_t gpuBytes() const = 0;
  // Some kernel went into a CUDA graph being captured: the graph holds this
  // backend's addresses, so the backend must outlive it (no suspend).
  virtual bool captured() const = 0;
  // Copies `bytes` from device memory to host memory (toDevice: the other
  // way) in the order of `stream` (a cudaStream_t; null: CUDA's default
  // stream): the copy waits for the work enqueued on it before, and the
  // call returns once the copy is done, at the latest at `deadline`; abort()
  // ends the wait. Refused while `stream` is being captured into a graph.
  // The reproducible mode's staging (core/reproducible.cc).
  virtual Status copySync(void* dst, const void* src, size_t bytes, bool toDevice, void* stream,
                          Deadline deadline) = 0;
};

using DeviceBackendFactory = Result<std::unique_ptr<DeviceBackend>> (*)(const DeviceBackendSetup& setup);

// GPU memory for the device path's network step buffers (GPUDirect RDMA,
// transport/net/net_transport.h) on `cudaDev`, or null with *why set (no
// dmabuf export on this device or driver).
using NetGpuMemoryFactory = std::shared_ptr<NetGpuMemory> (*)(int cudaDev, std::string* why);
NetGpuMemoryFactory netGpuMemoryFactory();
void registerNetGpuMemory(NetGpuMemoryFactory factory);  // by src/device/, as registerDeviceBackend

// The factory the build registered, or null when it has no CUDA executor.
DeviceBackendFactory deviceBackendFactory();
// Called once by src/device/ at static initialisation.
void registerDeviceBackend(DeviceBackendFactory factory);

// While a DeviceGroupScope lives on this thread (ncclGroupEnd), backends
// launch every kernel of the group on their communicators' own streams after
// the work already on the user's stream, but make the user's stream wait for
// them only when the scope ends: so kernels of several communicators in one
// group run at once rather than one after another (which deadlocks when
// ranks list the communicators in different orders).
class DeviceGroupScope {
 public:
  DeviceGroupScope();
  ~DeviceGroupScope();
  DeviceGroupScope(const DeviceGroupScope&) = delete;
  DeviceGroupScope& operator=(const DeviceGroupScope&) = delete;
  // The scope the calling thread works for (null: none). Worker threads of
  // a group adopt their parent's with Adopt.
  static DeviceGroupScope* current();
  class Adopt {
   public:
    explicit Adopt(DeviceGroupScope* scope);
    ~Adopt();
    Adopt(const Adopt&) = delete;
    Adopt& operator=(const Adopt&) = delete;

   private:
    DeviceGroupScope* saved_;
  };
  void defer(DeviceBackend* backend, void* userStream);

 private:
  DeviceGroupScope* outer_;
  std::mutex mu_;
  std::vector<std::pair<DeviceBackend*, void*>> joins_;
};

// What every rank tells the others about its device at init (through the
// bootstrap), so that each can choose how to reach each peer.
struct DeviceIdentity {
  int32_t cudaDev = -1;       // -1: no device (no CUDA executor, no runtime, or no device)
  int32_t usable = 0;         // 1: this rank can run device collectives
  int32_t allowShared = 0;    // 1: PLAIT_ALLOW_SHARED_DEVICE=1 here (sharing needs every rank's yes)
  int32_t reserved = 0;
  char busId[32] = {};        // "0000:41:00.0"; empty when unknown
};

}  // namespace plait
