// net_transport.h — connectors to ranks on other hosts, over the network
// chosen by net_plugin.h, progressed by a proxy thread.
//
// The schedule talks to a network peer exactly as to a shared-memory one:
// through a FifoSender / FifoReceiver (transport/fifo.h). The FIFO memory is
// ordinary memory of this process, registered with the network:
// - send connector: the schedule writes steps into a local FIFO; the proxy
//   is that FIFO's receiving end: it isend()s each posted step (several in
//   flight) and releases the step when the send completed;
// - receive connector: the proxy is the sending end of a local FIFO: it
//   posts irecv()s ahead into every free step and post()s each step whose
//   receive completed, with the received size.
// Flow control is the FIFO depth: a step is only sent when the schedule
// posted it, and only received into when the schedule released it. Ring
// connectors carry payload sizes only; point-to-point connectors also carry
// the step's full size word (core/p2p_batch.cc marks a message's last step in it)
// as a second 8-byte message per step.
//
// Failures: when the network reports an error on a connector (connection
// closed, reset, a timeout in the network), the proxy marks the schedule's
// end with "connection to <address> closed by the peer" (the network's own
// text), so the schedule's wait fails with kRemoteError
//   "rank 3: connection to 10.0.0.2:41000 closed by the peer during ring receive".
// Threading: connect() and the accessors on the communicator's threads;
// abort() from any thread; the proxy thread owns the network comms.
#pragma once

#include <atomic>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "base/wait.h"
#include "plait/status.hpp"
#include "transport/fifo.h"
#include "transport/net/net.h"
#include "transport/oob.h"
#include "transport/shm/shm_transport.h"

namespace plait {

// GPU memory a NIC can read and write directly (GPUDirect RDMA), given by
// the CUDA side (src/device/) to the device path's network connectors for
// their step buffers. Thread-safe.
class NetGpuMemory {
 public:
  struct Buffer {
    void* ptr = nullptr;  // device address of the buffer
    size_t bytes = 0;
    int fd = -1;          // a dmabuf of the allocation holding it (owned by the buffer)
    uint64_t offset = 0;  // of ptr inside that dmabuf
  };
  virtual ~NetGpuMemory() = default;
  // "CUDA device 0 (bus ...)", for the INFO line.
  virtual std::string description() const = 0;
  // Zeroed device memory of `bytes` with its dmabuf.
  virtual Result<Buffer> allocate(size_t bytes) = 0;
  virtual void release(const Buffer& buffer) = 0;
  // Makes the network's completed writes into device memory visible to
  // kernels that read it next (cuFlushGPUDirectRDMAWrites): the proxy calls
  // it before it posts a step received there, when the network's own iflush
  // had nothing to do.
  virtual Status flush() = 0;
  // Whether the network device `props` may use GPUDirect RDMA with this GPU
  // (NCCL_NET_GDR_LEVEL against the topology); nullopt when the topology
  // does not know them both.
  virtual std::optional<bool> nearEnough(const PlaitNetProperties& props) const = 0;
};

struct NetTransportOptions {
  int nChannels = 1;
  FifoShape ring{8, 128 << 10};
  FifoShape p2p{8, 64 << 10};
  std::vector<int> ringPrev;  // per channel: the rank this rank receives from
  std::vector<int> ringNext;  // per channel: the rank this rank sends to
  std::vector<bool> remote;   // per rank: on another host (needs the network)
  int localRank = 0;          // index among this host's ranks (spreads ranks over devices)
  const std::atomic<uint32_t>* abortFlag = nullptr;
  bool oversubscribed = false;
  int64_t waitTimeoutMs = -1;
  // The device path's: step buffers in GPU memory where the network and the
  // GPU allow it (PLAIT_NET_GDR); null: host memory.
  std::shared_ptr<NetGpuMemory> gpu;
  // The host schedules' connectors (not the device path's, whose control
  // pages kernels write): ring sends may leave their payload in the user's
  // buffers where the network needs no registration (FifoSender::
  // postReference; PLAIT_NET_SEND_FROM_BUFFERS).
  bool sendFromBuffers = false;
};

// One direction of one network connection (internal to the transport; the
// schedule sees only front()).
class NetConnector {
 public:
  // `gpu`: put the step buffers in its memory (GPUDirect RDMA); the control
  // page stays in host memory.
  NetConnector(bool sending, int peer, FifoShape shape, bool trailer, int tag, WaitContext ctx,
               std::shared_ptr<NetGpuMemory> gpu = nullptr);
  ~NetConnector();
  NetConnector(const NetConnector&) = delete;
  NetConnector& operator=(const NetConnector&) = delete;

  // Proxy thread: moves what can move without blocking; sets *moved if
  // anything did. A network error marks the schedule's end failed.
  void progress(const PlaitNetV8& net, bool* moved);
  // Allocates the FIFO memory (GPU step buffers may fail to come).
  Status allocate();
  // Registers the FIFO memory with `comm` and takes ownership of the comm.
  Status attach(const PlaitNetV8& net, void* comm);
  void close(const PlaitNetV8& net);  // proxy thread or after it stopped
  void abortFront();                  // any thread: the schedule's end gives up
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // Why it failed (the network's text), or "" while it has not; any thread.
  // Empty too when the schedule itself gave up the connector (letGo).
  std::string failure() const { return failed() ? failure_ : std::string(); }
  // Proxy thread: every step the schedule posted has been sent (true for
  // receive connectors and failed ones).
  bool drained() const;

  bool sending() const { return sending_; }
  int peer() const { return peer_; }
  // Bytes of GPU memory holding this connector's steps (0 without GPUDirect).
  size_t gpuBytes() const { return gpu_ ? gpuSteps_.bytes : 0; }
  FifoSender* frontSender() { return frontSend_.get(); }
  FifoReceiver* frontReceiver() { return frontRecv_.get(); }

 private:
  void progressSend(const PlaitNetV8& net, bool* moved);
  void progressRecv(const PlaitNetV8& net, bool* moved);
  // Tests both parts of the oldest step; true when both completed.
  bool testStep(const PlaitNetV8& net, int slot, int* size);
  void fail(int code);
  void failWith(std::string why);  // marks the schedule's end failed with `why`
  void letGo();                    // send side: the schedule gave up (abandonReferences)
  // Receive side: the FIFO size word for a completed step of `size` bytes;
  // false (and the connector failed) when the peer sent an invalid one.
  bool checkedWord(int slot, int size, uint64_t* word);
  // Receive side, GPU steps: the network's iflush (or the GPU's flush) of
  // step `slot` has completed; false while it is in flight or failed.
  bool flushed(const PlaitNetV8& net, int slot);
  char* step(int slot) const { return data_ + static_cast<size_t>(slot) * shape_.stepBytes; }
  // The registration the step buffers are under.
  void* stepsHandle() const { return gpu_ ? stepsHandle_ : mhandle_; }

  struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
  };
  bool sending_;
  int peer_;
  FifoShape shape_;
  bool trailer_;
  int tag_;
  WaitContext ctx_;
  std::unique_ptr<char, FreeDeleter> memory_;  // the control page (and the steps, without `gpu_`)
  std::shared_ptr<NetGpuMemory> gpu_;
  NetGpuMemory::Buffer gpuSteps_;
  FifoControl* ctrl_ = nullptr;
  char* data_ = nullptr;
  uint64_t* words_ = nullptr;  // per step: the size word of a trailer (inside the registered control page)
  std::unique_ptr<FifoSender> frontSend_;
  std::unique_ptr<FifoReceiver> frontRecv_;
  void* comm_ = nullptr;
  void* mhandle_ = nullptr;      // the host memory (control page; steps too without gpu_)
  void* stepsHandle_ = nullptr;  // gpu_: the step buffers' dmabuf registration
  void* flush_ = nullptr;        // receive side, gpu_: the iflush of step done_ in flight
  bool flushing_ = false;        // that iflush was posted
  uint64_t posted_ = 0;  // steps whose messages are all posted
  int partsPosted_ = 0;  // messages of step posted_ already posted
  uint64_t done_ = 0;    // steps completed (sender: released to the schedule; receiver: posted to it)
  void* requests_[kMaxFifoSteps][2] = {};
  int sizes_[kMaxFifoSteps] = {};  // receive: the payload bytes of each step's completed first part
  std::string failure_;
  std::atomic<bool> failed_{false};
};

class NetTransport {
 public:
  // Collective over every rank of the communicator (call it on all ranks or
  // on none). Chooses the network, makes every connection this rank needs
  // (ring edges to remote ranks, point-to-point to every remote rank), then
  // starts the proxy thread. Blocks until connected, the deadline or abort.
  static Result<std::unique_ptr<NetTransport>> connect(OobExchange& oob, const NetTransportOptions& options,
                                                       Deadline deadline);
  // Stops the proxy once every posted step has been sent (at most 10 s),
  // closes the connections, frees the FIFOs.
  ~NetTransport();

  // Null where the edge is not a network one.
  FifoSender* ringSend(int channel) const;
  FifoReceiver* ringRecv(int channel) const;
  FifoSender* p2pSend(int peer) const;
  FifoReceiver* p2pRecv(int peer) const;
  // "NET/Socket/eth0" and the like ("NET/IB/mlx5_0/GDRDMA" when the steps
  // are in GPU memory), for NCCL_DEBUG=INFO.
  const std::string& description() const { return description_; }
  bool gpuDirect() const { return gpu_ != nullptr; }
  // Bytes of GPU memory its connectors' steps hold (ncclCommMemStats).
  uint64_t gpuBytes() const {
    uint64_t n = 0;
    for (const auto& c : connectors_) n += c->gpuBytes();
    return n;
  }
  // The first failed connection, "rank 3: connection to 10.0.0.2:41000
  // closed by the peer", or "" when none failed. Any thread (a kernel's
  // error names the dead host with it: a kernel only sees a flag).
  std::string failure() const;

  // Any thread, idempotent: the schedule's ends fail at once; the proxy
  // closes the connections (peers see them close) and exits.
  void abort();

 private:
  NetTransport() = default;
  Status makeConnectors(const NetTransportOptions& options);
  // The GPU memory the connectors get (PLAIT_NET_GDR), or null for host memory.
  Result<std::shared_ptr<NetGpuMemory>> chooseGpuMemory(const NetTransportOptions& options,
                                                         const PlaitNetProperties& props) const;
  Status exchangeAndConnect(OobExchange& oob, const NetTransportOptions& options, Deadline deadline);
  void proxyLoop();

  const PlaitNetV8* net_ = nullptr;
  int dev_ = 0;
  int rank_ = 0;
  std::string description_;
  std::shared_ptr<NetGpuMemory> gpu_;  // declared before the connectors, which release into it
  std::vector<std::unique_ptr<NetConnector>> connectors_;
  std::vector<NetConnector*> ringSend_, ringRecv_, p2pSend_, p2pRecv_;
  const std::atomic<uint32_t>* abortFlag_ = nullptr;
  std::atomic<bool> stop_{false};
  std::atomic<bool> aborting_{false};
  std::thread proxy_;
};

// The communicator's step: when the ranks span more than one host (hostOf
// differs), connects every edge of `so` that leaves this host over the
// network and fills so.remoteRing* / so.remoteP2p* with its connectors; also
// clears so.pids of remote ranks (another host's pids mean nothing here).
// Returns null when every rank is on one host. Collective, like connect().
// `gpu` (the device path's) offers GPU memory for the step buffers;
// `sendFromBuffers` as NetTransportOptions' (the host path's).
Result<std::unique_ptr<NetTransport>> connectNetworkEdges(OobExchange& oob, ShmTransportOptions& so,
                                                          const std::vector<uint64_t>& hostOf, Deadline deadline,
                                                          std::shared_ptr<NetGpuMemory> gpu = nullptr,
                                                          bool sendFromBuffers = false);

}  // namespace plait
