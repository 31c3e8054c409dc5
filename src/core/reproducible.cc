// reproducible.cc — the reproducible mode (PLAIT_REPRODUCIBLE): reductions
// whose bits do not depend on the algorithm, protocol, channel count,
// chunking or transport.
//
// Each element's result is the left fold over the ranks in rank order,
//   y_r = x_r, or round(x_r * s_r) for PreMulSum (and float Avg: s_r = 1/n)
//   out = (...((y_0 op y_1) op y_2) ... op y_(n-1)),
// one step of the host's reduce-copy kernel at a time (each step rounds to
// the element type), or, in the exact mode, the exact sum of the y_r rounded
// once (algorithms/exact_sum.h). The paths that already compute that — the
// one-shot AllReduce of small messages — keep running; the ring, whose
// partial sums start at a different rank for every chunk, is replaced by an
// ordered exchange: every rank owns a block of the elements, receives that
// block of every peer's input (point-to-point, over whatever transport
// connects the pair), folds the n copies in rank order, and sends the result
// where the collective puts it (AllReduce: to every rank; Reduce: to the
// root; ReduceScatter: it is already there). Per rank that moves what the
// ring moves, (n-1)/n of the buffer each way and twice for AllReduce, in
// rounds of at most PLAIT_REPRODUCIBLE_SCRATCH_BYTES of receive slots.
// Integer reductions are exact in any order (wrapping sums and products,
// min, max), so they keep every path. Device buffers take the same path on
// host copies (runReproducibleOnDevice).
#include <algorithm>
#include <cstring>

#include "algorithms/exact_fold.h"
#include "algorithms/types.h"
#include "base/config.h"
#include "core/comm.h"

namespace plait {
namespace {

PLAIT_PARAM_INT(kReproducible, "REPRODUCIBLE", 0,
                "reductions bitwise identical whatever the algorithm, channels or transport: 0 off, 1 a fixed "
                "rank-order fold, 2 exact floating-point sums (rounded once); every rank must agree");
PLAIT_PARAM_INT(kReproScratchBytes, "REPRODUCIBLE_SCRATCH_BYTES", 16 << 20,
                "receive slots of the reproducible mode's ordered exchange, per communicator (bounds a round)");

bool overlaps(const void* a, const void* b, size_t bytes) {
  const char* x = static_cast<const char*>(a);
  const char* y = static_cast<const char*>(b);
  return x < y + bytes && y < x + bytes;
}

Task p2pTask(CollType coll, const Task& like, int peer, const void* send, void* recv, size_t count) {
  Task t;
  t.coll = coll;
  t.type = like.type;
  t.peer = peer;
  t.sendbuff = send;
  t.recvbuff = recv;
  t.count = count;
  return t;
}

}  // namespace

Result<int> reproducibleMode() {
  const int64_t mode = kReproducible.get();
  if (mode < kReproducibleOff || mode > kReproducibleExact)
    return invalidArgument("PLAIT_REPRODUCIBLE=" + std::to_string(mode) +
                           ": expected 0 (off), 1 (a fixed rank-order fold) or 2 (exact floating-point sums)");
  if (mode != kReproducibleOff && kReproScratchBytes.get() < 4096)
    return invalidArgument("PLAIT_REPRODUCIBLE_SCRATCH_BYTES=" + std::to_string(kReproScratchBytes.get()) +
                           ": must be at least 4096 (the ordered exchange's receive slots)");
  return static_cast<int>(mode);
}

// Floating reductions depend on the order of their operations; integer
// ones do not.
bool Communicator::reproducibleOrder(const Task& task) const {
  if (reproducible_ == kReproducibleOff || !isFloatingType(task.type)) return false;
  return task.coll == CollType::kAllReduce || task.coll == CollType::kReduce ||
         task.coll == CollType::kReduceScatter;
}

void foldInRankOrder(const RedOp& op, ncclDataType_t type, bool exact, const void* const* inputs, int n, void* out,
                     size_t count) {
  const bool sum = op.kind == RedOpKind::kSum || op.kind == RedOpKind::kPreMulSum;
  if (exact && sum && exactSumInto(type, inputs, n, out, count)) return;
  const ReduceCopyFn fn = reduceCopyFn(type, op.kind);
  ReduceCopyArgs args;
  args.count = count;
  args.dsts[0] = out;
  args.srcs[0] = inputs[0];
  if (n == 1) {
    args.postOp = true;  // a copy (with SumPostDiv's division)
    fn(op, args);
    return;
  }
  args.nSrcs = 2;
  for (int r = 1; r < n; ++r) {
    args.srcs[1] = inputs[r];
    args.postOp = r == n - 1;
    fn(op, args);
    args.srcs[0] = out;
  }
}

void Communicator::foldInRankOrder(const Task& task, const void* const* inputs, void* out, size_t count) {
  plait::foldInRankOrder(task.op, task.type, reproducible_ == kReproducibleExact, inputs, nranks_, out, count);
}

// The one-shot reductions (AllReduce, Reduce, ReduceScatter) fold in rank
// order already; everything else runs the ordered exchange.
Status Communicator::runReproducible(const Task& task, size_t bytes) {
  const Plan plan = tuner_->plan(task, bytes);
  if (!plan.refused && plan.algo == Algorithm::kOneShot) {
    tagged(task, bytes, "oneshot (reproducible)");
    return runOneShot(task, bytes);
  }
  tagged(task, bytes, "ordered exchange (reproducible)");
  return runOrderedExchange(task);
}

// One round: rank b owns counts[b] elements at offs[b] of every rank's
// input. Sends each peer its block of our input, receives our block of each
// peer's into the slots, and folds the n copies into dst (counts[rank_]
// elements). With PreMulSum every block is scaled and rounded first, ours
// included, so each y_r is the same wherever it is folded.
Status Communicator::exchangeAndFold(const Task& task, const std::vector<size_t>& offs,
                                     const std::vector<size_t>& counts, size_t slotElems, void* dst) {
  const size_t elem = typeSize(task.type);
  const bool preOp = task.op.kind == RedOpKind::kPreMulSum;
  char* slots = reproScratch_.data();
  char* staged = slots + static_cast<size_t>(nranks_) * slotElems * elem;  // PreMulSum: scaled blocks
  auto slot = [&](int r) { return slots + static_cast<size_t>(r) * slotElems * elem; };
  std::vector<const void*> from(nranks_);
  for (int b = 0; b < nranks_; ++b) {
    from[b] = static_cast<const char*>(task.sendbuff) + offs[b] * elem;
    if (!preOp || counts[b] == 0) continue;
    char* to = staged + static_cast<size_t>(b) * slotElems * elem;
    ReduceCopyArgs scale;
    scale.srcs[0] = from[b];
    scale.dsts[0] = to;
    scale.count = counts[b];
    scale.preOpSrc0 = true;
    reduceCopyFn(task.type, task.op.kind)(task.op, scale);
    from[b] = to;
  }
  const size_t mine = counts[rank_];
  std::vector<Task> batch;
  for (int p = 0; p < nranks_; ++p) {
    if (p == rank_) continue;
    if (counts[p] > 0) batch.push_back(p2pTask(CollType::kSend, task, p, from[p], nullptr, counts[p]));
    if (mine > 0) batch.push_back(p2pTask(CollType::kRecv, task, p, nullptr, slot(p), mine));
  }
  if (!batch.empty()) PLAIT_RETURN_IF_ERROR(runP2p(batch));
  if (mine == 0) return Status::ok();
  std::vector<const void*> inputs(nranks_);
  for (int p = 0; p < nranks_; ++p) inputs[p] = p == rank_ ? from[p] : slot(p);
  // In place, the fold's first step overwrites our input before it reads it
  // (at rank >= 2): fold a copy. The exact sum reads every input of an
  // element before it writes it.
  const bool exact = reproducible_ == kReproducibleExact;
  if (rank_ >= 2 && !exact && overlaps(dst, inputs[rank_], mine * elem)) {
    std::memcpy(slot(rank_), inputs[rank_], mine * elem);
    inputs[rank_] = slot(rank_);
  }
  foldInRankOrder(task, inputs.data(), dst, mine);
  return Status::ok();
}

// Device buffers: their ring kernels fold in ring order, so the call runs
// the host's reproducible path on copies, in the order of the caller's
// stream: the input (and a device-resident PreMulSum scalar) comes to host
// memory once the stream's earlier work is done, the result goes back
// before the call returns. Device and host buffers then give the same bits.
// Synchronous, so not inside a CUDA graph capture (refused by name).
Status Communicator::runReproducibleOnDevice(const Task& task) {
  if (!device_)
    return Status(deviceUnavailable_.code(), std::string(collName(task.coll)) +
                                                 " on CUDA device buffers: " + deviceUnavailable_.message());
  if (task.count == 0) return Status::ok();
  const size_t elem = typeSize(task.type);
  const size_t inBytes = (task.coll == CollType::kReduceScatter ? task.count * nranks_ : task.count) * elem;
  const size_t outBytes = task.count * elem;
  const bool hasOutput = task.coll != CollType::kReduce || rank_ == task.root;
  const char* devIn = static_cast<const char*>(task.sendbuff);
  char* devOut = static_cast<char*>(task.recvbuff);
  // An output inside the input (in place) stays inside the host copy.
  const bool inside = hasOutput && devOut >= devIn && devOut + outBytes <= devIn + inBytes;
  if (deviceStage_.size() < inBytes + outBytes) deviceStage_.resize(inBytes + outBytes);
  char* hostIn = deviceStage_.data();
  char* hostOut = inside ? hostIn + (devOut - devIn) : hostIn + inBytes;
  const Deadline deadline = Deadline::afterMs(timeoutMs_);
  Task host = task;
  host.onDevice = false;
  host.cudaStream = nullptr;
  host.deviceScalar = nullptr;
  host.sendbuff = hostIn;
  host.recvbuff = hasOutput ? hostOut : nullptr;
  if (task.deviceScalar != nullptr) {
    uint64_t scalar = 0;
    PLAIT_RETURN_IF_ERROR(device_->copySync(&scalar, task.deviceScalar, elem, false, task.cudaStream, deadline));
    host.op.scalar = scalar;  // the element's bits in the low bytes
  }
  PLAIT_RETURN_IF_ERROR(device_->copySync(hostIn, devIn, inBytes, false, task.cudaStream, deadline));
  announce(host);
  const size_t ringBytes = task.coll == CollType::kReduceScatter ? inBytes : outBytes;
  if (nranks_ == 1) PLAIT_RETURN_IF_ERROR(runOrderedExchange(host));
  else PLAIT_RETURN_IF_ERROR(runReproducible(host, ringBytes));
  if (!hasOutput) return Status::ok();
  return device_->copySync(devOut, hostOut, outBytes, true, task.cudaStream, deadline);
}

Status Communicator::runOrderedExchange(const Task& task) {
  const size_t elem = typeSize(task.type);
  const bool preOp = task.op.kind == RedOpKind::kPreMulSum;
  const size_t perSlot = static_cast<size_t>(kReproScratchBytes.get()) /  // >= 4096: checked at init
                         (static_cast<size_t>(nranks_) * (preOp ? 2 : 1));
  const size_t slotElems = std::max<size_t>(1, perSlot / elem);
  const size_t scratchBytes = static_cast<size_t>(nranks_) * (preOp ? 2 : 1) * slotElems * elem;
  if (reproScratch_.size() < scratchBytes) reproScratch_.resize(scratchBytes);
  std::vector<size_t> offs(nranks_), counts(nranks_);
  char* out = static_cast<char*>(task.recvbuff);

  if (task.coll == CollType::kReduceScatter) {  // rank b's block is b * count .. of every input
    for (size_t at = 0; at < task.count; at += slotElems) {
      const size_t n = std::min(slotElems, task.count - at);
      for (int b = 0; b < nranks_; ++b) {
        offs[b] = static_cast<size_t>(b) * task.count + at;
        counts[b] = n;
      }
      PLAIT_RETURN_IF_ERROR(exchangeAndFold(task, offs, counts, slotElems, out + at * elem));
    }
    return Status::ok();
  }

  // AllReduce and Reduce: each round's range split into one block per rank.
  const size_t round = slotElems * static_cast<size_t>(nranks_);
  const bool toRoot = task.coll == CollType::kReduce;
  for (size_t at = 0; at < task.count; at += round) {
    const size_t n = std::min(round, task.count - at);
    const size_t base = n / nranks_, extra = n % nranks_;
    for (int b = 0; b < nranks_; ++b) {
      offs[b] = at + b * base + std::min<size_t>(b, extra);
      counts[b] = base + (static_cast<size_t>(b) < extra ? 1 : 0);
    }
    const size_t mine = counts[rank_];
    // A Reduce's non-root ranks fold into their own slot (no peer's block
    // lands there) and send the result to the root.
    char* dst = toRoot && rank_ != task.root ? reproScratch_.data() + static_cast<size_t>(rank_) * slotElems * elem
                                             : out + offs[rank_] * elem;
    PLAIT_RETURN_IF_ERROR(exchangeAndFold(task, offs, counts, slotElems, dst));
    std::vector<Task> batch;
    if (toRoot) {
      if (rank_ != task.root && mine > 0)
        batch.push_back(p2pTask(CollType::kSend, task, task.root, dst, nullptr, mine));
      for (int p = 0; p < nranks_ && rank_ == task.root; ++p)
        if (p != rank_ && counts[p] > 0)
          batch.push_back(p2pTask(CollType::kRecv, task, p, nullptr, out + offs[p] * elem, counts[p]));
    } else {
      for (int p = 0; p < nranks_; ++p) {
        if (p == rank_) continue;
        if (mine > 0) batch.push_back(p2pTask(CollType::kSend, task, p, dst, nullptr, mine));
        if (counts[p] > 0) batch.push_back(p2pTask(CollType::kRecv, task, p, nullptr, out + offs[p] * elem, counts[p]));
      }
    }
    if (!batch.empty()) PLAIT_RETURN_IF_ERROR(runP2p(batch));
  }
  return Status::ok();
}

}  // namespace plait
