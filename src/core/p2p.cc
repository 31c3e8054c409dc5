// p2p.cc — point-to-point operations and the collectives built from them
// (AlltoAll, Gather, Scatter), run as one batch with a progress loop.
//
// A batch is every Send and Recv of a group, with the group's AlltoAll,
// Gather and Scatter when it has sends or receives (Communicator::
// runGroupTasks), or a single call. The loop
// moves whatever can move now — a free step towards any peer, a posted step
// from any peer — so the order of calls inside a group never matters: an
// all-to-all written as n sends then n receives completes, as it must with
// NCCL. Messages to the same peer travel in call order through the pair's
// point-to-point FIFO; each FIFO step carries up to one step of payload and
// the last step of a message is flagged, so a Send and a Recv that disagree
// on the size are reported instead of shifting every later message.
// Sends and receives with this rank itself are paired in call order and
// copied directly.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>

#include "algorithms/types.h"
#include "base/cma.h"
#include "base/config.h"
#include "base/wait.h"
#include "core/comm.h"
#include "plait/clock.hpp"

namespace plait {
namespace {

constexpr uint64_t kLastStep = kStepLast;          // in a step's size: the message ends here
constexpr uint64_t kRendezvous = kStepRendezvous;  // the step holds a RendezvousDescriptor
constexpr uint64_t kPut = kStepPut;                // a single-copy write: its request, then its report
// A write request's reply word (FifoControl::reply): 0 unanswered, then the
// receiver's buffer address (answered) or kPutWithdrawn (by the sender); an
// answer then becomes kPutWriting (the sender writes) or kPutRevoked (the
// receiver's batch failed first: the sender must not write), and writing
// becomes kPutDone once the sender will touch the buffer no more (before its
// report, or when its own batch ends early). Addresses are never below 4096
// (cmaWrite refuses the first page).
constexpr uint64_t kPutWithdrawn = 1;
constexpr uint64_t kPutWriting = 2;
constexpr uint64_t kPutRevoked = 3;
constexpr uint64_t kPutDone = 4;
constexpr uint64_t kPutFirstAddress = 4096;
constexpr size_t kCmaChunk = size_t(4) << 20;        // bytes read per pass, so other peers progress too

// -1: 2048 at 2 ranks with a core each, else 1024. At 2 ranks (Intel host,
// 2026-11-29, 7 interleaved rounds, perf/results/host/rooted_pair.md) 1.5-2
// KiB blocks by lines took 0.65-0.87x the point-to-point FIFOs' time
// (Scatter, Gather, AlltoAll), 2.5 KiB the same, 3 KiB 1.00-1.14x as long;
// with 3 and 4 ranks on 2 cores 2-3 KiB blocks took 1.17-1.65x as long, as
// perf/host/small_p2p.sh had found before.
PLAIT_PARAM_INT(kLineP2pMaxBytes, "P2P_LINE_MAX_BYTES", -1,
                "AlltoAll, Gather and Scatter whose block per rank is at most this many bytes (3072 at most) go "
                "through the cache-line FIFOs when every rank is on this host; 0: through the point-to-point "
                "FIFOs; negative: 2048 at 2 ranks with a core each, else 1024; rank 0's counts");

PLAIT_PARAM_INT(kCmaMinBytes, "P2P_CMA_MIN_BYTES", 16 << 10,
                "point-to-point messages from this size up are read in place from the sending process "
                "(single copy) when cross-memory attach is permitted");

PLAIT_PARAM_INT(kScatterCmaMinBytes, "P2P_SCATTER_CMA_MIN_BYTES", 128 << 10,
                "Scatter's blocks from this size (and P2P_CMA_MIN_BYTES; twice this when the local ranks share "
                "cores) up to P2P_SCATTER_CMA_MAX_BYTES are read in place from the root (single copy, every "
                "other rank reading its own block at once)");
PLAIT_PARAM_INT(kScatterCmaMaxBytes, "P2P_SCATTER_CMA_MAX_BYTES", 512 << 10,
                "the largest Scatter block read in place from the root; larger and smaller blocks go through the "
                "FIFOs (0: Scatter always through the FIFOs)");
// Gather's blocks written into the root's buffer by their ranks (the
// FIFOs' copies moved to the senders' cores: the root copies only its own
// block meanwhile), and AlltoAll's where the local ranks share cores (one
// copy instead of two, and a rank waits for none of its readers). Intel host,
// 2026-11-30, unregistered heap buffers, 5-7 interleaved rounds, time against
// the FIFOs (perf/results/host/gather_put.md): Gather at 2 ranks, 64-256 KiB
// blocks 0.46-0.56x; at 4 ranks on 2 cores 0.58-0.83x; AlltoAll at 3 and 4
// ranks on 2 cores, 64-128 KiB blocks 0.41-0.70x, 192-256 KiB 0.88-0.96x.
// 16-32 KiB blocks lost (1.1-2x). Larger blocks gained nothing beside the
// direct path (from 1 MiB) and lost with 4 ranks (Gather 1.2-1.4x at 512 KiB),
// and through the FIFOs alone 2 MiB blocks lost at 2 ranks (1.07-1.13x).
PLAIT_PARAM_INT(kPutMinBytes, "P2P_PUT_MIN_BYTES", 64 << 10,
                "Gather's blocks, and AlltoAll's where the local ranks share cores, from this size (and "
                "P2P_CMA_MIN_BYTES) up to P2P_PUT_MAX_BYTES are written into their receivers' buffers by their "
                "senders (single copy, every rank on this host, cross-memory attach permitted)");
PLAIT_PARAM_INT(kPutMaxBytes, "P2P_PUT_MAX_BYTES", 256 << 10,
                "the largest block written into its receiver's buffer; larger and smaller blocks go through the "
                "FIFOs (0: never written)");
PLAIT_PARAM_INT(kPutWaitUs, "P2P_PUT_WAIT_US", 50,
                "how long a block's sender waits for the receiver to answer its write request before it "
                "withdraws it and sends the block through the FIFOs (microseconds)");

// Large messages between local processes: the sender posts where the data
// is, the receiver copies it straight into its buffer (process_vm_readv)
// and releases the step, which tells the sender its buffer is free again.
// The receiver trusts a descriptor only from a local peer when cross-memory
// attach was agreed at connection time, and reads from the pid the bootstrap
// gave for that rank (the descriptor's pid must match it): a peer can make
// this process read only that peer's own memory.
//
// A write (Gather's blocks, AlltoAll's where ranks share cores: runP2p) turns it round, so that the sender's core
// copies while the receiver does other work: the sender posts a request
// (the descriptor with kPut, address 0), the receiver checks it like a read's,
// puts its buffer's address in the step's reply word (FifoControl::reply) and
// releases the step; the sender writes there (process_vm_writev, into the pid
// the bootstrap gave for that rank: a peer can make this process write only
// into that peer's own memory) and posts a report step (kPut, 8 bytes: 0 or
// the errno), after which the receiver has the message. The sender posts
// nothing else to that peer in between, so the report is the step after the
// request. A sender never waits on the receiver longer than the FIFOs made
// it: unanswered after P2P_PUT_WAIT_US it withdraws the request (its
// mark in the reply word; the first mark there wins) and sends the message
// through the steps after it, which the receiver then takes as usual, so a
// peer busy elsewhere (a collective its group runs before its receives) gets
// the message as before. Hence writes only for messages that fit in the
// FIFO beside the request's step, or did not fit without it either.
struct RendezvousDescriptor {
  uint64_t bytes;
  uint64_t addr;
  int32_t pid;
  int32_t reserved;
};

struct Message {
  int peer = 0;
  const char* src = nullptr;  // sends
  char* dst = nullptr;        // receives
  size_t bytes = 0;
  size_t done = 0;
  bool single = false;  // receives: a checked single-copy descriptor is being read; sends: a write requested
  bool mayRendezvous = true;  // sends: may go single-copy (Gather's and Scatter's in their size windows: runP2p)
  bool staged = false;        // sends: src is a copy (stageOverlappingSends)
  bool put = false;           // sends: single copy by writing; receives: the sender is writing it
  uint64_t request = 0;       // receives being written: the request's step (its reply word)
};

// Per peer, the sends and the receives in call order, and how far each got;
// apart, the small blocks of AlltoAll, Gather and Scatter, each one message
// through the pair's point-to-point line FIFO (as runLineP2p sends them
// outside a group).
struct PeerQueues {
  std::vector<Message> sends, recvs;
  size_t nextSend = 0, nextRecv = 0;
  uint64_t ackStep = 0;  // the peer must release this many steps before our rendezvous buffers are free
  uint64_t putStep = 0;      // the front send's write request is step putStep - 1, not yet answered
  uint64_t putAddr = 0;      // where the front send's write goes (the peer's answer)
  int putErr = 0;            // the front send's write failed (errno; ECANCELED: the peer gave it up)
  uint64_t putClaim = 0;     // the claimed write's request is step putClaim - 1, until it is marked done
  uint64_t putGiveUpNs = 0;  // when the request is withdrawn if still unanswered
  std::vector<Message> lineSends, lineRecvs;
  size_t nextLineSend = 0, nextLineRecv = 0;
  bool linesPending() const { return nextLineSend < lineSends.size() || nextLineRecv < lineRecvs.size(); }
  bool pending() const {
    return nextSend < sends.size() || nextRecv < recvs.size() || ackStep != 0 || linesPending();
  }
  // Whether the front send's write request is still unanswered.
  bool putWaits(const FifoSender& f) const { return putStep != 0 && f.replyOf(putStep - 1) == 0; }
  void reset() {
    sends.clear();
    recvs.clear();
    lineSends.clear();
    lineRecvs.clear();
    nextSend = nextRecv = nextLineSend = nextLineRecv = 0;
    ackStep = putStep = putClaim = 0;
    putErr = 0;
  }
};

// A thread's batch storage, kept from call to call: a batch built afresh
// allocated and freed a vector per peer and direction every call (about a
// quarter of a 4 KiB AlltoAll's time at 2 ranks). The queues, and the copies
// of send buffers that the batch's receives overwrite (freed at the batch's
// end when over 4 MiB). A batch that finds them taken (one inside another:
// no caller does that today) uses storage of its own.
struct BatchStorage {
  std::vector<PeerQueues> queues;
  std::vector<char> staging;
  bool busy = false;
};

BatchStorage& threadStorage() {
  thread_local BatchStorage storage;
  return storage;
}

class P2pBatch {
 public:
  // cma: local peers may read this process's memory (large messages go by rendezvous).
  // pids: every rank's process id as the bootstrap reported it at connection time.
  P2pBatch(ShmTransport& shm, int rank, int nranks, bool cma, const std::vector<int>& pids, uint64_t putWaitNs,
           int64_t timeoutMs)
      : shm_(shm),
        rank_(rank),
        nranks_(nranks),
        shared_(!threadStorage().busy),
        storage_(shared_ ? threadStorage() : own_),
        peers_(storage_.queues),
        pids_(pids),
        cma_(cma),
        cmaMin_(cma ? static_cast<size_t>(kCmaMinBytes.get()) : 0),
        putWaitNs_(putWaitNs),
        timeoutMs_(timeoutMs) {
    storage_.busy = true;
    if (peers_.size() < static_cast<size_t>(nranks)) peers_.resize(nranks);
    for (int p = 0; p < nranks; ++p) peers_[p].reset();
  }
  P2pBatch(const P2pBatch&) = delete;
  P2pBatch& operator=(const P2pBatch&) = delete;

  // put: a single copy goes by the sender's write (a read when false).
  void send(int peer, const void* src, size_t bytes, bool mayRendezvous = true, bool put = false) {
    peers_[peer].sends.push_back(
        Message{peer, static_cast<const char*>(src), nullptr, bytes, 0, false, mayRendezvous, false, put});
  }
  void recv(int peer, void* dst, size_t bytes) {
    peers_[peer].recvs.push_back(Message{peer, nullptr, static_cast<char*>(dst), bytes, 0, false});
  }
  // A block through the line FIFO (another rank: the blocks with this rank
  // itself pair with send() and recv()).
  void lineSend(int peer, const void* src, size_t bytes) {
    peers_[peer].lineSends.push_back(Message{peer, static_cast<const char*>(src), nullptr, bytes, 0, false});
  }
  void lineRecv(int peer, void* dst, size_t bytes) {
    peers_[peer].lineRecvs.push_back(Message{peer, nullptr, static_cast<char*>(dst), bytes, 0, false});
  }
  // Checks the peers, copies to self and posts every send that can go
  // without waiting (all of them, unless a FIFO fills): the peers may
  // receive them while this rank does something else (Communicator::runGroup).
  Status post();
  Status run(const WaitContext& base);
  ~P2pBatch();

 private:
  Status checkSelf() const;
  void copySelf();
  void stageOverlappingSends();
  Status checkPeers() const;
  // Moves as many steps as the FIFOs allow; sets *moved if any moved.
  Status pumpSends(PeerQueues& q, bool* moved);
  Status pumpRecvs(PeerQueues& q, bool* moved);
  Status pumpLines(int peer, PeerQueues& q, bool* moved, bool receive = true);
  bool anyReady();
  bool acked(int peer);
  bool rendezvous(int peer, size_t bytes) const { return cmaMin_ > 0 && bytes >= cmaMin_ && shm_.isLocal(peer); }
  Status checkRendezvous(int peer, uint64_t word, uint64_t flag, const Message& m,
                         const RendezvousDescriptor& d) const;
  Status readRendezvous(int peer, Message& m, const char* slot, uint64_t word, bool* complete);
  Status pumpPut(FifoSender* fifo, PeerQueues& q, Message& m, bool* moved);
  // Whether a send may go by a write: the pid to write into is known, a
  // step is left for the report, and if the request is withdrawn the message
  // fits beside it in the FIFO as it did without it (or did not fit either).
  // Judged on the whole FIFO, not on the steps free now: by the free steps a
  // sender that had once withdrawn and run ahead stayed on the FIFO path for
  // good (0.84x the time at 128-512 KiB with the whole FIFO's rule). So one
  // case is left where a withdrawn request's step can make a sender wait for
  // its receiver, where the FIFO alone would not have: earlier messages and
  // this one filling the FIFO exactly while the receiver runs other
  // collectives of its group first (docs/ARCHITECTURE.md, "A group").
  bool mayPut(const FifoSender& fifo, const Message& m) const {
    const uint64_t nSteps = static_cast<uint64_t>(fifo.shape().nSteps), step = fifo.shape().stepBytes;
    const uint64_t need = (m.bytes + step - 1) / step;
    return pids_[m.peer] > 0 && nSteps >= 2 && (need + 1 <= nSteps || need > nSteps);
  }
  // After a failure (the destructor): this rank's claimed writes are marked
  // done, and no peer may still write into our receive buffers.
  void settleWrites();
  void endPut(PeerQueues& q, int peer);
  Status receivePut(int peer, FifoReceiver* fifo, Message& m, const char* slot, uint64_t word);
  Status answerPuts();
  bool finished();
  std::string pendingText() const;

  ShmTransport& shm_;
  int rank_;
  int nranks_;
  BatchStorage own_;  // used only when the thread's is taken
  bool shared_;       // storage_ is the thread's
  BatchStorage& storage_;
  std::vector<PeerQueues>& peers_;  // the first nranks_ are this batch's
  const std::vector<int>& pids_;  // per rank, fixed at connection time
  bool cma_;       // cross-memory attach agreed between the local ranks
  size_t cmaMin_;  // 0: no rendezvous
  uint64_t putWaitNs_;  // how long a write request waits for its answer
  int64_t timeoutMs_;   // the communicator's, bounding settleWrites()
  bool posted_ = false;
};

// A send whose buffer a receive of the same batch writes (nccl-tests'
// in-place sendrecv; an in-place AlltoAll) is copied first: receives may
// complete before the send has left, over a network always. The copies go
// to one buffer of the thread's (BatchStorage).
void P2pBatch::stageOverlappingSends() {
  auto overlaps = [this](const Message& m) {
    for (int p = 0; p < nranks_; ++p)
      for (const std::vector<Message>* recvs : {&peers_[p].recvs, &peers_[p].lineRecvs})
        for (const Message& r : *recvs)
          if (r.bytes && r.dst < m.src + m.bytes && m.src < r.dst + r.bytes) return true;
    return false;
  };
  size_t total = 0;
  for (int p = 0; p < nranks_; ++p)
    for (std::vector<Message>* sends : {&peers_[p].sends, &peers_[p].lineSends})
      for (Message& m : *sends)
        if (m.bytes != 0 && overlaps(m)) {
          m.staged = true;
          total += m.bytes;
        }
  if (total == 0) return;
  std::vector<char>& staging = storage_.staging;
  if (staging.size() < total) staging.resize(total);
  size_t at = 0;
  for (int p = 0; p < nranks_; ++p)
    for (std::vector<Message>* sends : {&peers_[p].sends, &peers_[p].lineSends})
      for (Message& m : *sends)
        if (m.staged) {
          std::memcpy(staging.data() + at, m.src, m.bytes);
          m.src = staging.data() + at;
          at += m.bytes;
        }
}

// A failed batch may leave a peer reading a staged copy (a rendezvous not
// yet acknowledged); the communicator is broken then, as before the copies
// were kept.
P2pBatch::~P2pBatch() {
  settleWrites();
  if (storage_.staging.capacity() > (size_t{4} << 20)) std::vector<char>().swap(storage_.staging);
  if (shared_) storage_.busy = false;
}

Status P2pBatch::checkSelf() const {
  const PeerQueues& q = peers_[rank_];
  if (q.sends.size() != q.recvs.size())
    return invalidUsage("rank " + std::to_string(rank_) + " posted " + std::to_string(q.sends.size()) +
                        " send(s) to itself but " + std::to_string(q.recvs.size()) + " receive(s) from itself");
  for (size_t i = 0; i < q.sends.size(); ++i)
    if (q.sends[i].bytes != q.recvs[i].bytes)
      return invalidUsage("send to self of " + std::to_string(q.sends[i].bytes) + " bytes paired with a receive of " +
                          std::to_string(q.recvs[i].bytes) + " bytes");
  return Status::ok();
}

void P2pBatch::copySelf() {
  PeerQueues& q = peers_[rank_];
  for (size_t i = 0; i < q.sends.size(); ++i)
    if (q.sends[i].bytes && q.sends[i].src != q.recvs[i].dst)
      std::memmove(q.recvs[i].dst, q.sends[i].src, q.sends[i].bytes);
  q.nextSend = q.nextRecv = q.sends.size();
}

Status P2pBatch::checkPeers() const {
  for (int p = 0; p < nranks_; ++p) {
    const PeerQueues& q = peers_[p];
    if (p == rank_ || !q.pending()) continue;
    if (shm_.p2pSend(p) == nullptr || shm_.p2pRecv(p) == nullptr)
      return invalidUsage("rank " + std::to_string(p) + " is on another host and has no network connector");
    if ((!q.lineSends.empty() && shm_.p2pLineSend(p) == nullptr) ||
        (!q.lineRecvs.empty() && shm_.p2pLineRecv(p) == nullptr))
      return internalError("rank " + std::to_string(p) + " has no line FIFO");
  }
  return Status::ok();
}

Status P2pBatch::pumpSends(PeerQueues& q, bool* moved) {
  FifoSender* fifo = shm_.p2pSend(q.sends.front().peer);
  const size_t step = fifo->shape().stepBytes;
  while (q.nextSend < q.sends.size()) {
    Message& m = q.sends[q.nextSend];
    if (m.single) {  // a write requested
      PLAIT_RETURN_IF_ERROR(pumpPut(fifo, q, m, moved));
      if (m.single) return Status::ok();
      continue;
    }
    char* slot = fifo->tryAcquire();
    if (slot == nullptr) {
      if (fifo->peerAborted()) return peerAbortedError(*fifo->waitContext());
      return Status::ok();
    }
    *moved = true;
    if (m.done == 0 && m.mayRendezvous && rendezvous(m.peer, m.bytes) && (!m.put || mayPut(*fifo, m))) {
      const int32_t self = static_cast<int32_t>(getpid());  // not cached: forked ranks
      const RendezvousDescriptor d{m.bytes, m.put ? 0 : reinterpret_cast<uint64_t>(m.src), self, 0};
      std::memcpy(slot, &d, sizeof(d));
      if (m.put) {
        fifo->clearReply();
        fifo->post(sizeof(d) | kLastStep | kPut);
        q.putStep = fifo->stepIndex();
        q.putGiveUpNs = nowNs() + putWaitNs_;
        m.single = true;
        continue;
      }
      fifo->post(sizeof(d) | kLastStep | kRendezvous);
      m.done = m.bytes;
      q.ackStep = fifo->stepIndex();
      ++q.nextSend;
      continue;
    }
    const size_t n = std::min(step, m.bytes - m.done);
    if (n) std::memcpy(slot, m.src + m.done, n);
    m.done += n;
    const bool last = m.done == m.bytes;
    fifo->post(n | (last ? kLastStep : 0));
    if (last) ++q.nextSend;
  }
  return Status::ok();
}

Status P2pBatch::pumpRecvs(PeerQueues& q, bool* moved) {
  const int peer = q.recvs.front().peer;
  FifoReceiver* fifo = shm_.p2pRecv(peer);
  while (q.nextRecv < q.recvs.size()) {
    Message& m = q.recvs[q.nextRecv];
    size_t got = 0;
    const char* slot = fifo->tryAcquire(&got);
    if (slot == nullptr) {
      if (fifo->peerAborted()) return peerAbortedError(*fifo->waitContext());
      return Status::ok();
    }
    if (m.put || (got & kPut)) {
      PLAIT_RETURN_IF_ERROR(receivePut(peer, fifo, m, slot, got));
      *moved = true;
      if (m.put) return Status::ok();       // the request answered: the report comes later
      if (m.done == m.bytes) ++q.nextRecv;  // the report came; else the request was withdrawn
      continue;
    }
    if (got & kRendezvous) {
      bool complete = false;
      PLAIT_RETURN_IF_ERROR(readRendezvous(peer, m, slot, got, &complete));
      *moved = true;
      if (!complete) return Status::ok();  // one chunk per pass: let other peers progress
      fifo->release();
      ++q.nextRecv;
      continue;
    }
    const size_t n = got & ~kLastStep;
    const bool last = (got & kLastStep) != 0;
    const size_t want = std::min(fifo->shape().stepBytes, m.bytes - m.done);
    if (n != want || last != (m.done + n == m.bytes))
      return invalidUsage("rank " + std::to_string(peer) + " sent a message of " +
                          (last ? std::to_string(m.done + n) : "more than " + std::to_string(m.done + n)) +
                          " bytes where rank " + std::to_string(rank_) + " receives " + std::to_string(m.bytes) +
                          " (ncclSend and ncclRecv counts or types differ)");
    if (n) std::memcpy(m.dst + m.done, slot, n);
    fifo->release();
    m.done += n;
    *moved = true;
    if (last) ++q.nextRecv;
  }
  return Status::ok();
}

// Line messages never wait here: a send goes once the receiver has room, a
// receive once the whole message is in (LineReceiver::ready).
Status P2pBatch::pumpLines(int peer, PeerQueues& q, bool* moved, bool receive) {
  LineSender* out = shm_.p2pLineSend(peer);
  for (; q.nextLineSend < q.lineSends.size(); ++q.nextLineSend, *moved = true) {
    const Message& m = q.lineSends[q.nextLineSend];
    if (!out->trySend(m.src, m.bytes)) break;
  }
  LineReceiver* in = shm_.p2pLineRecv(peer);
  for (; receive && q.nextLineRecv < q.lineRecvs.size(); ++q.nextLineRecv, *moved = true) {
    const Message& m = q.lineRecvs[q.nextLineRecv];
    if (!in->ready(m.bytes)) break;
    PLAIT_RETURN_IF_ERROR(in->recv(m.dst, m.bytes).withContext("from rank " + std::to_string(peer)));
  }
  if (q.nextLineSend < q.lineSends.size() && out->aborted()) return out->abortError();
  if (receive && q.nextLineRecv < q.lineRecvs.size() && in->aborted()) return in->abortError();
  return Status::ok();
}

// Whether a single-copy descriptor may be acted on: only from a local peer
// (its FIFO is in our shared memory, not a network connector's), only when
// cross-memory attach was agreed, only as a whole one-step message, and only
// naming the peer's own process. Anything else is the peer's fault.
Status P2pBatch::checkRendezvous(int peer, uint64_t word, uint64_t flag, const Message& m,
                                 const RendezvousDescriptor& d) const {
  auto refuse = [&](const std::string& why) {
    return remoteError("rank " + std::to_string(peer) + " sent a single-copy descriptor that rank " +
                       std::to_string(rank_) + " refuses: " + why);
  };
  if (!shm_.isLocal(peer)) return refuse("that rank is on another host");
  if (!cma_) return refuse("cross-memory attach was not agreed at connection time");
  if (word != (sizeof(RendezvousDescriptor) | kLastStep | flag) || m.done != 0)  // not mid-message
    return refuse("malformed step (size word " + std::to_string(word & kStepPayloadMask) + ")");
  if (peer >= static_cast<int>(pids_.size()) || pids_[peer] <= 0 || d.pid != pids_[peer])
    return refuse("it names pid " + std::to_string(d.pid) + ", not that rank's process");
  if (d.bytes != m.bytes)
    return invalidUsage("rank " + std::to_string(peer) + " sent a message of " + std::to_string(d.bytes) +
                        " bytes where rank " + std::to_string(rank_) + " receives " + std::to_string(m.bytes) +
                        " (ncclSend and ncclRecv counts or types differ)");
  return Status::ok();
}

// Copies the next chunk of a rendezvous message; *complete once all is in.
Status P2pBatch::readRendezvous(int peer, Message& m, const char* slot, uint64_t word, bool* complete) {
  RendezvousDescriptor d;
  std::memcpy(&d, slot, sizeof(d));
  if (!m.single) PLAIT_RETURN_IF_ERROR(checkRendezvous(peer, word, kRendezvous, m, d));
  m.single = true;
  const int pid = pids_[peer];
  const size_t n = std::min(kCmaChunk, m.bytes - m.done);
  if (int err = cmaRead(pid, m.dst + m.done, d.addr + m.done, n); err != 0)
    return remoteError("reading rank " + std::to_string(peer) + "'s send buffer: " + cmaErrorText(pid, err));
  m.done += n;
  *complete = m.done == m.bytes;
  return Status::ok();
}

// The front send's write once requested: when the peer has answered with
// where to write, one chunk per pass (so other peers progress too), then the
// report (after a failed write too, so the peer fails at once).
Status P2pBatch::pumpPut(FifoSender* fifo, PeerQueues& q, Message& m, bool* moved) {
  const int pid = pids_[m.peer];
  if (q.putStep != 0) {
    uint64_t seen = fifo->replyOf(q.putStep - 1);
    if (seen == 0) {
      if (fifo->peerAborted()) return peerAbortedError(*fifo->waitContext());
      if (nowNs() < q.putGiveUpNs) return Status::ok();
      if (fifo->replaceReply(q.putStep - 1, &seen, kPutWithdrawn)) {  // the message follows in steps
        q.putStep = 0;
        m.single = false;
        m.mayRendezvous = false;
        *moved = true;
        return Status::ok();
      }
    }
    // Answered (or something else the receiver put there): claim the write,
    // unless the receiver revoked its answer first.
    if (seen < kPutFirstAddress || !fifo->replaceReply(q.putStep - 1, &seen, kPutWriting)) {
      q.putErr = ECANCELED;
      m.done = m.bytes;
    } else {
      q.putClaim = q.putStep;
    }
    q.putAddr = seen;
    q.putStep = 0;
    *moved = true;
  }
  if (q.putErr == 0 && m.done < m.bytes) {
    const size_t n = std::min(kCmaChunk, m.bytes - m.done);
    if (int err = cmaWrite(pid, q.putAddr + m.done, m.src + m.done, n); err != 0) {
      q.putErr = err;
      m.done = m.bytes;
    } else {
      m.done += n;
    }
    *moved = true;
    if (m.done < m.bytes) return Status::ok();
  }
  endPut(q, m.peer);
  // The report, after a failed write too, so the peer fails at once. Its step
  // is free once the receiver has released the request's (mayPut: 2 steps).
  char* slot = fifo->tryAcquire();
  if (slot == nullptr) return fifo->peerAborted() ? peerAbortedError(*fifo->waitContext()) : Status::ok();
  const int64_t report = q.putErr;
  std::memcpy(slot, &report, sizeof(report));
  fifo->post(sizeof(report) | kLastStep | kPut);
  *moved = true;
  m.single = false;
  ++q.nextSend;
  const int err = q.putErr;
  q.putErr = 0;
  if (err == ECANCELED)
    return remoteError("rank " + std::to_string(m.peer) + " gave up its receive before this rank wrote the block");
  if (err != 0)
    return remoteError("writing into rank " + std::to_string(m.peer) + "'s receive buffer: " +
                       cmaErrorText(pid, err, /*write=*/true));
  return Status::ok();
}

// A write request, answered with where our buffer is, or after one the
// report that ends the message.
Status P2pBatch::receivePut(int peer, FifoReceiver* fifo, Message& m, const char* slot, uint64_t word) {
  if (!m.put) {
    RendezvousDescriptor d;
    std::memcpy(&d, slot, sizeof(d));
    PLAIT_RETURN_IF_ERROR(checkRendezvous(peer, word, kPut, m, d));
    m.request = fifo->stepIndex();
    // false: withdrawn, the steps after it carry the message
    m.put = fifo->replaceReply(m.request, 0, reinterpret_cast<uint64_t>(m.dst));
    fifo->release();
    return Status::ok();
  }
  if (word != (sizeof(int64_t) | kLastStep | kPut))
    return remoteError("rank " + std::to_string(peer) + " sent a step of size word " +
                       std::to_string(word & kStepPayloadMask) + " where rank " + std::to_string(rank_) +
                       " waits for the report of its single-copy write");
  int64_t report = 0;
  std::memcpy(&report, slot, sizeof(report));
  fifo->release();
  m.put = false;
  m.done = m.bytes;
  if (report != 0)
    return remoteError("rank " + std::to_string(peer) + " could not write its message into rank " +
                       std::to_string(rank_) + "'s receive buffer (errno " + std::to_string(report) + ")");
  return Status::ok();
}

// Answers the write requests already posted to us, so that their writers
// copy while we do (a Gather's root, before it copies its own block).
Status P2pBatch::answerPuts() {
  for (int p = 0; p < nranks_; ++p) {
    PeerQueues& q = peers_[p];
    if (p == rank_ || q.nextRecv >= q.recvs.size() || !shm_.isLocal(p)) continue;
    Message& m = q.recvs[q.nextRecv];
    size_t got = 0;
    FifoReceiver* fifo = shm_.p2pRecv(p);
    const char* slot = fifo->tryAcquire(&got);
    if (slot != nullptr && m.done == 0 && !m.put && (got & kPut))
      PLAIT_RETURN_IF_ERROR(receivePut(p, fifo, m, slot, got));
  }
  return Status::ok();
}

// Marks this rank's claimed write to `peer` done: it touches the peer's
// buffer no more.
void P2pBatch::endPut(PeerQueues& q, int peer) {
  if (q.putClaim == 0) return;
  uint64_t writing = kPutWriting;
  shm_.p2pSend(peer)->replaceReply(q.putClaim - 1, &writing, kPutDone);
  q.putClaim = 0;
}

void P2pBatch::settleWrites() {
  // Our own writes first (a peer may wait for them), then every answer we
  // gave is revoked in one pass; those whose sender had claimed them are
  // waited for, together, until each is done (not merely aborted: an abort
  // does not stop a write under way), its sender is gone, or the deadline.
  for (int p = 0; p < nranks_; ++p)
    if (p != rank_) endPut(peers_[p], p);
  std::vector<int> writing;
  for (int p = 0; p < nranks_; ++p) {
    const PeerQueues& q = peers_[p];
    if (p == rank_ || q.nextRecv >= q.recvs.size() || !q.recvs[q.nextRecv].put) continue;
    const Message& m = q.recvs[q.nextRecv];
    if (!shm_.p2pRecv(p)->replaceReply(m.request, reinterpret_cast<uint64_t>(m.dst), kPutRevoked))
      writing.push_back(p);
  }
  if (writing.empty()) return;
  const Deadline until = Deadline::afterMs(timeoutMs_ >= 0 ? std::min<int64_t>(timeoutMs_, 10000) : 10000);
  for (int p : writing) {
    const Message& m = peers_[p].recvs[peers_[p].nextRecv];
    FifoReceiver* fifo = shm_.p2pRecv(p);
    while (fifo->replyOf(m.request) == kPutWriting && !until.expired() && (pids_[p] <= 0 || processAlive(pids_[p])))
      usleep(20);
  }
}

// Whether the peer has released every step up to our last rendezvous
// descriptor (it has read those buffers).
bool P2pBatch::acked(int peer) {
  PeerQueues& q = peers_[peer];
  if (q.ackStep == 0) return true;
  FifoSender* f = shm_.p2pSend(peer);
  if (f->stepIndex() - f->pending() < q.ackStep) return false;
  q.ackStep = 0;
  return true;
}

bool P2pBatch::anyReady() {
  for (int p = 0; p < nranks_; ++p) {
    PeerQueues& q = peers_[p];
    if (q.ackStep != 0 && (acked(p) || shm_.p2pSend(p)->peerAborted())) return true;
    if (q.nextSend < q.sends.size()) {
      FifoSender* f = shm_.p2pSend(p);
      if (q.putStep != 0 ? !q.putWaits(*f) || nowNs() >= q.putGiveUpNs : f->tryAcquire() != nullptr) return true;
      if (f->peerAborted()) return true;
    }
    if (q.nextRecv < q.recvs.size()) {
      FifoReceiver* f = shm_.p2pRecv(p);
      size_t got = 0;
      if (f->tryAcquire(&got) != nullptr || f->peerAborted()) return true;
    }
    if (q.nextLineRecv < q.lineRecvs.size()) {
      LineReceiver* l = shm_.p2pLineRecv(p);
      if (l->ready(q.lineRecvs[q.nextLineRecv].bytes) || l->aborted()) return true;
    }
    if (q.nextLineSend < q.lineSends.size()) {
      LineSender* l = shm_.p2pLineSend(p);
      if (l->hasRoom(q.lineSends[q.nextLineSend].bytes) || l->aborted()) return true;
    }
  }
  return false;
}

bool P2pBatch::finished() {
  for (int p = 0; p < nranks_; ++p) {
    const PeerQueues& q = peers_[p];
    if (q.nextSend < q.sends.size() || q.nextRecv < q.recvs.size() || q.linesPending() || !acked(p)) return false;
  }
  return true;
}

std::string P2pBatch::pendingText() const {
  std::string text;
  for (int p = 0; p < nranks_; ++p) {
    const PeerQueues& q = peers_[p];
    auto add = [&](const char* dir, const Message& m) {
      text += (text.empty() ? "" : ", ") + std::string(dir) + " rank " + std::to_string(p) + " (" +
              std::to_string(m.done) + " of " + std::to_string(m.bytes) + " bytes)";
    };
    if (q.putStep != 0)
      text += (text.empty() ? "" : ", ") + std::string("send to rank ") + std::to_string(p) +
              " (waiting for it to say where to write)";
    else if (q.nextSend < q.sends.size())
      add("send to", q.sends[q.nextSend]);
    if (q.nextRecv < q.recvs.size()) add("receive from", q.recvs[q.nextRecv]);
    if (q.nextSend == q.sends.size() && q.ackStep != 0)
      text += (text.empty() ? "" : ", ") + std::string("rank ") + std::to_string(p) + " reading our send buffer";
    if (q.nextLineSend < q.lineSends.size()) add("send to", q.lineSends[q.nextLineSend]);
    if (q.nextLineRecv < q.lineRecvs.size()) add("receive from", q.lineRecvs[q.nextLineRecv]);
  }
  return text;
}

Status P2pBatch::post() {
  PLAIT_RETURN_IF_ERROR(checkPeers());
  PLAIT_RETURN_IF_ERROR(checkSelf());
  stageOverlappingSends();
  posted_ = true;
  bool moved = false;
  for (int p = 0; p < nranks_; ++p) {
    PeerQueues& q = peers_[p];
    if (p == rank_) continue;
    if (q.nextSend < q.sends.size()) PLAIT_RETURN_IF_ERROR(pumpSends(q, &moved));
    if (q.nextLineSend < q.lineSends.size()) PLAIT_RETURN_IF_ERROR(pumpLines(p, q, &moved, /*receive=*/false));
  }
  PLAIT_RETURN_IF_ERROR(answerPuts());
  copySelf();
  return Status::ok();
}

// The progress loop. When nothing can move it waits, sleeping on the first
// pending FIFO's word (so that peer's next step wakes it at once; others are
// seen within a 1 ms sleep slice), in bounded waits so every pending peer's
// liveness is checked and the deadline counts from the last progress.
Status P2pBatch::run(const WaitContext& base) {
  const std::vector<int>& pids = pids_;
  if (!posted_) PLAIT_RETURN_IF_ERROR(post());
  const int64_t timeoutMs = base.waitTimeoutMs;
  Deadline deadline = timeoutMs >= 0 ? Deadline::afterMs(timeoutMs) : Deadline::never();
  while (!finished()) {
    bool moved = false;
    // Sends before receives: what we send is what peers wait for.
    for (int p = 0; p < nranks_; ++p) {
      PeerQueues& q = peers_[p];
      if (p != rank_ && q.nextSend < q.sends.size()) PLAIT_RETURN_IF_ERROR(pumpSends(q, &moved));
    }
    for (int p = 0; p < nranks_; ++p) {
      PeerQueues& q = peers_[p];
      if (p != rank_ && q.nextRecv < q.recvs.size()) PLAIT_RETURN_IF_ERROR(pumpRecvs(q, &moved));
      if (p != rank_ && q.linesPending()) PLAIT_RETURN_IF_ERROR(pumpLines(p, q, &moved));
    }
    // Every send posted, a single-copy one still unreleased: a peer that
    // aborted will never release it (anyReady says so at once, so without
    // this the loop would spin here instead of failing).
    for (int p = 0; p < nranks_; ++p)
      if (p != rank_ && peers_[p].ackStep != 0 && !acked(p) && shm_.p2pSend(p)->peerAborted())
        return peerAbortedError(*shm_.p2pSend(p)->waitContext());
    if (moved) {
      if (timeoutMs >= 0) deadline = Deadline::afterMs(timeoutMs);
      continue;
    }
    int waitPeer = -1;
    std::atomic<uint32_t>* word = nullptr;
    std::atomic<uint32_t>* sleepers = nullptr;
    // An unanswered write request first: its answer wakes us, and the wait
    // ends when it is to be withdrawn.
    Deadline waitUntilDeadline = deadline;
    for (int p = 0; p < nranks_; ++p) {
      const PeerQueues& q = peers_[p];
      if (q.putStep == 0 || (waitPeer >= 0 && q.putGiveUpNs >= peers_[waitPeer].putGiveUpNs)) continue;
      FifoControl* c = shm_.p2pSend(p)->control();
      word = detail::futexWordOf(&c->head);
      sleepers = &c->sendSleepers;
      waitPeer = p;
    }
    if (waitPeer >= 0) {
      const uint64_t now = nowNs(), giveUp = peers_[waitPeer].putGiveUpNs;
      const Deadline d = Deadline::after(std::chrono::nanoseconds(giveUp > now ? giveUp - now : 0));
      if (d.at() < waitUntilDeadline.at()) waitUntilDeadline = d;
    }
    for (int p = 0; p < nranks_ && waitPeer < 0; ++p) {
      const PeerQueues& q = peers_[p];
      if (q.nextRecv < q.recvs.size()) {
        FifoControl* c = shm_.p2pRecv(p)->control();
        word = detail::futexWordOf(&c->tail);
        sleepers = &c->recvSleepers;
        waitPeer = p;
      } else if (q.nextLineRecv < q.lineRecvs.size()) {
        word = shm_.p2pLineRecv(p)->doorbell();
        sleepers = shm_.p2pLineRecv(p)->sleepers();
        waitPeer = p;
      } else if (q.nextLineSend < q.lineSends.size()) {
        word = shm_.p2pLineSend(p)->creditWord();
        sleepers = shm_.p2pLineSend(p)->creditSleepers();
        waitPeer = p;
      } else if (q.nextSend < q.sends.size() || q.ackStep != 0) {
        FifoControl* c = shm_.p2pSend(p)->control();
        word = detail::futexWordOf(&c->head);
        sleepers = &c->sendSleepers;
        waitPeer = p;
      }
    }
    if (waitPeer < 0) continue;  // the last acknowledgement came in since finished() looked
    WaitContext ctx = base;
    ctx.peerRank = waitPeer;
    ctx.peerPid = pids[waitPeer];
    ctx.what = "point-to-point operations";
    ctx.waitTimeoutMs = 100;
    ctx.deadline = waitUntilDeadline;
    Status s = waitUntil([this] { return anyReady(); }, word, sleepers, ctx);
    if (s.isOk()) continue;
    if (ctx.abortFlag && ctx.abortFlag->load(std::memory_order_acquire)) return s;
    const bool timedOut = s.code() == Code::kRemoteError && s.message().find("timed out") != std::string::npos;
    if (timedOut && !deadline.expired() && waitUntilDeadline.expired()) continue;  // a request to withdraw
    if (deadline.expired())
      return remoteError("timed out after " + std::to_string(timeoutMs) +
                         " ms without progress on point-to-point operations; pending: " + pendingText());
    for (int p = 0; p < nranks_; ++p) {
      const PeerQueues& q = peers_[p];
      if (p != rank_ && q.pending() && pids[p] > 0 && !processAlive(pids[p]))
        return remoteError("rank " + std::to_string(p) + " (pid " + std::to_string(pids[p]) +
                           ") died during point-to-point operations");
    }
    if (!timedOut) return s;
  }
  return Status::ok();
}

}  // namespace

Status checkP2pSettings() {
  for (const auto* p :
       {&kScatterCmaMinBytes, &kScatterCmaMaxBytes, &kPutMinBytes, &kPutMaxBytes, &kPutWaitUs})
    if (p->get() < 0)
      return invalidArgument("PLAIT_" + std::string(p->name()) + " is " + std::to_string(p->get()) +
                             "; must be at least 0");
  if (kPutWaitUs.get() > 10'000'000)
    return invalidArgument("PLAIT_P2P_PUT_WAIT_US is " + std::to_string(kPutWaitUs.get()) +
                           "; must be at most 10000000 (10 s)");
  return Status::ok();
}

int32_t lineP2pSetting() {
  return static_cast<int32_t>(std::clamp<int64_t>(kLineP2pMaxBytes.get(), -1, INT32_MAX));
}

size_t lineP2pMaxBytes(int64_t setting, bool corePerRankPair) {
  if (setting < 0) return corePerRankPair ? 2048 : 1024;
  return static_cast<size_t>(std::min<int64_t>(setting, kLineMaxMessageBytes));
}

// AlltoAll, Gather and Scatter with small blocks and every rank on this
// host: each block is one message through the pair's line FIFO
// (transport/line_fifo.h), whose first byte costs one cache-line hand-off
// where a point-to-point FIFO step costs two or three, and no batch is
// built. A rank posts all its sends before its first receive, as the
// one-shot AllReduce does, and a FIFO holds at least two messages
// (transport/line_fifo.h), so a send never
// waits for a peer that is waiting for this rank: its messages of earlier
// operations were consumed before that peer could send its own (a group's
// batch may have posted more ahead of them: the send then waits, bounded by
// the timeout). These are the pair's point-to-point line FIFO, which a
// group's batch uses for the same blocks in call order; the collectives'
// line messages (one-shots, the direct path's agreement) never enter it. A
// peer that passed another count is caught by the op board or by the line's
// size.
Status Communicator::runLineP2p(const Task& t) {
  const size_t bytes = t.count * typeSize(t.type);
  const char* in = static_cast<const char*>(t.sendbuff);
  char* out = static_cast<char*>(t.recvbuff);
  auto copySelf = [bytes](char* dst, const char* src) {
    if (dst != src) std::memmove(dst, src, bytes);
  };
  auto peerAfter = [this](int i) { return (rank_ + i) % nranks_; };  // spreads the pairs: i = 1 .. n-1
  switch (t.coll) {
    case CollType::kAlltoAll:
      for (int i = 1; i < nranks_; ++i) {
        const int p = peerAfter(i);
        PLAIT_RETURN_IF_ERROR(shm_->p2pLineSend(p)->send(in + p * bytes, bytes));
      }
      copySelf(out + rank_ * bytes, in + rank_ * bytes);  // in place: our block stays
      for (int i = 1; i < nranks_; ++i) {
        const int p = peerAfter(nranks_ - i);
        PLAIT_RETURN_IF_ERROR(shm_->p2pLineRecv(p)->recv(out + p * bytes, bytes));
      }
      return Status::ok();
    case CollType::kGather:
      if (rank_ != t.root) return shm_->p2pLineSend(t.root)->send(in, bytes);
      copySelf(out + rank_ * bytes, in);
      for (int i = 1; i < nranks_; ++i) {
        const int p = peerAfter(i);
        PLAIT_RETURN_IF_ERROR(shm_->p2pLineRecv(p)->recv(out + p * bytes, bytes));
      }
      return Status::ok();
    case CollType::kScatter:
      if (rank_ != t.root) return shm_->p2pLineRecv(t.root)->recv(out, bytes);
      for (int i = 1; i < nranks_; ++i) {
        const int p = peerAfter(i);
        PLAIT_RETURN_IF_ERROR(shm_->p2pLineSend(p)->send(in + p * bytes, bytes));
      }
      copySelf(out, in + rank_ * bytes);
      return Status::ok();
    default:
      return internalError(std::string(collName(t.coll)) + " has no line-FIFO form");
  }
}

// Expands every task into messages of one batch and runs it. `first`, when
// given, runs once the batch's sends are posted (all that fit in the FIFOs,
// and every single-copy descriptor) and before it waits for anything: the
// group's other operations (runGroup), which a peer may be running ahead of
// its own share of the batch.
Status Communicator::runP2p(std::span<const Task> tasks, const std::function<Status()>& first, bool firstWaits) {
  P2pBatch batch(*shm_, rank_, nranks_, cma_, pids_, static_cast<uint64_t>(kPutWaitUs.get()) * 1000, timeoutMs_);
  const int64_t scatterCmaMin = kScatterCmaMinBytes.get() * (oversubscribed_ ? 2 : 1);
  const int64_t scatterCmaMax = kScatterCmaMaxBytes.get();
  // A write needs its sender in the loop until it is answered: not while a
  // group's other collectives run (`first`, when it waits for peers).
  const int64_t putMin = kPutMinBytes.get(), putMax = first && firstWaits ? -1 : kPutMaxBytes.get();
  for (const Task& t : tasks) {
    if (t.peer >= nranks_ && (t.coll == CollType::kSend || t.coll == CollType::kRecv))
      return invalidArgument("peer " + std::to_string(t.peer) + " is not a rank of this communicator");
    const size_t bytes = t.count * typeSize(t.type);
    const char* in = static_cast<const char*>(t.sendbuff);
    char* out = static_cast<char*>(t.recvbuff);
    // Small blocks to and from other ranks go as runLineP2p sends them
    // outside a group, so a rank may group these calls and its peers not.
    const bool lines = bytes > 0 && bytes <= lineP2pMaxBytes_;
    const bool putBlock = static_cast<int64_t>(bytes) >= putMin && static_cast<int64_t>(bytes) <= putMax;
    auto send = [&](int p, const char* src, bool mayRendezvous, bool put = false) {
      if (lines && p != rank_) batch.lineSend(p, src, bytes);
      else batch.send(p, src, bytes, mayRendezvous, put);
    };
    auto recv = [&](int p, char* dst) {
      if (lines && p != rank_) batch.lineRecv(p, dst, bytes);
      else batch.recv(p, dst, bytes);
    };
    switch (t.coll) {
      case CollType::kSend: batch.send(t.peer, in, bytes); break;
      case CollType::kRecv: batch.recv(t.peer, out, bytes); break;
      case CollType::kAlltoAll:
        for (int p = 0; p < nranks_; ++p) {
          // Read in place where every local rank has a core of its own
          // (alltoallCma_), else written in the window: a sender waits
          // for no descheduled reader longer than P2P_PUT_WAIT_US.
          send(p, in + p * bytes, alltoallCma_ || (alltoallPut_ && putBlock), /*put=*/alltoallPut_ && putBlock);
          recv(p, out + p * bytes);
        }
        break;
      // Gather's root meets all the others: read by the root, single copies
      // would do alone what the FIFO splits between sender and receiver
      // (perf/host/p2p_cma.sh: 1.15-1.6x slower from 4 MiB, no better
      // below), so its blocks of P2P_PUT_MIN_BYTES to P2P_PUT_MAX_BYTES are
      // written by their senders instead (P2pBatch: a write), while the root
      // copies its own block. In Scatter every other
      // rank reads its own block, at once, and the root copies nothing:
      // 0.77-0.85x the FIFO's time for blocks of 128-256 KiB at 2 ranks; at
      // 4 ranks on 2 cores the readers take turns and blocks of 64-128 KiB
      // lose (1.3-1.6x), hence the doubled minimum there. From 1 MiB of the
      // root's buffer the direct path (direct.cc) takes Scatter anyway
      // (perf/results/host/scatter_cma.md).
      case CollType::kGather:
        send(t.root, in, putBlock, /*put=*/true);
        if (rank_ == t.root)
          for (int p = 0; p < nranks_; ++p) recv(p, out + p * bytes);
        break;
      case CollType::kScatter:
        if (rank_ == t.root) {
          const auto block = static_cast<int64_t>(bytes);
          const bool single = block >= scatterCmaMin && block <= scatterCmaMax;
          for (int p = 0; p < nranks_; ++p) send(p, in + p * bytes, single);
        }
        recv(t.root, out);
        break;
      default:
        return internalError(std::string(collName(t.coll)) + " is not a point-to-point operation");
    }
  }
  WaitContext base;
  base.abortFlag = &abortFlag_;
  base.waitTimeoutMs = timeoutMs_;
  base.oversubscribed = oversubscribed_;
  base.dedicatedCore = dedicatedCores_;  // only set without network peers or with CPUs to spare
  if (first) {
    PLAIT_RETURN_IF_ERROR(batch.post());
    // Peers may have our messages while ours from them will never be read:
    // whatever `first` failed on (a bad argument too), the pairs' FIFOs are
    // out of step and the communicator cannot go on.
    if (Status s = first(); !s.isOk()) {
      breakWith(s);
      return s;
    }
  }
  return batch.run(base);
}

}  // namespace plait
