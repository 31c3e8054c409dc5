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
// the step's full size word (core/p2p.cc marks a message's last step in it)
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
};

// One direction of one network connection (internal to the transport; the
// schedule sees only front()).
class NetConnector {
 public:
  NetConnector(bool sending, int peer, FifoShape shape, bool trailer, int tag, WaitContext ctx);
  ~NetConnector();
  NetConnector(const NetConnector&) = delete;
  NetConnector& operator=(const NetConnector&) = delete;

  // Proxy thread: moves what can move without blocking; sets *moved if
  // anything did. A network error marks the schedule's end failed.
  void progress(const PlaitNetV8& net, bool* moved);
  // Registers the FIFO memory with `comm` and takes ownership of the comm.
  Status attach(const PlaitNetV8& net, void* comm);
  void close(const PlaitNetV8& net);  // proxy thread or after it stopped
  void abortFront();                  // any thread: the schedule's end gives up
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // Why it failed (the network's text), or "" while it has not; any thread.
  std::string failure() const { return failed() ? failure_ : std::string(); }
  // Proxy thread: every step the schedule posted has been sent (true for
  // receive connectors and failed ones).
  bool drained() const;

  bool sending() const { return sending_; }
  int peer() const { return peer_; }
  FifoSender* frontSender() { return frontSend_.get(); }
  FifoReceiver* frontReceiver() { return frontRecv_.get(); }

 private:
  void progressSend(const PlaitNetV8& net, bool* moved);
  void progressRecv(const PlaitNetV8& net, bool* moved);
  // Tests both parts of the oldest step; true when both completed.
  bool testStep(const PlaitNetV8& net, int slot, int* size);
  void fail(int code);
  void failWith(std::string why);  // marks the schedule's end failed with `why`
  // Receive side: the FIFO size word for a completed step of `size` bytes;
  // false (and the connector failed) when the peer sent an invalid one.
  bool checkedWord(int slot, int size, uint64_t* word);
  char* step(int slot) const { return data_ + static_cast<size_t>(slot) * shape_.stepBytes; }

  struct FreeDeleter {
    void operator()(void* p) const { std::free(p); }
  };
  bool sending_;
  int peer_;
  FifoShape shape_;
  bool trailer_;
  int tag_;
  WaitContext ctx_;
  std::unique_ptr<char, FreeDeleter> memory_;
  FifoControl* ctrl_;
  char* data_;
  uint64_t* words_;  // per step: the size word of a trailer (inside the registered control page)
  std::unique_ptr<FifoSender> frontSend_;
  std::unique_ptr<FifoReceiver> frontRecv_;
  void* comm_ = nullptr;
  void* mhandle_ = nullptr;
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
  // "NET/Socket/eth0" and the like, for NCCL_DEBUG=INFO.
  const std::string& description() const { return description_; }
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
  Status exchangeAndConnect(OobExchange& oob, const NetTransportOptions& options, Deadline deadline);
  void proxyLoop();

  const PlaitNetV8* net_ = nullptr;
  int dev_ = 0;
  int rank_ = 0;
  std::string description_;
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
Result<std::unique_ptr<NetTransport>> connectNetworkEdges(OobExchange& oob, ShmTransportOptions& so,
                                                          const std::vector<uint64_t>& hostOf, Deadline deadline);

}  // namespace plait
