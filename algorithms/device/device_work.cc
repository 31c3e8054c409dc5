// device_work.cc — validateDeviceWork (device_launch.h): the launchers' check
// of a DeviceWork's plain data. Host code only (g++): no CUDA call, no
// pointer dereferenced.
#include <algorithm>

#include "algorithms/device/device_launch.h"
#include "algorithms/device/device_work.h"
#include "algorithms/types.h"
#include "transport/fifo.h"

namespace plait {
namespace {

bool needsRing(DeviceColl c) { return c != DeviceColl::kAllReduce; }
bool hasRoot(DeviceColl c) { return c == DeviceColl::kBroadcast || c == DeviceColl::kReduce; }
bool hasBlocks(DeviceColl c) { return c == DeviceColl::kAllGather || c == DeviceColl::kReduceScatter; }

// Fields that hold whatever the count.
const char* validateScalars(const DeviceWork& work) {
  if (static_cast<int>(work.coll) >= kNumDeviceColls) return "invalid collective";
  if (!isValidType(work.type)) return "invalid type";
  if (work.elemSize != typeSize(work.type)) return "elemSize does not match type";
  if (static_cast<int>(work.op.kind) >= kNumRedOpKinds) return "invalid op kind";
  if (work.nranks < 1) return "nranks < 1";
  if (work.alignElems == 0) return "alignElems is 0";
  if (!needsRing(work.coll)) return nullptr;
  if (work.nranks > kMaxDeviceRanks) return "nranks exceeds kMaxDeviceRanks (the ring order does not fit)";
  if (work.rank < 0 || work.rank >= work.nranks) return "rank out of range";
  if (hasRoot(work.coll) && (work.root < 0 || work.root >= work.nranks)) return "root out of range";
  if (hasBlocks(work.coll) && work.blockStride < work.count) return "blockStride is less than count (blocks overlap)";
  return nullptr;
}

// The buffers the collective reads and writes on this rank (NCCL's rules:
// only the root reads a Broadcast's input and writes a Reduce's output).
const char* validateBuffers(const DeviceWork& work) {
  const bool root = work.rank == work.root;
  const bool needSend = work.coll != DeviceColl::kBroadcast || root;
  const bool needRecv = work.coll != DeviceColl::kReduce || root;
  if (needSend && work.sendbuff == nullptr) return "null sendbuff";
  if (needRecv && work.recvbuff == nullptr) return "null recvbuff";
  return nullptr;
}

const char* validateFifo(const DeviceFifo& f, size_t sliceBytes) {
  if (f.memory == nullptr) return "a channel's FIFO memory is null";
  const FifoShape shape{f.nSteps, static_cast<size_t>(f.stepBytes)};
  if (!shape.valid()) return "a channel's FIFO shape is invalid (nSteps or stepBytes)";
  if (sliceBytes > f.stepBytes) return "sliceBytes exceeds a channel's FIFO stepBytes";
  if (reinterpret_cast<uintptr_t>(f.steps) % 64 != 0) return "a channel's detached step buffers are not 64-byte aligned";
  return nullptr;
}

// Channel c's ring order: a permutation of the ranks with this rank at its
// position.
const char* validateRing(const DeviceWork& work, const DeviceChannel& ch) {
  bool seen[kMaxDeviceRanks] = {};
  for (int p = 0; p < work.nranks; ++p) {
    const int r = ch.ring[p];
    if (r >= work.nranks) return "a channel's ring names a rank out of range";
    if (seen[r]) return "a channel's ring names a rank twice (not a permutation)";
    seen[r] = true;
  }
  if (ch.ring[ch.position] != work.rank) return "a channel's ring does not put this rank at its position";
  return nullptr;
}

// A ring rank sends a whole chunk before it first receives (AllGather,
// ReduceScatter): a chunk of more than half a FIFO could fill every FIFO of
// the ring at once and deadlock it. The host executor caps its chunks the
// same way (Communicator::ringChunkElems).
const char* validateChunk(const DeviceWork& work, const DeviceChannel& ch) {
  if (!hasBlocks(work.coll)) return nullptr;
  const size_t sliceElems = work.sliceBytes / work.elemSize;
  const size_t halfFifo = sliceElems * static_cast<size_t>(std::max(1, std::min(ch.send.nSteps, ch.recv.nSteps) / 2));
  if (work.chunkElems > halfFifo) return "chunkElems exceeds half a channel's FIFO (the ring could deadlock)";
  return nullptr;
}

const char* validateChannel(const DeviceWork& work, const DeviceChannel& ch) {
  if (ch.position < 0 || ch.position >= work.nranks) return "a channel's ring position is out of range";
  if (needsRing(work.coll)) {
    if (const char* why = validateRing(work, ch)) return why;
  }
  if (const char* why = validateFifo(ch.recv, work.sliceBytes)) return why;
  if (const char* why = validateFifo(ch.send, work.sliceBytes)) return why;
  return validateChunk(work, ch);
}

}  // namespace

const char* validateDeviceWork(const DeviceWork& work, int nChannels) {
  if (nChannels < 1 || nChannels > kMaxDeviceChannels) return "nChannels out of range";
  if (const char* why = validateScalars(work)) return why;
  if (work.count == 0) return nullptr;
  if (const char* why = validateBuffers(work)) return why;
  if (work.nranks == 1) return nullptr;
  if (work.chunkElems == 0) return "chunkElems is 0";
  if (work.sliceBytes < work.elemSize || work.sliceBytes % work.elemSize != 0)
    return "sliceBytes is not a positive multiple of elemSize";
  for (int c = 0; c < nChannels; ++c) {
    size_t begin = 0, end = 0;
    channelPart(work.count, nChannels, c, work.alignElems, &begin, &end);
    if (begin == end) continue;  // this channel's block returns at once
    if (const char* why = validateChannel(work, work.channels[c])) return why;
  }
  return nullptr;
}

}  // namespace plait
