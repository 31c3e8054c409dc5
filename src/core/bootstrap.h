// bootstrap.h — unique ids, the rendezvous at a root, and the out-of-band
// TCP network every communicator builds before anything else (DESIGN.md §5).
//
// Flow: ncclGetUniqueId (createUniqueId) starts a root thread listening on
// this host's out-of-band address and encodes {magic, nonce, root address}.
// Every rank then calls Bootstrap::create: it listens on its own address,
// sends its PeerInfo to the root, and gets back the table of every rank's
// PeerInfo (or the error the root found: a duplicate rank, disagreeing
// nranks, ranks that never arrived). Ranks then connect into a ring
// (rank -> rank+1) used by allGather and barrier; other point-to-point
// connections are made on first use. The root thread exits once it has
// answered everyone, or at its own deadline.
//
// Failure contract: every blocking call takes a Deadline and returns
// Code::kRemoteError on timeout, on abort, or when a peer's connection breaks;
// messages about a peer name its rank, host name and pid.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "base/clock.h"
#include "base/cpu_mask.h"
#include "base/greeting_gate.h"
#include "base/socket.h"
#include "nccl.h"
#include "plait/status.hpp"
#include "transport/oob.h"

namespace plait {

// The contents of an ncclUniqueId (128 bytes): magic, a random nonce, the
// root's address. hostedByRank0 is set when the id came from NCCL_COMM_ID:
// no root runs yet and rank 0's Bootstrap::create starts it at that address.
struct UniqueIdContents {
  uint64_t magic = 0;
  uint64_t nonce = 0;
  net::SocketAddress root;
  bool hostedByRank0 = false;
};

// The magic every Plait id carries.
inline constexpr uint64_t kUniqueIdMagic = 0x504c414954424f4fULL;  // "PLAITBOO"

void encodeUniqueId(const UniqueIdContents& contents, ncclUniqueId* id);
// Fails with kInvalidArgument if the id does not carry Plait's magic or a valid address.
Result<UniqueIdContents> decodeUniqueId(const ncclUniqueId& id);

// ncclGetUniqueId. If NCCL_COMM_ID ("host:port") is set, encodes that address
// with a nonce derived from it (so every process computes the same id) and
// starts nothing; otherwise starts a root thread in this process listening
// on chooseInterfaceAddress() port 0 and encodes its address. The root lives
// until every rank has been answered or PLAIT_TIMEOUT seconds pass. Thread-safe.
Result<ncclUniqueId> createUniqueId();
// The same with a root thread always, ignoring NCCL_COMM_ID: for ids made
// inside a running job (ncclCommSplit), where the NCCL_COMM_ID address is
// the parent's and several children need roots at once.
Result<ncclUniqueId> createPrivateUniqueId();

// A hash identifying this host: hostname + /proc/sys/kernel/random/boot_id.
// NCCL_HOSTID (any string) replaces it, so tests can pretend to be several
// nodes. Thread-safe.
uint64_t hostHash();

// The largest communicator the bootstrap accepts (a hello claiming more is
// rejected before anything is sized by it).
inline constexpr int kMaxRanks = 1 << 24;

// What every rank knows about every other rank. Plain data: it travels in messages.
struct PeerInfo {
  int rank = -1;
  uint64_t hostHash = 0;
  int pid = 0;
  char hostname[64] = {0};
  CpuMask cpus;  // the joining thread's affinity (the wait policy, base/cpu_mask.h)
  net::SocketAddress listenAddr;  // where this rank accepts bootstrap connections
};

// The seconds any bootstrap wait may block by default (PLAIT_TIMEOUT / NCCL_TIMEOUT).
int64_t bootstrapTimeoutSec();

struct BootstrapOptions {
  // Bounds Bootstrap::create (the rendezvous and the ring connections).
  Deadline deadline = Deadline::afterMs(secondsToWaitMs(bootstrapTimeoutSec()));
  // The communicator's abort flag: any non-zero value makes every blocked
  // call return within about 100 ms. May be null. Must outlive the Bootstrap.
  const std::atomic<uint32_t>* abortFlag = nullptr;
  // The root's process when it runs on this host (a split's new rank 0):
  // once it is gone, joining fails at once instead of retrying the
  // connection until the deadline. 0: unknown.
  int rootPid = 0;
};

class Bootstrap {
 public:
  // Collective over nranks: connects to the root, exchanges PeerInfo, builds
  // the ring. Blocks until all ranks joined, the deadline or abort. Fails with
  // kInvalidArgument for a bad id / rank / nranks, kRemoteError with the
  // root's message for a rejected join, and kRemoteError on timeout (naming
  // the ranks that never arrived when the root could tell).
  static Result<std::unique_ptr<Bootstrap>> create(const ncclUniqueId& id, int rank, int nranks,
                                                   const BootstrapOptions& options);
  ~Bootstrap();
  Bootstrap(const Bootstrap&) = delete;
  Bootstrap& operator=(const Bootstrap&) = delete;

  int rank() const { return rank_; }
  int nranks() const { return nranks_; }
  const PeerInfo& peer(int r) const { return peers_[static_cast<size_t>(r)]; }
  // The job's id magic and secret nonce: other services of the communicator
  // (core/op_status.h) greet with them too.
  uint64_t magic() const { return magic_; }
  uint64_t nonce() const { return nonce_; }

  // The operations below are collective or point-to-point over the
  // bootstrap network. They are NOT thread-safe with each other: one thread
  // at a time (the communicator serialises them). abort() is the exception.

  // data holds nranks slots of bytesPerRank; slot[rank] is mine on entry,
  // all are filled on return. Ring algorithm, nranks-1 steps.
  Status allGather(void* data, size_t bytesPerRank, Deadline deadline);
  // Returns once every rank has entered the barrier.
  Status barrier(Deadline deadline);
  // Point-to-point. Messages with the same (peer, tag) arrive in order;
  // different tags may be received in any order (early ones are buffered).
  // recv's bytes must equal the matching send's bytes (else kInvalidUsage).
  // send returns once the data is handed to the kernel (it may block if the
  // peer is not reading); sending to self works.
  Status send(int peer, uint32_t tag, const void* data, size_t bytes, Deadline deadline);
  Status recv(int peer, uint32_t tag, void* data, size_t bytes, Deadline deadline);

  // Thread-safe, idempotent: every blocked and later call returns promptly
  // with kRemoteError "bootstrap aborted".
  void abort();
  bool aborted() const;
  // From now on the abort flag given at creation no longer ends this
  // bootstrap's waits (only abort() does): ncclCommRevoke raises that flag
  // to stop the data path but keeps the bootstrap for split and shrink.
  void detachAbortFlag() { userAbort_.store(nullptr, std::memory_order_release); }

 private:
  // Message kinds keep the library's own traffic apart from user tags.
  enum class Kind : uint32_t { kUser = 0, kAllGather = 1, kBarrier = 2 };
  using MessageKey = std::tuple<int, Kind, uint32_t>;  // (peer, kind, tag)

  Bootstrap(int rank, int nranks, uint64_t magic, uint64_t nonce, const std::atomic<uint32_t>* abortFlag);

  Status connectRing(Deadline deadline);
  Status sendMessage(int peer, Kind kind, uint32_t tag, const void* data, size_t bytes, Deadline deadline);
  Status recvMessage(int peer, Kind kind, uint32_t tag, void* data, size_t bytes, Deadline deadline);
  Status ringAllGather(Kind kind, void* data, size_t bytesPerRank, Deadline deadline);
  // The send connection to peer, made on first use.
  Result<net::Socket*> sendSocket(int peer, Deadline deadline);
  // Accepts incoming connections until one from `peer` is registered.
  Status acceptFrom(int peer, Deadline deadline);
  void installSocket(std::vector<net::Socket>& table, int peer, net::Socket socket);
  // Turns a socket failure into "<op> rank r (host h, pid p): <why>", or
  // "bootstrap aborted" when abort() was the cause.
  Status peerFailure(int peer, const char* op, Status cause) const;
  // A peer on this host whose process has exited (it will never connect).
  bool peerGone(int peer) const;
  const std::atomic<uint32_t>* socketAbortFlag() const {
    const std::atomic<uint32_t>* user = userAbort_.load(std::memory_order_acquire);
    return user ? user : &abort_;
  }

  int rank_;
  int nranks_;
  uint64_t magic_;
  uint64_t nonce_;
  std::vector<PeerInfo> peers_;
  net::Socket listener_;
  std::vector<net::Socket> sendSockets_;  // [peer] -> connection I write to
  std::vector<net::Socket> recvSockets_;  // [peer] -> connection I read from
  std::unique_ptr<net::GreetingGate> peerGate_;  // reads peers' hellos, made on first use
  // With encryption on, the hellos are read by a thread instead (peers'
  // TLS handshakes must not wait for this rank to be in acceptFrom).
  std::unique_ptr<net::GreetingThread> peerThread_;
  std::map<MessageKey, std::deque<std::vector<char>>> unexpected_;
  uint64_t unexpectedBytes_ = 0;  // buffered in unexpected_, bounded
  std::atomic<uint32_t> abort_{0};
  std::atomic<const std::atomic<uint32_t>*> userAbort_;
  // Guards the socket tables against abort() shutting them down concurrently.
  mutable std::mutex socketsMu_;

};

// The bootstrap, seen by transports as an out-of-band exchange.
class BootstrapOob final : public OobExchange {
 public:
  explicit BootstrapOob(Bootstrap& b) : b_(b) {}
  int rank() const override { return b_.rank(); }
  int nranks() const override { return b_.nranks(); }
  Status allGather(void* data, size_t bytes, Deadline d) override { return b_.allGather(data, bytes, d); }
  Status barrier(Deadline d) override { return b_.barrier(d); }

 private:
  Bootstrap& b_;
};

}  // namespace plait
