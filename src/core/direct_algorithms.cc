// direct_algorithms.cc — what each rank does in a direct collective, once
// every buffer it touches is mapped or known by its address in a peer for
// cross-memory attach (sends_ / recvs_, sendCma_ / recvCma_, see direct.h).
// Every reduction sums in rank order 0..n-1, so its results are the same on
// every rank and in every direct run.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <string>

#include "algorithms/types.h"
#include "base/cma.h"
#include "core/direct.h"
#include "core/reproducible.h"

namespace plait {

namespace {

// Rank r's part of `count` elements: 64-byte aligned, the last ones shorter.
std::pair<size_t, size_t> partOf(size_t count, size_t elem, int rank, int nranks) {
  const size_t align = std::max<size_t>(1, 64 / elem);
  const size_t perRank = ((count + nranks - 1) / nranks + align - 1) / align * align;
  const size_t begin = std::min(count, perRank * rank);
  return {begin, std::min(count, begin + perRank)};
}

}  // namespace

Status DirectPath::execute(const Task& task) {
  switch (task.coll) {
    case CollType::kAllReduce: return allReduce(task);
    case CollType::kReduce: return reduce(task);
    case CollType::kReduceScatter: return reduceScatter(task);
    case CollType::kAllGather: return allGather(task, gatherPush_);
    default: break;
  }
  // The data movers: one copy each, from where the data lies to where it goes.
  const size_t b = task.count * typeSize(task.type);
  const bool stream = b >= streamBytes_;
  switch (task.coll) {
    case CollType::kBroadcast:  // pull the root's input
    case CollType::kScatter:    // pull this rank's block of the root's input
    case CollType::kGather:     // push the input into this rank's block of the root's output
      return rootedMove(task, stream);
    case CollType::kAlltoAll: return alltoAll(task, b * nranks_ >= streamBytes_);
    default: return Status::ok();
  }
}

// Broadcast, Scatter and Gather: every other rank copies its block (the
// whole buffer for Broadcast) between the root's buffer and its own; where
// the root shares (rootShares_: in place, it has no copy of its own) the
// last of n parts of every block is the root's to copy and the rest the other
// rank's, so every rank copies (n-1)/n of a block at once.
Status DirectPath::rootedMove(const Task& task, bool stream) {
  const int root = task.root;
  const size_t elem = typeSize(task.type);
  const size_t at = task.coll == CollType::kBroadcast ? 0 : task.count * elem;  // block p at p * at in the root's
  const bool gather = task.coll == CollType::kGather;
  const size_t cut = rootShares_ ? partOf(task.count, elem, nranks_ - 1, nranks_).first : task.count;
  if (rank_ != root) {
    if (gather) return transfer(task, root, true, sends_[rank_], recvs_[root] + at * rank_, cut, stream);
    return transfer(task, root, false, sends_[root] + at * rank_, recvs_[rank_], cut, stream);
  }
  if (!rootShares_) {  // its own block; in place there is nothing to copy
    if (gather)
      copy(task, sends_[root], recvs_[root] + at * root, task.count, stream);
    else
      copy(task, sends_[root] + at * root, recvs_[root], task.count, stream);
    return Status::ok();
  }
  const size_t tail = cut * elem;
  for (int k = 1; k < nranks_; ++k) {  // the others in turn, starting after the root
    const int p = (root + k) % nranks_;
    PLAIT_RETURN_IF_ERROR(gather ? transfer(task, p, false, sends_[p] + tail, recvs_[root] + at * p + tail,
                                            task.count - cut, stream)
                                 : transfer(task, p, true, sends_[root] + at * p + tail, recvs_[p] + tail,
                                            task.count - cut, stream));
  }
  return Status::ok();
}

// Block r of every input; peers in turn, starting after this rank. In place
// on every rank: swapBlocks. Else, where this rank's buffers overlap
// (staged): the peers' blocks into alltoallStage_, slot k-1 for the k-th
// peer after this rank, placed with its own block after the handshake.
Status DirectPath::alltoAll(const Task& task, bool stream) {
  if (alltoallSwap_) return swapBlocks(task);
  const size_t b = task.count * typeSize(task.type);
  const bool staged = alltoallStaged(task);
  if (staged) PLAIT_RETURN_IF_ERROR(reserveAlltoallStage(b * static_cast<size_t>(nranks_ - 1)));
  char* recv = static_cast<char*>(task.recvbuff);
  for (int k = staged ? 1 : 0; k < nranks_; ++k) {
    const int p = (rank_ + k) % nranks_;
    char* dst = staged ? reinterpret_cast<char*>(alltoallStage_.data()) + b * static_cast<size_t>(k - 1) : recv + b * p;
    PLAIT_RETURN_IF_ERROR(transfer(task, p, false, sends_[p] + b * rank_, dst, task.count, stream && !staged));
  }
  return Status::ok();
}

// In place on every rank: with peer p, this rank swaps its half of the
// elements of block p of its buffer and block r of p's (the lower rank the
// first half), a chunk at a time: read p's, write ours in its place, put
// p's into ours. The two ranks of a pair touch disjoint halves and pairs
// disjoint blocks, so no rank waits for another between the descriptors and
// the completion handshake. Each rank copies 1.5 blocks per peer, where the
// staged form copies 2 and the out-of-place one 1 (and its own block).
Status DirectPath::swapBlocks(const Task& task) {
  const size_t elem = typeSize(task.type), b = task.count * elem;
  const size_t chunk = std::max<size_t>(1, kSwapChunkBytes / elem);
  PLAIT_RETURN_IF_ERROR(reserveAlltoallStage(chunk * elem));
  char* tmp = reinterpret_cast<char*>(alltoallStage_.data());
  char* mine = static_cast<char*>(task.recvbuff);
  for (int k = 1; k < nranks_; ++k) {
    const int p = (rank_ + k) % nranks_;
    const auto [lo, hi] = partOf(task.count, elem, rank_ < p ? 0 : 1, 2);
    const char* theirsIn = sends_[p] + b * rank_;
    char* theirsOut = recvs_[p] + b * rank_;  // the same bytes (resolve())
    char* ours = mine + b * p;
    for (size_t off = lo; off < hi; off += chunk) {
      const size_t n = std::min(chunk, hi - off), at = off * elem;
      PLAIT_RETURN_IF_ERROR(transfer(task, p, false, theirsIn + at, tmp, n, false));
      PLAIT_RETURN_IF_ERROR(transfer(task, p, true, ours + at, theirsOut + at, n, false));
      std::memcpy(ours + at, tmp, n * elem);
    }
  }
  return Status::ok();
}

Status DirectPath::reserveAlltoallStage(size_t bytes) {
  if (alltoallStage_.size() >= bytes) return Status::ok();
  try {
    alltoallStage_.resize(bytes);
  } catch (const std::bad_alloc&) {  // an error of this rank's share: finish() still tells every peer
    errno = ENOMEM;
    return systemError("staging " + std::to_string(bytes) + " bytes of an in-place AlltoAll");
  }
  return Status::ok();
}

bool DirectPath::alltoallStaged(const Task& task) const {
  if (task.coll != CollType::kAlltoAll) return false;
  return rangesOverlap(task.sendbuff, task.recvbuff, task.count * typeSize(task.type) * nranks_);
}

// After the completion handshake, which no peer passes while it still reads
// this rank's input: its own block first (where the buffers overlap only
// partly, its source may lie under another block of the output), then the
// staged ones.
void DirectPath::placeStagedAlltoAll(const Task& task) {
  const size_t b = task.count * typeSize(task.type);
  char* recv = static_cast<char*>(task.recvbuff);
  const char* own = static_cast<const char*>(task.sendbuff) + b * rank_;
  if (own != recv + b * rank_) std::memmove(recv + b * rank_, own, b);
  for (int k = 1; k < nranks_; ++k) {
    const int p = (rank_ + k) % nranks_;
    std::memcpy(recv + b * p, alltoallStage_.data() + b * static_cast<size_t>(k - 1), b);
  }
  if (alltoallStage_.capacity() > kAlltoallStageKeptBytes) std::vector<unsigned char>().swap(alltoallStage_);
}

Status DirectPath::transfer(const Task& task, int peer, bool toPeer, const char* src, char* dst, size_t count,
                            bool nonTemporal) const {
  const size_t bytes = count * typeSize(task.type);
  if (!toPeer && sendCma_[peer]) {
    if (const int err = cmaRead(pids_[peer], dst, reinterpret_cast<uintptr_t>(src), bytes); err != 0)
      return remoteError("reading rank " + std::to_string(peer) + "'s sendbuff: " + cmaErrorText(pids_[peer], err));
    return Status::ok();
  }
  if (toPeer && recvCma_[peer]) {
    if (const int err = cmaWrite(pids_[peer], reinterpret_cast<uintptr_t>(dst), src, bytes); err != 0)
      return remoteError("writing into rank " + std::to_string(peer) + "'s recvbuff: " +
                         cmaErrorText(pids_[peer], err, true));
    return Status::ok();
  }
  copy(task, src, dst, count, nonTemporal);
  return Status::ok();
}

void DirectPath::copy(const Task& task, const char* src, char* dst, size_t count, bool nonTemporal) const {
  if (src == dst || count == 0) return;  // in place
  ReduceCopyArgs a;  // one source, no pre/post-op: a bit-exact copy
  a.srcs[0] = src;
  a.dsts[0] = dst;
  a.count = count;
  a.nonTemporal = nonTemporal;
  reduceCopyFn(task.type, RedOpKind::kSum)(RedOp{}, a);
}

// Each rank's input chunk at byte `srcAt`, in this address space: where it
// is mapped, or read by cross-memory attach into a staging slot of its own
// (peers in turn, starting after this rank, so ranks read different peers'
// memory at the same time).
Status DirectPath::stageInputs(const Task& task, size_t srcAt, size_t count) {
  size_t slot = 0;
  for (int k = 0; k < nranks_; ++k) {
    const int p = (rank_ + k) % nranks_;
    if (!sendCma_[p]) {
      srcs_[p] = sends_[p] + srcAt;
      continue;
    }
    char* staged = reinterpret_cast<char*>(stage_.data()) + chunkBytes_ * slot++;
    PLAIT_RETURN_IF_ERROR(transfer(task, p, false, sends_[p] + srcAt, staged, count, false));
    srcs_[p] = staged;
  }
  return Status::ok();
}

// The chunk size a reduction works in: every staged input of a chunk and its
// result stay in cache together.
size_t DirectPath::reductionChunk(size_t elem) const {
  const size_t align = std::max<size_t>(1, 64 / elem);
  return std::max(align, chunkBytes_ / elem / align * align);
}

Status DirectPath::allReduce(const Task& task) {
  const size_t elem = typeSize(task.type);
  const auto [begin, end] = partOf(task.count, elem, rank_, nranks_);
  const size_t chunk = reductionChunk(elem);
  // Streaming stores spare the read-for-ownership of large outputs, but an
  // in-place output line was just read and sits in cache: measured 2x slower
  // at 64 MiB with them, so only out-of-place operations use them. Outputs
  // that peers copy out again right away (by cross-memory attach) stay in
  // cache too.
  bool inPlace = true, anyCma = false;
  for (int p = 0; p < nranks_; ++p) {
    inPlace = inPlace && sends_[p] == recvs_[p];
    anyCma = anyCma || recvCma_[p];
  }
  const bool nonTemporal = !inPlace && !anyCma && task.count * elem >= streamBytes_;
  for (size_t off = begin; off < end; off += chunk) {
    const size_t at = off * elem, count = std::min(chunk, end - off);
    PLAIT_RETURN_IF_ERROR(stageInputs(task, at, count));
    int nDsts = 0;
    for (int p = 0; p < nranks_; ++p)
      if (!recvCma_[p]) dsts_[nDsts++] = recvs_[p] + at;  // this rank's own output is always here
    reduceInto(task, count, dsts_.data(), nDsts, nonTemporal);
    for (int k = 1; k < nranks_; ++k) {
      const int p = (rank_ + k) % nranks_;
      if (recvCma_[p]) PLAIT_RETURN_IF_ERROR(transfer(task, p, true, recvs_[rank_] + at, recvs_[p] + at, count, false));
    }
  }
  return Status::ok();
}

// The AllReduce's parts, each written into the root's output only (through a
// staging slot when that output is in another process, by cross-memory attach).
Status DirectPath::reduce(const Task& task) {
  const size_t elem = typeSize(task.type);
  const auto [begin, end] = partOf(task.count, elem, rank_, nranks_);
  const size_t chunk = reductionChunk(elem);
  const int root = task.root;
  char* out = recvs_[root];
  const bool remote = recvCma_[root] != 0;
  const bool nonTemporal = !remote && out != sends_[root] && task.count * elem >= streamBytes_;
  // The output slot after the n-1 input slots (stage_ is empty unless some
  // buffer of this call goes by cross-memory attach).
  char* staged =
      remote ? reinterpret_cast<char*>(stage_.data()) + chunkBytes_ * static_cast<size_t>(nranks_ - 1) : nullptr;
  for (size_t off = begin; off < end; off += chunk) {
    const size_t count = std::min(chunk, end - off);
    PLAIT_RETURN_IF_ERROR(stageInputs(task, off * elem, count));
    char* dst = remote ? staged : out + off * elem;
    reduceInto(task, count, &dst, 1, nonTemporal);
    if (remote) PLAIT_RETURN_IF_ERROR(transfer(task, root, true, staged, out + off * elem, count, false));
  }
  return Status::ok();
}

// Block r of every input, reduced into this rank's output. In place the
// output is this rank's block r of its own input, which no peer reads.
Status DirectPath::reduceScatter(const Task& task) {
  const size_t elem = typeSize(task.type);
  const size_t chunk = reductionChunk(elem);
  const size_t block = task.count * elem * static_cast<size_t>(rank_);
  char* out = static_cast<char*>(task.recvbuff);
  const bool nonTemporal = out != sends_[rank_] + block && task.count * elem >= streamBytes_;
  for (size_t off = 0; off < task.count; off += chunk) {
    const size_t count = std::min(chunk, task.count - off);
    PLAIT_RETURN_IF_ERROR(stageInputs(task, block + off * elem, count));
    char* dst = out + off * elem;
    reduceInto(task, count, &dst, 1, nonTemporal);
  }
  return Status::ok();
}

// Each PreMulSum input is scaled by its own rank's scalar (ranks may hold
// different ones); when all scalars are equal (ncclAvg) the first two inputs
// are reduced in one pass. Every source chunk is read before any destination
// byte of it is written, so a destination may be one of the sources.
void DirectPath::reduceInto(const Task& task, size_t count, char* const* dsts, int nDsts, bool nonTemporal) {
  if (reproducible_ != kReproducibleOff && isFloatingType(task.type))
    return foldInto(task, count, dsts, nDsts, nonTemporal);
  const ReduceCopyFn fn = reduceCopyFn(task.type, task.op.kind);
  const bool preOp = task.op.kind == RedOpKind::kPreMulSum;
  bool uniform = true;
  for (int p = 1; p < nranks_; ++p) uniform = uniform && descs_[p].scalar == descs_[0].scalar;
  void* acc = scratch_.data();
  RedOp op = task.op;
  ReduceCopyArgs a;
  a.count = count;
  a.srcs[0] = srcs_[0];
  a.preOpSrc0 = preOp;
  int next = 1;
  if (!preOp || uniform) {
    a.srcs[1] = srcs_[1];
    a.nSrcs = 2;
    a.preOpSrc1 = preOp;
    next = 2;
  } else {
    op.scalar = descs_[0].scalar;
  }
  for (;;) {
    const bool last = next == nranks_;
    if (last && nDsts <= 2 && nranks_ == 2) {  // two inputs: straight into the outputs
      a.dsts[0] = dsts[0];
      a.dsts[1] = nDsts == 2 ? dsts[1] : nullptr;
      a.nDsts = nDsts;
      a.postOp = true;
      a.nonTemporal = nonTemporal;
      fn(op, a);
      return;
    }
    a.dsts[0] = acc;
    a.postOp = last;
    fn(op, a);
    if (last) break;
    a.srcs[0] = acc;
    a.srcs[1] = srcs_[next];
    a.nSrcs = 2;
    a.preOpSrc0 = false;
    a.preOpSrc1 = preOp;
    if (preOp && !uniform) op.scalar = descs_[next].scalar;
    ++next;
  }
  ReduceCopyArgs out;  // one source, no pre/post-op: a bit-exact copy
  out.srcs[0] = acc;
  out.count = count;
  out.nonTemporal = nonTemporal;
  for (int p = 0; p < nDsts; p += 2) {
    out.dsts[0] = dsts[p];
    out.nDsts = p + 1 < nDsts ? 2 : 1;
    out.dsts[1] = out.nDsts == 2 ? dsts[p + 1] : nullptr;
    fn(task.op, out);
  }
}

// The reproducible mode's fold (core/reproducible.h): each PreMulSum input
// scaled by its own rank's scalar and rounded first (as the mode's other
// paths send them), then folded into a buffer of our own and copied out, so
// a destination may still be one of the sources.
void DirectPath::foldInto(const Task& task, size_t count, char* const* dsts, int nDsts, bool nonTemporal) {
  const size_t bytes = count * typeSize(task.type);
  const bool preOp = task.op.kind == RedOpKind::kPreMulSum;
  const size_t slots = static_cast<size_t>(preOp ? nranks_ + 1 : 1);
  if (foldScratch_.size() < slots * bytes) foldScratch_.resize(slots * bytes);
  unsigned char* acc = foldScratch_.data();
  std::vector<const void*>& inputs = foldInputs_;  // per chunk: kept, not allocated each time
  inputs.resize(nranks_);
  for (int r = 0; r < nranks_; ++r) {
    inputs[r] = srcs_[r];
    if (!preOp) continue;
    RedOp op = task.op;
    op.scalar = descs_[r].scalar;
    ReduceCopyArgs scale;
    scale.srcs[0] = inputs[r];
    scale.dsts[0] = acc + (1 + static_cast<size_t>(r)) * bytes;
    scale.count = count;
    scale.preOpSrc0 = true;
    reduceCopyFn(task.type, task.op.kind)(op, scale);
    inputs[r] = scale.dsts[0];
  }
  foldInRankOrder(task.op, task.type, reproducible_ == kReproducibleExact, inputs.data(), nranks_, acc, count);
  for (int p = 0; p < nDsts; ++p) copy(task, reinterpret_cast<const char*>(acc), dsts[p], count, nonTemporal);
}

// Peers are visited starting after this rank, so ranks read (or write)
// different peers' memory at the same time.
Status DirectPath::allGather(const Task& task, bool push) {
  const size_t bytes = task.count * typeSize(task.type);
  const bool stream = bytes * nranks_ >= streamBytes_;
  for (int k = 0; k < nranks_; ++k) {
    const int p = (rank_ + k) % nranks_;
    const char* src = push ? static_cast<const char*>(task.sendbuff) : sends_[p];
    char* dst = push ? recvs_[p] + bytes * rank_ : static_cast<char*>(task.recvbuff) + bytes * p;
    PLAIT_RETURN_IF_ERROR(transfer(task, p, push, src, dst, task.count, stream));
  }
  return Status::ok();
}

}  // namespace plait
