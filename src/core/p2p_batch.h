// p2p_batch.h — the point-to-point batch: every Send and Recv of a group,
// with the group's AlltoAll, Gather and Scatter when it has sends or
// receives (Communicator::runGroupTasks), or a single call, expanded into
// messages by core/p2p.cc's runP2p. Its loop moves whatever can move now —
// a free step towards any peer, a posted step from any peer — so the order
// of calls inside a group never matters: an all-to-all written as n sends
// then n receives completes, as it must with NCCL. Messages to the same peer
// travel in call order through the pair's point-to-point FIFO; each FIFO step
// carries up to one step of payload and the last step of a message is
// flagged, so a Send and a Recv that disagree on the size are reported
// instead of shifting every later message. Sends and receives with this
// rank itself are paired in call order and copied directly. Large messages
// between local processes go by a single copy: read by the receiver, or
// written by the sender (p2p_batch.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/wait.h"
#include "plait/status.hpp"
#include "transport/fifo.h"
#include "transport/shm/shm_transport.h"

namespace plait::p2p {

struct RendezvousDescriptor;  // p2p_batch.cc

// One message of the batch: a send or a receive, and how far it got.
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
  bool own = false;  // to or from this rank itself: a collective's own block (copyOwn), paired apart
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
  uint64_t firstStep = 0;    // the send FIFO's step index when the batch began (mayPut)
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
    ackStep = putStep = putClaim = firstStep = 0;
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

class P2pBatch {
 public:
  // cma: local peers may read this process's memory (large messages go by rendezvous).
  // pids: every rank's process id as the bootstrap reported it at connection time.
  P2pBatch(ShmTransport& shm, int rank, int nranks, bool cma, const std::vector<int>& pids, uint64_t putWaitNs,
           int64_t timeoutMs);
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
  // A collective's own block, from where this rank's input holds it to where
  // its output wants it: a send to itself and a receive from itself that
  // pair with each other, apart from the caller's sends to itself (which pair
  // with its receives from itself in call order), so a grouped ncclSend to
  // self never lands in a Gather's block. Copied when the batch is posted,
  // staged first like any send whose buffer a receive of the batch writes.
  void copyOwn(const void* src, void* dst, size_t bytes) {
    Message m{rank_, static_cast<const char*>(src), nullptr, bytes, 0, false};
    m.own = true;
    peers_[rank_].sends.push_back(m);
    m.src = nullptr;
    m.dst = static_cast<char*>(dst);
    peers_[rank_].recvs.push_back(m);
  }
  // A block through the line FIFO (another rank: the blocks with this rank
  // itself pair with send() and recv(), or copyOwn()).
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
  template <typename F>
  bool forSelfPairs(F&& f) const;
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
  // Whether send m (the front of q) may go by a write: the pid to write into
  // is known, a step is left for the report, and if the request is withdrawn
  // the message fits beside it in the FIFO as it did without it (or did not
  // fit either). Judged on the whole FIFO, not on the steps free now: by the
  // free steps a sender that had once withdrawn and run ahead stayed on the
  // FIFO path for good (0.84x the time at 128-512 KiB with the whole FIFO's
  // rule). Except where m and the sends after it would fill exactly the steps
  // the receiver leaves free while it runs its group's other collectives
  // first: a withdrawn request's step would then leave the last of them
  // waiting for it until the timeout (test_gather_put). Those steps are the
  // ones free now where the receiver groups this rank's earlier calls with
  // this one, and those that this batch has not taken where it takes them
  // first (as it does when it calls them alike); the exact fit of either goes
  // through the FIFO. Two cases are left: a receiver that groups some of this
  // rank's earlier calls with this one and not others (the steps free lie
  // between the two), and one that groups this call with this rank's later
  // sends to it (unknown when the block is judged).
  bool mayPut(const FifoSender& fifo, const PeerQueues& q, const Message& m) const;
  // Steps the sends of q from m on take through the FIFO without writes
  // (a single-copy read's descriptor: one).
  uint64_t fifoStepsFrom(const PeerQueues& q, size_t first, size_t stepBytes) const;
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

}  // namespace plait::p2p
