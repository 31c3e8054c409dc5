// p2p.cc — point-to-point operations and the collectives built from them
// (AlltoAll, Gather, Scatter): each call or group becomes one batch of
// messages (core/p2p_batch.h), small blocks go through the line FIFOs.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "algorithms/types.h"
#include "base/config.h"
#include "core/comm.h"
#include "core/p2p_batch.h"

namespace plait {
namespace {

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
  const uint64_t putWaitNs = static_cast<uint64_t>(kPutWaitUs.get()) * 1000;
  p2p::P2pBatch batch(*shm_, rank_, nranks_, cma_, pids_, putWaitNs, timeoutMs_);
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
    // A collective's own block is a copy apart from the caller's sends to
    // itself (copyOwn); none where it already lies where it belongs (in
    // place): as a message it overlapped its own receive, so the batch staged
    // it and copied it back, two copies where none is due.
    const auto block = static_cast<int64_t>(bytes);
    const bool scatterSingle = block >= scatterCmaMin && block <= scatterCmaMax;
    switch (t.coll) {
      case CollType::kSend: batch.send(t.peer, in, bytes); break;
      case CollType::kRecv: batch.recv(t.peer, out, bytes); break;
      case CollType::kAlltoAll:
        for (int p = 0; p < nranks_; ++p) {
          if (p == rank_) {
            if (in != out) batch.copyOwn(in + p * bytes, out + p * bytes, bytes);
            continue;
          }
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
        if (rank_ != t.root) {
          send(t.root, in, putBlock, /*put=*/true);
          break;
        }
        if (in != out + rank_ * bytes) batch.copyOwn(in, out + rank_ * bytes, bytes);
        for (int p = 0; p < nranks_; ++p)
          if (p != rank_) recv(p, out + p * bytes);
        break;
      case CollType::kScatter:
        if (rank_ != t.root) {
          recv(t.root, out);
          break;
        }
        for (int p = 0; p < nranks_; ++p)
          if (p != rank_) send(p, in + p * bytes, scatterSingle);
        if (in + rank_ * bytes != out) batch.copyOwn(in + rank_ * bytes, out, bytes);
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
