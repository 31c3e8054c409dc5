// p2p.cc — point-to-point operations and the collectives built from them
// (AlltoAll, Gather, Scatter), run as one batch with a progress loop.
//
// A batch is every Send and Recv of a group (or a single call). The loop
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
#include <cstring>
#include <string>
#include <vector>

#include "algorithms/types.h"
#include "base/wait.h"
#include "core/comm.h"

namespace plait {
namespace {

constexpr uint64_t kLastStep = uint64_t(1) << 63;  // in a step's size: the message ends here

struct Message {
  int peer = 0;
  const char* src = nullptr;  // sends
  char* dst = nullptr;        // receives
  size_t bytes = 0;
  size_t done = 0;
};

// Per peer, the sends and the receives in call order, and how far each got.
struct PeerQueues {
  std::vector<Message> sends, recvs;
  size_t nextSend = 0, nextRecv = 0;
};

class P2pBatch {
 public:
  P2pBatch(ShmTransport& shm, int rank, int nranks) : shm_(shm), rank_(rank), peers_(nranks) {}

  void send(int peer, const void* src, size_t bytes) {
    peers_[peer].sends.push_back(Message{peer, static_cast<const char*>(src), nullptr, bytes, 0});
  }
  void recv(int peer, void* dst, size_t bytes) {
    peers_[peer].recvs.push_back(Message{peer, nullptr, static_cast<char*>(dst), bytes, 0});
  }
  Status run(const WaitContext& base, const std::vector<int>& pids);

 private:
  Status copySelf();
  Status checkPeers() const;
  // Moves as many steps as the FIFOs allow; sets *moved if any moved.
  Status pumpSends(PeerQueues& q, bool* moved);
  Status pumpRecvs(PeerQueues& q, bool* moved);
  bool anyReady();
  bool finished() const;
  std::string pendingText() const;

  ShmTransport& shm_;
  int rank_;
  std::vector<PeerQueues> peers_;
};

Status P2pBatch::copySelf() {
  PeerQueues& q = peers_[rank_];
  if (q.sends.size() != q.recvs.size())
    return invalidUsage("rank " + std::to_string(rank_) + " posted " + std::to_string(q.sends.size()) +
                        " send(s) to itself but " + std::to_string(q.recvs.size()) + " receive(s) from itself");
  for (size_t i = 0; i < q.sends.size(); ++i) {
    if (q.sends[i].bytes != q.recvs[i].bytes)
      return invalidUsage("send to self of " + std::to_string(q.sends[i].bytes) + " bytes paired with a receive of " +
                          std::to_string(q.recvs[i].bytes) + " bytes");
    if (q.sends[i].bytes && q.sends[i].src != q.recvs[i].dst)
      std::memmove(q.recvs[i].dst, q.sends[i].src, q.sends[i].bytes);
  }
  q.nextSend = q.nextRecv = q.sends.size();
  return Status::ok();
}

Status P2pBatch::checkPeers() const {
  for (int p = 0; p < static_cast<int>(peers_.size()); ++p) {
    const PeerQueues& q = peers_[p];
    if (p == rank_ || (q.sends.empty() && q.recvs.empty())) continue;
    if (!shm_.isLocal(p))
      return invalidUsage("rank " + std::to_string(p) +
                          " is on another host, and network transports are not built yet");
  }
  return Status::ok();
}

Status P2pBatch::pumpSends(PeerQueues& q, bool* moved) {
  FifoSender* fifo = shm_.p2pSend(q.sends.front().peer);
  const size_t step = fifo->shape().stepBytes;
  while (q.nextSend < q.sends.size()) {
    Message& m = q.sends[q.nextSend];
    char* slot = fifo->tryAcquire();
    if (slot == nullptr) {
      if (fifo->peerAborted()) return peerAbortedError(*fifo->waitContext());
      return Status::ok();
    }
    const size_t n = std::min(step, m.bytes - m.done);
    if (n) std::memcpy(slot, m.src + m.done, n);
    m.done += n;
    const bool last = m.done == m.bytes;
    fifo->post(n | (last ? kLastStep : 0));
    *moved = true;
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

bool P2pBatch::anyReady() {
  for (int p = 0; p < static_cast<int>(peers_.size()); ++p) {
    PeerQueues& q = peers_[p];
    if (q.nextSend < q.sends.size()) {
      FifoSender* f = shm_.p2pSend(p);
      if (f->tryAcquire() != nullptr || f->peerAborted()) return true;
    }
    if (q.nextRecv < q.recvs.size()) {
      FifoReceiver* f = shm_.p2pRecv(p);
      size_t got = 0;
      if (f->tryAcquire(&got) != nullptr || f->peerAborted()) return true;
    }
  }
  return false;
}

bool P2pBatch::finished() const {
  for (const PeerQueues& q : peers_)
    if (q.nextSend < q.sends.size() || q.nextRecv < q.recvs.size()) return false;
  return true;
}

std::string P2pBatch::pendingText() const {
  std::string text;
  for (int p = 0; p < static_cast<int>(peers_.size()); ++p) {
    const PeerQueues& q = peers_[p];
    auto add = [&](const char* dir, const Message& m) {
      text += (text.empty() ? "" : ", ") + std::string(dir) + " rank " + std::to_string(p) + " (" +
              std::to_string(m.done) + " of " + std::to_string(m.bytes) + " bytes)";
    };
    if (q.nextSend < q.sends.size()) add("send to", q.sends[q.nextSend]);
    if (q.nextRecv < q.recvs.size()) add("receive from", q.recvs[q.nextRecv]);
  }
  return text;
}

// The progress loop. When nothing can move it waits, sleeping on the first
// pending FIFO's word (so that peer's next step wakes it at once; others are
// seen within a 1 ms sleep slice), in bounded waits so every pending peer's
// liveness is checked and the deadline counts from the last progress.
Status P2pBatch::run(const WaitContext& base, const std::vector<int>& pids) {
  PLAIT_RETURN_IF_ERROR(checkPeers());
  PLAIT_RETURN_IF_ERROR(copySelf());
  const int64_t timeoutMs = base.waitTimeoutMs;
  Deadline deadline = timeoutMs >= 0 ? Deadline::afterMs(timeoutMs) : Deadline::never();
  while (!finished()) {
    bool moved = false;
    // Sends before receives: a message that fits in the FIFO has left
    // before anything arrives, which keeps the in-place exchanges of
    // nccl-tests' sendrecv (send and receive buffers equal) correct.
    for (int p = 0; p < static_cast<int>(peers_.size()); ++p) {
      PeerQueues& q = peers_[p];
      if (p != rank_ && q.nextSend < q.sends.size()) PLAIT_RETURN_IF_ERROR(pumpSends(q, &moved));
    }
    for (int p = 0; p < static_cast<int>(peers_.size()); ++p) {
      PeerQueues& q = peers_[p];
      if (p != rank_ && q.nextRecv < q.recvs.size()) PLAIT_RETURN_IF_ERROR(pumpRecvs(q, &moved));
    }
    if (moved) {
      if (timeoutMs >= 0) deadline = Deadline::afterMs(timeoutMs);
      continue;
    }
    int waitPeer = -1;
    std::atomic<uint32_t>* word = nullptr;
    std::atomic<uint32_t>* sleepers = nullptr;
    for (int p = 0; p < static_cast<int>(peers_.size()) && waitPeer < 0; ++p) {
      const PeerQueues& q = peers_[p];
      if (q.nextRecv < q.recvs.size()) {
        FifoControl* c = shm_.p2pRecv(p)->control();
        word = detail::futexWordOf(&c->tail);
        sleepers = &c->recvSleepers;
        waitPeer = p;
      } else if (q.nextSend < q.sends.size()) {
        FifoControl* c = shm_.p2pSend(p)->control();
        word = detail::futexWordOf(&c->head);
        sleepers = &c->sendSleepers;
        waitPeer = p;
      }
    }
    WaitContext ctx = base;
    ctx.peerRank = waitPeer;
    ctx.peerPid = pids[waitPeer];
    ctx.what = "point-to-point operations";
    ctx.waitTimeoutMs = 100;
    ctx.deadline = deadline;
    Status s = waitUntil([this] { return anyReady(); }, word, sleepers, ctx);
    if (s.isOk()) continue;
    if (ctx.abortFlag && ctx.abortFlag->load(std::memory_order_acquire)) return s;
    if (deadline.expired())
      return remoteError("timed out after " + std::to_string(timeoutMs) +
                         " ms without progress on point-to-point operations; pending: " + pendingText());
    for (int p = 0; p < static_cast<int>(peers_.size()); ++p) {
      const PeerQueues& q = peers_[p];
      const bool pending = q.nextSend < q.sends.size() || q.nextRecv < q.recvs.size();
      if (p != rank_ && pending && pids[p] > 0 && !processAlive(pids[p]))
        return remoteError("rank " + std::to_string(p) + " (pid " + std::to_string(pids[p]) +
                           ") died during point-to-point operations");
    }
    if (s.code() != Code::kRemoteError || s.message().find("timed out") == std::string::npos) return s;
  }
  return Status::ok();
}

}  // namespace

// Expands every task into messages of one batch and runs it.
Status Communicator::runP2p(const std::vector<Task>& tasks) {
  P2pBatch batch(*shm_, rank_, nranks_);
  std::vector<std::vector<char>> staging;  // in-place AlltoAll inputs
  for (const Task& t : tasks) {
    if (t.peer >= nranks_ && (t.coll == CollType::kSend || t.coll == CollType::kRecv))
      return invalidArgument("peer " + std::to_string(t.peer) + " is not a rank of this communicator");
    const size_t bytes = t.count * typeSize(t.type);
    const char* in = static_cast<const char*>(t.sendbuff);
    char* out = static_cast<char*>(t.recvbuff);
    switch (t.coll) {
      case CollType::kSend: batch.send(t.peer, in, bytes); break;
      case CollType::kRecv: batch.recv(t.peer, out, bytes); break;
      case CollType::kAlltoAll:
        if (in == out && bytes && nranks_ > 1) {  // blocks would be overwritten before they are sent
          staging.emplace_back(in, in + bytes * nranks_);
          in = staging.back().data();
        }
        for (int p = 0; p < nranks_; ++p) {
          batch.send(p, in + p * bytes, bytes);
          batch.recv(p, out + p * bytes, bytes);
        }
        break;
      case CollType::kGather:
        batch.send(t.root, in, bytes);
        if (rank_ == t.root)
          for (int p = 0; p < nranks_; ++p) batch.recv(p, out + p * bytes, bytes);
        break;
      case CollType::kScatter:
        if (rank_ == t.root)
          for (int p = 0; p < nranks_; ++p) batch.send(p, in + p * bytes, bytes);
        batch.recv(t.root, out, bytes);
        break;
      default:
        return internalError(std::string(collName(t.coll)) + " is not a point-to-point operation");
    }
  }
  WaitContext base;
  base.abortFlag = &abortFlag_;
  base.waitTimeoutMs = timeoutMs_;
  base.oversubscribed = oversubscribed_;
  return batch.run(base, pids_);
}

}  // namespace plait
