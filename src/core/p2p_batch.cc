// p2p_batch.cc — the point-to-point batch's progress loop and its
// single-copy protocols (p2p_batch.h).
#include "core/p2p_batch.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>

#include "base/cma.h"
#include "base/config.h"
#include "plait/clock.hpp"

namespace plait::p2p {
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

PLAIT_PARAM_INT(kCmaMinBytes, "P2P_CMA_MIN_BYTES", 16 << 10,
                "point-to-point messages from this size up are read in place from the sending process "
                "(single copy) when cross-memory attach is permitted");

BatchStorage& threadStorage() {
  thread_local BatchStorage storage;
  return storage;
}

}  // namespace

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
// FIFO beside the request's step, or did not fit without it either, and not
// where the batch's sends from it on would fill exactly the FIFO steps left
// to them (mayPut).
struct RendezvousDescriptor {
  uint64_t bytes;
  uint64_t addr;
  int32_t pid;
  int32_t reserved;
};

P2pBatch::P2pBatch(ShmTransport& shm, int rank, int nranks, bool cma, const std::vector<int>& pids, uint64_t putWaitNs,
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

// Calls f(send, receive) for each pair of messages to and from this rank
// itself, in call order within each kind (the caller's, a collective's own
// blocks: copyOwn); returns false where a kind's counts differ (f then saw
// that kind's first pairs only).
template <typename F>
bool P2pBatch::forSelfPairs(F&& f) const {
  const PeerQueues& q = peers_[rank_];
  for (bool own : {false, true}) {
    size_t i = 0, j = 0;
    for (;;) {
      while (i < q.sends.size() && q.sends[i].own != own) ++i;
      while (j < q.recvs.size() && q.recvs[j].own != own) ++j;
      if (i == q.sends.size() || j == q.recvs.size()) {
        if (i != q.sends.size() || j != q.recvs.size()) return false;
        break;
      }
      f(q.sends[i++], q.recvs[j++]);
    }
  }
  return true;
}

Status P2pBatch::checkSelf() const {
  const Message* badSend = nullptr;
  const Message* badRecv = nullptr;
  const bool paired = forSelfPairs([&](const Message& send, const Message& recv) {
    if (send.bytes != recv.bytes && badSend == nullptr) {
      badSend = &send;
      badRecv = &recv;
    }
  });
  const PeerQueues& q = peers_[rank_];
  if (!paired) {
    auto users = [](const std::vector<Message>& v) {
      return std::count_if(v.begin(), v.end(), [](const Message& m) { return !m.own; });
    };
    return invalidUsage("rank " + std::to_string(rank_) + " posted " + std::to_string(users(q.sends)) +
                        " send(s) to itself but " + std::to_string(users(q.recvs)) + " receive(s) from itself");
  }
  if (badSend != nullptr)
    return invalidUsage("send to self of " + std::to_string(badSend->bytes) + " bytes paired with a receive of " +
                        std::to_string(badRecv->bytes) + " bytes");
  return Status::ok();
}

void P2pBatch::copySelf() {
  forSelfPairs([](const Message& send, const Message& recv) {
    if (send.bytes && send.src != recv.dst) std::memmove(recv.dst, send.src, send.bytes);
  });
  PeerQueues& q = peers_[rank_];
  q.nextSend = q.sends.size();
  q.nextRecv = q.recvs.size();
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
    if (m.done == 0 && m.mayRendezvous && rendezvous(m.peer, m.bytes) && (!m.put || mayPut(*fifo, q, m))) {
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

bool P2pBatch::mayPut(const FifoSender& fifo, const PeerQueues& q, const Message& m) const {
  const uint64_t nSteps = static_cast<uint64_t>(fifo.shape().nSteps), step = fifo.shape().stepBytes;
  const uint64_t need = (m.bytes + step - 1) / step;
  if (pids_[m.peer] <= 0 || nSteps < 2 || (need + 1 > nSteps && need <= nSteps)) return false;
  // The step m is about to take is still counted free (acquired, not posted).
  const uint64_t tail = fifo.stepIndex(), head = tail - fifo.pending();
  const uint64_t freeNow = nSteps - (tail - head);
  const uint64_t freeForBatch = nSteps - (tail - std::max(head, q.firstStep));
  const uint64_t rest = fifoStepsFrom(q, q.nextSend, step);
  return rest != freeNow && rest != freeForBatch;
}

uint64_t P2pBatch::fifoStepsFrom(const PeerQueues& q, size_t first, size_t stepBytes) const {
  uint64_t steps = 0;
  for (size_t i = first; i < q.sends.size(); ++i) {
    const Message& x = q.sends[i];
    const bool read = x.mayRendezvous && !x.put && rendezvous(x.peer, x.bytes);
    steps += read || x.bytes == 0 ? 1 : (x.bytes + stepBytes - 1) / stepBytes;
  }
  return steps;
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
    if (q.nextSend < q.sends.size()) {
      q.firstStep = shm_.p2pSend(p)->stepIndex();
      PLAIT_RETURN_IF_ERROR(pumpSends(q, &moved));
    }
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

}  // namespace plait::p2p
