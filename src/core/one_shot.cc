// one_shot.cc — the one-shot collectives for small messages with every rank
// on this host: each rank hands what a peer needs straight to that peer
// (a line-FIFO message, transport/line_fifo.h, or for larger AllReduces a
// mesh FIFO step) instead of passing it along a ring, so a call costs one
// hand-off whatever the rank count, where the ring costs n-1 or 2(n-1).
// The tuner chooses them (core/tuner.cc) where its costs say they win.
//
// Every rank posts all its sends (one message per peer per call) before its
// first receive, and a line FIFO holds kLineSlots / 64 (8) messages of at
// most kLineMaxMessageBytes. A send waits only for a peer that many calls
// behind (a Broadcast root or a Reduce non-root, which never receive, can run
// ahead until then), never for one waiting for this rank, so the calls cannot
// deadlock (as in runLineP2p). Reductions fold the n inputs in rank order,
// so every rank and every path that folds in rank order gets the same bits.
#include <cstring>

#include "algorithms/types.h"
#include "core/comm.h"

namespace plait {
namespace {

// Spreads the pairs: the i-th send of rank r goes to r+i, the i-th receive
// comes from r-i.
int peerAfter(int rank, int i, int nranks) { return (rank + i) % nranks; }

}  // namespace

Status Communicator::runOneShot(const Task& task, size_t bytes) {
  switch (task.coll) {
    case CollType::kAllReduce: return runOneShotAllReduce(task, bytes);
    case CollType::kAllGather:
    case CollType::kBroadcast: return runOneShotCopy(task);
    case CollType::kReduce:
    case CollType::kReduceScatter: return runOneShotReduce(task);
    default:
      return internalError(std::string("no one-shot algorithm for ") + collName(task.coll));
  }
}

// AllReduce: every rank pushes its input to every peer, then all reduce the
// n inputs in rank order, so results are bit-identical across ranks. One
// FIFO hand-off per peer: the latency path for small messages.
Status Communicator::runOneShotAllReduce(const Task& task, size_t bytes) {
  const ReduceCopyFn fn = reduceCopyFn(task.type, task.op.kind);
  const bool preOp = task.op.kind == RedOpKind::kPreMulSum;
  if (bytes <= kLineMaxMessageBytes) return runOneShotLines(task, bytes, fn, preOp);
  for (int peer = 0; peer < nranks_; ++peer) {
    if (peer == rank_) continue;
    FifoSender* s = shm_->meshSend(peer);
    auto slot = s->acquire();
    if (!slot.isOk()) return slot.takeStatus();
    // Our input enters every peer's reduction already scaled by our own
    // PreMulSum scalar (ranks may hold different scalars).
    ReduceCopyArgs copy;
    copy.srcs[0] = task.sendbuff;
    copy.dsts[0] = *slot;
    copy.count = task.count;
    copy.preOpSrc0 = preOp;
    fn(task.op, copy);
    s->post(bytes);
  }
  const void* mine = task.sendbuff;
  if (preOp) {  // our input scaled and rounded, as the peers got it
    ReduceCopyArgs copy;
    copy.srcs[0] = task.sendbuff;
    copy.dsts[0] = scratch_.data();
    copy.count = task.count;
    copy.preOpSrc0 = true;
    fn(task.op, copy);
    mine = scratch_.data();
  } else if (task.sendbuff == task.recvbuff && rank_ >= 2) {  // our input is read after the output is first written
    std::memcpy(scratch_.data(), task.sendbuff, bytes);
    mine = scratch_.data();
  }
  std::vector<const void*>& inputs = oneShotInputs_;
  for (int peer = 0; peer < nranks_; ++peer) {
    if (peer == rank_) {
      inputs[peer] = mine;
      continue;
    }
    size_t got = 0;
    auto slot = shm_->meshRecv(peer)->acquire(&got);
    if (!slot.isOk()) return slot.takeStatus();
    if (got != bytes)
      return internalError("rank " + std::to_string(peer) + " sent " + std::to_string(got) + " bytes, expected " +
                           std::to_string(bytes) + " (ranks disagree on the operation?)");
    inputs[peer] = *slot;
  }
  foldInRankOrder(task, inputs.data(), task.recvbuff, task.count);
  for (int peer = 0; peer < nranks_; ++peer)
    if (peer != rank_) shm_->meshRecv(peer)->release();
  return Status::ok();
}

// The one-shot algorithm for small messages over line FIFOs: each peer's
// input arrives line by line with the flag in the same line, so the first
// byte costs one cache-line hand-off and the rest stream behind it.
Status Communicator::runOneShotLines(const Task& task, size_t bytes, ReduceCopyFn fn, bool preOp) {
  const void* mine = task.sendbuff;
  unsigned char* stage = oneShotStage_.data();  // nranks slots of kLineMaxMessageBytes
  if (preOp) {
    ReduceCopyArgs copy;
    copy.srcs[0] = task.sendbuff;
    copy.dsts[0] = stage + static_cast<size_t>(rank_) * kLineMaxMessageBytes;
    copy.count = task.count;
    copy.preOpSrc0 = true;
    fn(task.op, copy);
    mine = copy.dsts[0];
  }
  for (int peer = 0; peer < nranks_; ++peer)
    if (peer != rank_) PLAIT_RETURN_IF_ERROR(shm_->lineSend(peer)->send(mine, bytes));
  std::vector<const void*>& inputs = oneShotInputs_;
  for (int peer = 0; peer < nranks_; ++peer) {
    unsigned char* slot = stage + static_cast<size_t>(peer) * kLineMaxMessageBytes;
    if (peer == rank_) {
      if (!preOp) std::memcpy(slot, task.sendbuff, bytes);  // the output may alias the input (scaled: staged above)
    } else {
      PLAIT_RETURN_IF_ERROR(shm_->lineRecv(peer)->recv(slot, bytes));
    }
    inputs[peer] = slot;
  }
  foldInRankOrder(task, inputs.data(), task.recvbuff, task.count);
  return Status::ok();
}

// AllGather and Broadcast: the block (AllGather: this rank's; Broadcast: the
// root's buffer) goes to every peer as one line message.
Status Communicator::runOneShotCopy(const Task& t) {
  const size_t bytes = t.count * typeSize(t.type);
  const char* in = static_cast<const char*>(t.sendbuff);
  char* out = static_cast<char*>(t.recvbuff);
  const bool gather = t.coll == CollType::kAllGather;
  const bool sends = gather || rank_ == t.root;
  if (sends)
    for (int i = 1; i < nranks_; ++i) PLAIT_RETURN_IF_ERROR(shm_->lineSend(peerAfter(rank_, i, nranks_))->send(in, bytes));
  char* mine = gather ? out + static_cast<size_t>(rank_) * bytes : out;
  if (sends && mine != in) std::memmove(mine, in, bytes);  // in place: already there
  if (!gather) return sends ? Status::ok() : shm_->lineRecv(t.root)->recv(out, bytes);
  for (int i = 1; i < nranks_; ++i) {
    const int p = peerAfter(rank_, nranks_ - i, nranks_);
    PLAIT_RETURN_IF_ERROR(shm_->lineRecv(p)->recv(out + static_cast<size_t>(p) * bytes, bytes));
  }
  return Status::ok();
}

// Reduce and ReduceScatter: each rank sends every other rank the block it
// reduces (Reduce: the whole buffer, to the root only), scaled first by this
// rank's own PreMulSum scalar; the receivers fold the n blocks in rank order
// from the staging slots (this rank's block is staged too: the output may
// alias the input).
Status Communicator::runOneShotReduce(const Task& t) {
  const size_t bytes = t.count * typeSize(t.type);
  const bool scatter = t.coll == CollType::kReduceScatter;
  const bool preOp = t.op.kind == RedOpKind::kPreMulSum;
  const ReduceCopyFn fn = reduceCopyFn(t.type, t.op.kind);
  const char* in = static_cast<const char*>(t.sendbuff);
  auto blockFor = [&](int r) { return scatter ? in + static_cast<size_t>(r) * bytes : in; };
  // dst = the block for rank r, scaled where the op says so.
  auto stageBlock = [&](int r, void* dst) {
    if (!preOp) {
      std::memcpy(dst, blockFor(r), bytes);
      return;
    }
    ReduceCopyArgs copy;
    copy.srcs[0] = blockFor(r);
    copy.dsts[0] = dst;
    copy.count = t.count;
    copy.preOpSrc0 = true;
    fn(t.op, copy);
  };
  alignas(64) unsigned char scaled[kLineMaxMessageBytes];
  for (int i = 1; i < nranks_; ++i) {
    const int p = peerAfter(rank_, i, nranks_);
    if (!scatter && p != t.root) continue;
    const void* src = blockFor(p);
    if (preOp) {
      stageBlock(p, scaled);
      src = scaled;
    }
    PLAIT_RETURN_IF_ERROR(shm_->lineSend(p)->send(src, bytes));
  }
  if (!scatter && rank_ != t.root) return Status::ok();
  unsigned char* stage = oneShotStage_.data();  // nranks slots of kLineMaxMessageBytes
  std::vector<const void*>& inputs = oneShotInputs_;
  for (int i = 0; i < nranks_; ++i) {
    const int p = peerAfter(rank_, nranks_ - i, nranks_);  // this rank first, then r-1, r-2, ...
    unsigned char* slot = stage + static_cast<size_t>(p) * kLineMaxMessageBytes;
    if (p == rank_) stageBlock(p, slot);
    else PLAIT_RETURN_IF_ERROR(shm_->lineRecv(p)->recv(slot, bytes));
    inputs[p] = slot;
  }
  foldInRankOrder(t, inputs.data(), t.recvbuff, t.count);
  return Status::ok();
}

}  // namespace plait
