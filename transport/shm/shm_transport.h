// shm_transport.h — connectors between ranks of one host over shared memory.
//
// Ring and point-to-point edges to ranks on other hosts are not built here:
// the network transport's connectors are passed in (ShmTransportOptions) and
// handed out by the same accessors, so the executor need not tell them apart.
//
// Each rank creates one shared segment that holds every FIFO it receives on:
// one ring FIFO per channel (from its ring predecessor) and one mesh FIFO per
// other local rank (for small-message collectives) and one point-to-point FIFO
// per other local rank. Senders
// map their receivers' segments, so payloads are written into the memory of
// the rank that reads them. Segments are unlinked as soon as every peer has
// mapped them: a process that dies later leaks nothing. One that dies before
// leaves its segment linked: the survivors' failed connect removes it (by the
// dead peer's pid), and every connect removes segments of dead creators.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "base/shm.h"
#include "base/wait.h"
#include "plait/status.hpp"
#include "transport/fifo.h"
#include "transport/line_fifo.h"
#include "transport/oob.h"

namespace plait {

struct ShmTransportOptions {
  int nChannels = 1;
  FifoShape ring{8, 128 << 10};
  FifoShape mesh{4, 32 << 10};
  FifoShape p2p{32, 16 << 10};  // point-to-point FIFOs between local ranks (Send/Recv, AlltoAll, Gather, Scatter)
  // The network transport's point-to-point connectors to remote ranks
  // (connectNetworkEdges): their steps cross a network, where bigger steps
  // cost less per byte; checked between the ranks of different hosts.
  FifoShape netP2p{8, 64 << 10};
  std::vector<int> ringPrev;  // per channel: the rank this rank receives from
  std::vector<int> ringNext;  // per channel: the rank this rank sends to
  std::vector<int> localRanks;  // ranks on this host, ascending (includes ours)
  std::vector<int> pids;        // pid of every rank (for liveness checks)
  const std::atomic<uint32_t>* abortFlag = nullptr;
  bool oversubscribed = false;
  // Every local rank has CPUs of its own (base/cpu_mask.h): the connectors'
  // waits spin rather than yield (WaitContext::dedicatedCore).
  bool dedicatedCores = false;
  int localCpus = 0;  // CPUs the local ranks may run on together (0: unknown)
  int64_t waitTimeoutMs = -1;  // bound on each wait of a connector (PLAIT_TIMEOUT)
  // Up to this many bytes of segments in all (every local rank's, the same
  // size each), they are allocated when created and mapped at once, in the
  // creator whole and in each sender the parts it writes; beyond it pages
  // come on first use, so a job that never uses its mesh or point-to-point
  // FIFOs does not hold them (at 64 local ranks the segments total 672 MiB).
  size_t reserveBudgetBytes = size_t(256) << 20;
  // Connectors to ranks on other hosts (a network transport's, not owned),
  // handed out where a ring neighbour or a point-to-point peer is not local:
  // per channel, and per rank. Empty or null: that edge has none.
  std::vector<FifoSender*> remoteRingSend;
  std::vector<FifoReceiver*> remoteRingRecv;
  std::vector<FifoSender*> remoteP2pSend;
  std::vector<FifoReceiver*> remoteP2pRecv;
};

class ShmTransport {
 public:
  // Collective over all ranks of the communicator (every rank calls it, also
  // ranks with no local peers). Blocks until connected or the deadline.
  static Result<std::unique_ptr<ShmTransport>> connect(OobExchange& oob, const ShmTransportOptions& options,
                                                       Deadline deadline);
  ~ShmTransport();

  // The ring connectors of a channel: shared memory to a local neighbour,
  // the network transport's to a remote one.
  FifoSender* ringSend(int channel) { return ringSendAt_[channel]; }
  FifoReceiver* ringRecv(int channel) { return ringRecvAt_[channel]; }
  // Null when peer is not on this host (or is this rank).
  FifoSender* meshSend(int peer) { return meshSend_[peer].get(); }
  FifoReceiver* meshRecv(int peer) { return meshRecv_[peer].get(); }
  // Point-to-point connectors to a peer (shared memory when local, else the
  // network transport's; null if there is none), apart from the mesh so that
  // unmatched user messages can never be mistaken for a collective's data.
  FifoSender* p2pSend(int peer) { return p2pSendAt_[peer]; }
  FifoReceiver* p2pRecv(int peer) { return p2pRecvAt_[peer]; }
  // Cache-line FIFOs to local peers (transport/line_fifo.h), for messages
  // ≤ kLineMaxMessageBytes: the collectives' (one-shots, the direct path's
  // agreement) and, apart, the point-to-point operations' (small AlltoAll,
  // Gather and Scatter blocks), so that a group's batch, whose messages go
  // out of order with the group's other collectives, never meets a peer's
  // collective message.
  LineSender* lineSend(int peer) { return lineSend_[peer].get(); }
  LineReceiver* lineRecv(int peer) { return lineRecv_[peer].get(); }
  LineSender* p2pLineSend(int peer) { return p2pLineSend_[peer].get(); }
  LineReceiver* p2pLineRecv(int peer) { return p2pLineRecv_[peer].get(); }
  bool isLocal(int peer) const { return localIndex_[peer] >= 0; }
  const FifoShape& ringShape() const { return options_.ring; }
  const FifoShape& meshShape() const { return options_.mesh; }
  const FifoShape& p2pShape() const { return options_.p2p; }

  // Marks every connector aborted so peers blocked on this rank fail fast.
  void abort();

 private:
  ShmTransport() = default;
  size_t ringOffset(int channel) const;
  size_t meshOffset(int fromLocalIndex) const;
  size_t lineOffset(int fromLocalIndex, bool p2p = false) const;
  size_t p2pOffset(int fromLocalIndex) const;
  size_t segmentBytes() const;
  Status mapPeers(OobExchange& oob, Deadline deadline);
  void populateSendSide(SharedSegment& segment, int peer);
  void reclaimDeadPeers(const Status& failure);
  WaitContext* newContext(int peer, const char* what);

  ShmTransportOptions options_;
  int rank_ = 0;
  std::vector<int> localIndex_;  // per rank: index among local ranks, or -1
  bool reserved_ = false;  // segments allocated at creation (reserveBudgetBytes)
  std::optional<SharedSegment> own_;
  std::vector<SharedSegment> peerSegments_;
  std::vector<std::unique_ptr<WaitContext>> contexts_;
  std::vector<std::unique_ptr<FifoSender>> ringSend_, meshSend_, p2pSend_;
  std::vector<std::unique_ptr<FifoReceiver>> ringRecv_, meshRecv_, p2pRecv_;
  std::vector<std::unique_ptr<LineSender>> lineSend_, p2pLineSend_;
  std::vector<std::unique_ptr<LineReceiver>> lineRecv_, p2pLineRecv_;
  std::vector<FifoSender*> ringSendAt_, p2pSendAt_;  // what the accessors hand out: owned or remote
  std::vector<FifoReceiver*> ringRecvAt_, p2pRecvAt_;
};

}  // namespace plait
