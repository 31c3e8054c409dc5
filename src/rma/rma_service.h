// rma_service.h — one-sided communication on host memory: NCCL 2.32's
// ncclPutSignal / ncclSignal / ncclWaitSignal (docs/ARCHITECTURE.md,
// "One-sided operations").
//
// A put writes a range of a peer's window without the peer calling anything.
// Two paths, chosen per peer once, at create(), by the writer (one path per
// peer keeps one writer's puts and signals in order):
//
// - A peer on this host whose page (rma_page.h) this rank could map, and
//   whose memory it may write (a thread of this process, or a process
//   process_vm_writev reaches): the writer finds the window in the peer's
//   page, copies into it, then counts the signal in that page and wakes the
//   peer's waiters. No thread of the peer takes part.
// - Any other peer (another host, PLAIT_RMA_SHM=0): every rank runs an agent
//   thread that owns one receiving connection from each peer, lands each
//   message in the window it names and counts the signals it carries in this
//   rank's page. The connections are the chosen network's (transport/net:
//   built-in sockets, UCX, InfiniBand verbs, an NCCL net plugin), one per
//   ordered pair, made collectively by create() for every pair (local pairs
//   too: their closing is how a dead local writer is noticed).
//
// Wire: each message is a 64-byte header and up to chunkBytes of payload; a
// put larger than that is several messages, the signal on the last. One
// connection delivers in order, so a put's bytes are in the window before
// its signal is counted, and the signals of one sender are counted in the
// order it raised them.
//
// Windows are named by their registration serial number on the communicator
// (NCCL: window registration is collective, so the k-th window is the same
// window on every rank); the owner's range is what counts. A put that cannot
// land (no such window, out of its range) is not written anywhere; the
// owner's wait for that writer's signals fails saying why (through the page
// the writer reports it, and its put fails too; over the network the
// writer's connection is marked failed at the owner).
//
// Reads (plaitGet): a local peer's window is read as a put writes it (a
// copy between threads, process_vm_readv between processes); any other
// peer's agent answers a read request on its own connection to the reader,
// in messages the reader's agent copies into the reader's buffer. The
// owner's agent never blocks on a send (it would stop landing messages
// while a peer's agent does the same): replies wait in a queue and go out
// as the connection has room.
//
// Signals: per sending peer, a count in this rank's page. WaitSignal
// consumes: waiting for n signals from peer q returns once q's count reaches
// what earlier waits consumed plus n (NCCL's semantics: counters, not
// flags). Waits sleep on the page's futex (base/wait.h), have the
// communicator's deadline, end on abort, and fail with the peer's name when
// it can no longer signal (its connection failed or closed, or it reported
// a put it could not land) before enough signals came.
#pragma once

#include <atomic>
#include <cstddef>
#include <deque>
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "plait/clock.hpp"
#include "rma/rma_page.h"
#include "plait/status.hpp"
#include "transport/net/net.h"
#include "transport/oob.h"

namespace plait::rma {

struct Header;  // of a message on the wire

struct ServiceSetup {
  int rank = 0;
  int nranks = 1;
  int localRank = 0;                // picks the network device, as the net transport does
  OobExchange* oob = nullptr;       // create() only
  WindowTable* windows = nullptr;   // outlives the service
  const std::atomic<uint32_t>* abortFlag = nullptr;  // the communicator's
  std::vector<std::string> peerNames;  // per rank, "rank 3 (host n1, pid 4242)"
  std::vector<uint64_t> hostOf;        // per rank, its host (local peers share one)
};

// "n signals from peer" (an ncclWaitSignalDesc_t).
struct SignalWait {
  int peer = 0;
  uint64_t count = 0;
};

class Service {
 public:
  // Collective over every rank of the communicator: listens for each peer,
  // exchanges the handles, connects every ordered pair and starts the
  // agent. Blocks until connected, the deadline or abort.
  static Result<std::unique_ptr<Service>> create(const ServiceSetup& setup, Deadline deadline);
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  // Writes `bytes` from src into peer's window `window` at `offset`, then
  // (signal) raises one signal there. Returns once the bytes have left src
  // (src may be reused). One thread at a time per peer (others wait).
  Status put(int peer, uint64_t window, uint64_t offset, const void* src, uint64_t bytes, bool signal,
             Deadline deadline);
  // Waits until every wait's signals arrived, then consumes them.
  Status waitAll(const std::vector<SignalWait>& waits, Deadline deadline);
  // Waits until one wait's signals arrived (the first in order), consumes
  // those and returns its index.
  Result<int> waitAny(const std::vector<SignalWait>& waits, Deadline deadline);
  // Never blocks: true (and consumed) when every wait's signals arrived,
  // false (nothing consumed) when some have not; fails as waitAll would
  // when one can never arrive.
  Result<bool> test(const std::vector<SignalWait>& waits);
  // Copies `bytes` at `offset` of peer's window `window` into dst; returns
  // once they are there. The peer takes no part.
  Status get(int peer, uint64_t window, uint64_t offset, void* dst, uint64_t bytes, Deadline deadline);

  // Any thread, idempotent: waits and puts fail, the agent stops and the
  // connections close (peers see them close).
  void abort();
  // "NET/Socket/eth0" and the like.
  const std::string& description() const { return description_; }

 private:
  struct Slots {  // a connection's staging: depth messages of header + chunk
    void* comm = nullptr;
    void* mhandle = nullptr;
    std::vector<char> memory;
    std::vector<void*> requests;
    uint64_t posted = 0;
    uint64_t done = 0;
  };
  struct Sender {
    std::mutex mu;
    Slots slots;
    std::string failure;
  };
  struct PendingGet {  // a read this rank waits for (getMu_)
    char* dst = nullptr;
    uint64_t bytes = 0, landed = 0;
    int peer = 0;
    bool done = false;
    std::string error;
  };
  struct Reply {  // a read a peer asked of this rank (the agent's)
    int peer = 0;
    uint64_t request = 0, window = 0, offset = 0, bytes = 0, sent = 0;
    std::string error;     // refused: the one reply says why
    bool posted = false;   // all of it: now only until the connection sent it
    uint64_t lastSend = 0; // the connection's count of posted sends after its last
  };
  enum class SendResult { kSent, kBusy, kFailed };
  Service() = default;
  Status connect(const ServiceSetup& setup, Deadline deadline);
  // Collective: exchanges the pages and decides, per peer, whether this
  // rank's puts to it go through its page (rma_local.cc).
  Status connectLocal(const ServiceSetup& setup, Deadline deadline);
  Status putLocal(int peer, uint64_t window, uint64_t offset, const void* src, uint64_t bytes, bool signal);
  // ThreadSanitizer only (a no-op otherwise): a peer thread's page is mapped
  // here at another address than the one its owner reads, so TSan cannot
  // see the release this rank's atomic on it makes; tell it, at the owner's
  // address of `inPeerPage` (a field of the peer's page as mapped here).
  void releaseToOwner(int peer, const void* inPeerPage) const;
  uint64_t received(int peer) const { return page_.signal(peer).count.load(std::memory_order_acquire); }
  bool anyRemote(const std::vector<SignalWait>& waits) const;
  Status allocate(Slots& s, void* comm);
  void release(Slots& s, bool send);
  char* slot(Slots& s, uint64_t index) const { return s.memory.data() + (index % depth_) * messageBytes_; }
  Status waitSend(int peer, Sender& sender, uint64_t until, Deadline deadline);
  void agentLoop();
  void touch();  // a put or wait began here: the agent stays hot a while
  bool sendControl(int peer, const Header& h);
  void sayGoodbye();
  bool pumpReceiver(int peer);  // true when a message landed
  Status getLocal(int peer, uint64_t window, uint64_t offset, void* dst, uint64_t bytes);
  Status getRemote(int peer, uint64_t window, uint64_t offset, void* dst, uint64_t bytes, Deadline deadline);
  void queueReply(int peer, const Header& h);                       // the agent
  void landReply(int peer, const Header& h, const char* payload);  // the agent
  bool progressReplies();                                                 // the agent; true when one moved
  // The agent's send: posts one message if the connection has room now
  // (*posted: the connection's count of posted sends after it).
  SendResult trySend(int peer, const Header& h, const std::function<std::string(char*)>& fill, uint64_t* posted);
  // The agent's progress of a connection's sends, without waiting: true
  // once `until` of them completed (or the connection failed).
  bool reapSends(int peer, uint64_t until);
  void land(int peer, const char* message, int size);
  void failReceiver(int peer, const std::string& why);
  Status aborted() const;  // kRemoteError once aborted (this service or the communicator)
  // Why `w` can never reach `target` (its peer's connection failed short of
  // it), or "". waitMu_ held.
  std::string starved(const SignalWait& w, uint64_t target) const;
  // Waits (waitMu_ taken) until ready(), blocked() fails, or the deadline.
  Status waitFor(const char* what, Deadline deadline, const std::function<bool()>& ready,
                 const std::function<Status()>& blocked, const std::vector<SignalWait>& waits);

  const PlaitNetV8* net_ = nullptr;
  int dev_ = 0;
  int rank_ = 0;
  int nranks_ = 1;
  size_t chunkBytes_ = 0;
  size_t messageBytes_ = 0;
  uint64_t depth_ = 4;
  std::string description_;
  WindowTable* windows_ = nullptr;
  const std::atomic<uint32_t>* abortFlag_ = nullptr;
  std::vector<std::string> peerNames_;
  std::vector<std::unique_ptr<Sender>> senders_;  // [peer]; null for this rank
  std::vector<Slots> receivers_;                  // [peer]; the agent's alone
  Page page_;                                     // this rank's: signal counts, waiters' futex, windows
  std::vector<Page> peerPages_;                   // [peer] a local peer's page (valid where local_)
  std::vector<int> pids_;                         // [peer] its process (cross-memory writes)
  std::vector<uint64_t> peerPageHome_;            // [peer] its page's address in its own process
  std::vector<char> local_;                       // [peer] 1: puts go through its page (same host, reachable)
  std::unique_ptr<std::atomic<bool>[]> goodbyeAcked_;  // [peer] landed all this rank sent (closing)
  std::vector<uint64_t> consumed_;                // [peer] signals waits took (waiters' lock)
  mutable std::mutex waitMu_;                     // consumed_, failures_
  std::vector<std::string> failures_;             // [peer] why its connection to this rank failed
  std::mutex getMu_;                              // gets_, nextGet_
  std::map<uint64_t, PendingGet*> gets_;          // by request number
  uint64_t nextGet_ = 0;
  std::deque<Reply> replies_;                     // the agent's alone
  std::atomic<int64_t> lastLocal_{0};  // steady_clock ticks of the last touch()
  std::atomic<bool> stop_{false};
  std::atomic<bool> aborted_{false};
  std::thread agent_;
};

}  // namespace plait::rma
