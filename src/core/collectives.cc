// collectives.cc — the ring collectives on the host: AllReduce, AllGather,
// ReduceScatter, Broadcast and Reduce, each channel running its schedule
// (algorithms/ring_allreduce.h, ring_collectives.h) over host primitives on
// its part of the buffer.
#include <algorithm>
#include <cstring>

#include "algorithms/ring_collectives.h"
#include "algorithms/types.h"
#include "core/comm.h"

namespace plait {
namespace {

bool isReduction(CollType c) {
  return c == CollType::kAllReduce || c == CollType::kReduce || c == CollType::kReduceScatter;
}

// Whether the ring collective's input and output share a byte (in place,
// or partly): its input may then change during the operation.
bool inputMeetsOutput(const Task& task, int nranks) {
  if (task.sendbuff == nullptr || task.recvbuff == nullptr) return false;
  const size_t bytes = task.count * typeSize(task.type);
  const size_t in = task.coll == CollType::kReduceScatter ? bytes * static_cast<size_t>(nranks) : bytes;
  const size_t out = task.coll == CollType::kAllGather ? bytes * static_cast<size_t>(nranks) : bytes;
  const auto x = reinterpret_cast<uintptr_t>(task.sendbuff), y = reinterpret_cast<uintptr_t>(task.recvbuff);
  return x < y + out && y < x + in;
}

}  // namespace

HostPrimitives Communicator::makePrimitives(const Task& task, const Plan& plan, int channel) const {
  const size_t elem = typeSize(task.type);
  PrimitivesConfig pc;
  pc.recv = shm_->ringRecv(channel);
  pc.send = shm_->ringSend(channel);
  pc.fn = reduceCopyFn(task.type, isReduction(task.coll) ? task.op.kind : RedOpKind::kSum);
  pc.op = isReduction(task.coll) ? task.op : RedOp{};
  pc.elemSize = elem;
  pc.sliceBytes = std::max(elem, std::min(plan.sliceBytes, shm_->ringShape().stepBytes) / elem * elem);
  pc.nonTemporalOutput = plan.nonTemporal;
  // A network edge whose proxy sends from this process's memory: the ring
  // schedules write each output byte once per operation, and
  // runRingCollectiveChannel waits for the sends (HostPrimitives::finish).
  pc.sendByReference = pc.send != nullptr && pc.send->takesReferences();
  pc.srcStays = pc.sendByReference && !inputMeetsOutput(task, nranks_);
  return HostPrimitives(pc);
}

// A rank sends a whole chunk before it first receives, then needs one more
// free step to go on: a chunk of nSteps slices or more would fill every FIFO
// of the ring and deadlock it. Chunks stay at half the FIFO, whatever the
// tuner or the user asked for.
size_t Communicator::ringChunkElems(const Plan& plan, size_t sliceBytes, size_t elem, size_t align) const {
  const size_t sliceElems = std::max<size_t>(1, sliceBytes / elem);
  const size_t maxChunk = sliceElems * std::max(1, shm_->ringShape().nSteps / 2);
  const size_t chunk = std::min(maxChunk, std::max(align, plan.chunkBytes / elem / align * align));
  return std::max<size_t>(1, chunk / align * align);
}

// One rank: the collective is a copy (with the op's scaling for reductions).
Status Communicator::runLocalCopy(const Task& task) {
  if (task.count == 0) return Status::ok();
  if (isReduction(task.coll)) {
    ReduceCopyArgs args;
    args.srcs[0] = task.sendbuff;
    args.dsts[0] = task.recvbuff;
    args.count = task.count;
    args.preOpSrc0 = task.op.kind == RedOpKind::kPreMulSum;
    args.postOp = true;
    reduceCopyFn(task.type, task.op.kind)(task.op, args);
  } else if (task.sendbuff != task.recvbuff) {
    std::memmove(task.recvbuff, task.sendbuff, task.count * typeSize(task.type));
  }
  return Status::ok();
}

Status Communicator::runRingCollective(const Task& task, const Plan& plan) {
  if (!workers_ || plan.nChannels <= 1) return runRingCollectiveChannel(task, plan, 0);
  return workers_->runChannels(plan.nChannels, [&](int c) {
    ScopedWaitCheck agreement(agreementCheck());  // workers wait too
    return runRingCollectiveChannel(task, plan, c);
  });
}

Status Communicator::runRingCollectiveChannel(const Task& task, const Plan& plan, int channel) {
  const size_t elem = typeSize(task.type);
  const size_t align = std::max<size_t>(1, 64 / elem);
  size_t begin = 0, end = 0;
  channelPart(task.count, plan.nChannels, channel, align, &begin, &end);
  if (begin == end) return Status::ok();

  HostPrimitives prims = makePrimitives(task, plan, channel);
  RingArgs a;
  a.count = end - begin;
  a.blockStride = task.count;
  a.elemSize = elem;
  a.nranks = nranks_;
  a.position = ringPositions_[channel];
  a.ring = rings_[channel].data();
  a.rootPosition = static_cast<int>(std::find(rings_[channel].begin(), rings_[channel].end(), task.root) -
                                    rings_[channel].begin());
  const size_t sliceBytes = std::min(plan.sliceBytes, shm_->ringShape().stepBytes);
  a.chunkElems = ringChunkElems(plan, sliceBytes, elem, align);
  // Unused buffers may be null (a Reduce's output off the root, a
  // Broadcast's input off it): offset only real pointers.
  const char* in = static_cast<const char*>(task.sendbuff);
  char* out = static_cast<char*>(task.recvbuff);
  if (in == nullptr) in = out;
  if (out == nullptr) out = const_cast<char*>(in);
  bool ok = false;
  switch (task.coll) {
    case CollType::kAllReduce: {
      RingAllReduceArgs r;
      r.input = in + begin * elem;
      r.output = out + begin * elem;
      r.count = a.count;
      r.elemSize = elem;
      r.nranks = nranks_;
      r.position = a.position;
      r.alignElems = align;
      r.chunkElems = a.chunkElems;
      ok = ringAllReduce(prims, r);
      break;
    }
    case CollType::kAllGather:
      a.input = in + begin * elem;
      a.output = out + begin * elem;  // plus each rank's block offset, in the schedule
      a.inPlace = task.sendbuff == static_cast<char*>(task.recvbuff) + static_cast<size_t>(rank_) * task.count * elem;
      ok = ringAllGather(prims, a);
      break;
    case CollType::kReduceScatter:
      a.input = in + begin * elem;
      a.output = out + begin * elem;
      ok = ringReduceScatter(prims, a);
      break;
    case CollType::kBroadcast:
      a.input = in + begin * elem;
      a.output = out + begin * elem;
      a.inPlace = task.sendbuff == task.recvbuff;
      ok = ringBroadcast(prims, a);
      break;
    case CollType::kReduce:
      a.input = in + begin * elem;
      a.output = out + begin * elem;
      ok = ringReduce(prims, a);
      break;
    default:
      return internalError(std::string(collName(task.coll)) + " has no ring schedule");
  }
  (void)ok;  // a failed verb is in prims.status()
  return prims.finish();
}

}  // namespace plait
