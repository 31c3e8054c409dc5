// log_depth.cc — the log-depth collectives on the host, with every rank on
// this host: AllReduce by halving-doubling and AllGather by recursive
// doubling (algorithms/halving_doubling.h), Broadcast and Reduce over a
// binomial tree (algorithms/binomial_tree.h).
// They run on the calling thread over the mesh FIFOs (one per pair of local
// ranks, which only the one-shot AllReduce shares, never in the same call),
// one FIFO step per slice. The tuner chooses them ("tree" in PLAIT_ALGO /
// NCCL_ALGO, core/tuner.cc) where hops cost more than the bytes they save.
#include <array>
#include <cstring>
#include <optional>

#include "algorithms/binomial_tree.h"
#include "algorithms/halving_doubling.h"
#include "algorithms/types.h"
#include "core/comm.h"

namespace plait {
namespace {

// The schedules' Links over the mesh FIFOs: primitives per slot, rebuilt only
// when a slot is asked for another pair of peers.
class MeshLinks {
 public:
  MeshLinks(ShmTransport* shm, const PrimitivesConfig& base) : shm_(shm), base_(base) {}

  HostPrimitives& prims(int slot, int recvFrom, int sendTo, bool srcScaled) {
    Slot& s = slots_[static_cast<size_t>(slot)];
    if (!s.prims || s.recvFrom != recvFrom || s.sendTo != sendTo || s.srcScaled != srcScaled) {
      // A failed slot keeps its status for status(): the schedule stops at a failure.
      PrimitivesConfig c = base_;
      c.recv = recvFrom >= 0 ? shm_->meshRecv(recvFrom) : nullptr;
      c.send = sendTo >= 0 ? shm_->meshSend(sendTo) : nullptr;
      c.srcScaled = srcScaled;
      s.prims.emplace(c);
      s.recvFrom = recvFrom;
      s.sendTo = sendTo;
      s.srcScaled = srcScaled;
    }
    return *s.prims;
  }

  // Why the schedule stopped: the failed primitives' status.
  Status status() const {
    for (const Slot& s : slots_)
      if (s.prims && s.prims->failed()) return s.prims->status();
    return internalError("a log-depth schedule stopped without a failed transfer");
  }

 private:
  struct Slot {
    std::optional<HostPrimitives> prims;
    int recvFrom = -1, sendTo = -1;
    bool srcScaled = false;
  };
  ShmTransport* shm_;
  PrimitivesConfig base_;
  std::array<Slot, 32> slots_{};  // a binomial tree's children: log2(ranks) < 32
};

}  // namespace

Status Communicator::runLogDepth(const Task& task, const Plan& plan) {
  const size_t elem = typeSize(task.type);
  const bool reduction = task.coll != CollType::kBroadcast && task.coll != CollType::kAllGather;
  PrimitivesConfig base;
  base.fn = reduceCopyFn(task.type, reduction ? task.op.kind : RedOpKind::kSum);
  base.op = reduction ? task.op : RedOp{};
  base.elemSize = elem;
  const size_t sliceElems = std::max<size_t>(1, std::min(plan.sliceBytes, shm_->meshShape().stepBytes) / elem);
  base.sliceBytes = sliceElems * elem;
  base.nonTemporalOutput = plan.nonTemporal;
  MeshLinks links(shm_.get(), base);
  bool ok = false;
  if (task.coll == CollType::kAllReduce || task.coll == CollType::kAllGather) {
    HalvingDoublingArgs a;
    a.input = static_cast<const char*>(task.sendbuff);
    a.output = static_cast<char*>(task.recvbuff);
    a.count = task.count;
    a.elemSize = elem;
    a.nranks = nranks_;
    a.rank = rank_;
    a.sliceElems = sliceElems;
    a.alignElems = std::max<size_t>(1, 64 / elem);
    if (task.coll == CollType::kAllReduce) {
      ok = halvingDoublingAllReduce(links, a);
    } else {  // a power-of-two rank count (the tuner's treeShape); our block first
      char* mine = a.output + static_cast<size_t>(rank_) * task.count * elem;
      if (a.input != mine) std::memmove(mine, a.input, task.count * elem);
      ok = recursiveDoublingAllGather(links, a);
    }
  } else if (task.coll == CollType::kBroadcast || task.coll == CollType::kReduce) {
    BinomialTreeArgs a;
    a.input = static_cast<const char*>(task.sendbuff);
    a.output = static_cast<char*>(task.recvbuff);
    a.scratch = scratch_.data();  // a mesh step: at least a slice
    a.count = task.count;
    a.elemSize = elem;
    a.nranks = nranks_;
    a.rank = rank_;
    a.root = task.root;
    a.sliceElems = sliceElems;
    a.inPlace = task.sendbuff == task.recvbuff;
    ok = task.coll == CollType::kBroadcast ? binomialBroadcast(links, a) : binomialReduce(links, a);
  } else {
    return internalError(std::string(collName(task.coll)) + " has no log-depth schedule");
  }
  return ok ? Status::ok() : links.status();
}

}  // namespace plait
