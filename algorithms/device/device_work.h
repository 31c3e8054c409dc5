// device_work.h — what the CUDA executor hands a collective kernel: plain
// data, copied by value into the kernel's parameter space, so that no host
// object (communicator, connector, Status) crosses to the GPU (MSCCL++'s
// "host objects own resources, kernels get plain-data handles").
//
// Compiles with g++ and nvcc; needs no CUDA header.
#pragma once

#include <cstddef>
#include <cstdint>

#include "algorithms/portability.h"
#include "algorithms/reduce_ops.h"
#include "algorithms/ring_allreduce.h"    // channelPart
#include "algorithms/ring_collectives.h"  // RingArgs
#include "algorithms/types.h"
#include "nccl.h"
#include "transport/fifo.h"

namespace plait {

// Channels one launch can carry (one thread block each).
constexpr int kMaxDeviceChannels = 32;
// Threads per block of the collective kernels.
constexpr int kDeviceThreads = 256;
// Ranks a ring may have for the collectives that need its order (every one
// but AllReduce): the order travels in the kernel parameters, one byte a rank.
constexpr int kMaxDeviceRanks = 32;

// The collective a DeviceWork describes (the ring schedules of
// ring_allreduce.h and ring_collectives.h).
enum class DeviceColl : uint8_t { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kReduce };
constexpr int kNumDeviceColls = 5;

PLAIT_HOST_DEVICE constexpr const char* deviceCollName(DeviceColl c) {
  switch (c) {
    case DeviceColl::kAllReduce: return "AllReduce";
    case DeviceColl::kAllGather: return "AllGather";
    case DeviceColl::kReduceScatter: return "ReduceScatter";
    case DeviceColl::kBroadcast: return "Broadcast";
    case DeviceColl::kReduce: return "Reduce";
  }
  return "unknown";
}

// Whether `c` reduces (and so needs a kernel per type and operator); the
// others only move bytes.
PLAIT_HOST_DEVICE constexpr bool isDeviceReduction(DeviceColl c) {
  return c == DeviceColl::kAllReduce || c == DeviceColl::kReduceScatter || c == DeviceColl::kReduce;
}

// One end of a connector FIFO as a kernel sees it: the memory laid out exactly
// as transport/fifo.h describes (FifoControl in the first kFifoControlBytes,
// then nSteps step buffers of stepBytes each), mapped so that this GPU can
// load and store it (device memory, a peer GPU's memory through CUDA IPC, or
// mapped pinned host memory). The counters in it must be those a host
// FifoSender/FifoReceiver would see: a kernel continues the step numbering it
// finds there.
struct DeviceFifo {
  void* memory = nullptr;
  int nSteps = 0;           // in [1, kMaxFifoSteps]
  uint64_t stepBytes = 0;   // capacity of each step buffer; a positive multiple of 64
  // Where the step buffers are when not right after the control page (null):
  // a network connector's steps in this GPU's memory, which the NIC reads
  // and writes (GPUDirect RDMA) while the control page stays in host memory.
  void* steps = nullptr;
};

// A channel's ring: this rank's place in it and its two connectors. Rings
// differ per channel (the communicator rotates them), so the position does too.
struct DeviceChannel {
  DeviceFifo recv;   // from the previous rank: this rank's own FIFO memory
  DeviceFifo send;   // to the next rank: the next rank's FIFO memory, mapped here
  int position = 0;  // this rank's position in this channel's ring, [0, nranks)
  // ring[p] is the rank at position p, p < nranks (the communicator's
  // rings_[c]); a permutation with ring[position] == DeviceWork::rank. Read by
  // every collective but AllReduce, which needs no rank numbers.
  uint8_t ring[kMaxDeviceRanks] = {};
};

// Why a channel stopped, as the kernel reports it in DeviceWork::channelStatus.
enum class DeviceStatus : uint32_t {
  kOk = 0,
  kAborted = 1,       // the communicator's abort flag, or this end of a FIFO was aborted
  kPeerAborted = 2,   // the other end of a FIFO was aborted (or gave up after its own error)
  kTimeout = 3,       // a wait ran past DeviceWork::timeoutCycles
  kSizeMismatch = 4,  // a received step's size differs from what this rank expected
  kBarrierTimeout = 5,  // a symmetric kernel's barrier wait ran past timeoutCycles
};

// Human-readable name of a DeviceStatus ("ok", "aborted", ...).
PLAIT_HOST_DEVICE constexpr const char* deviceStatusName(DeviceStatus s) {
  switch (s) {
    case DeviceStatus::kOk: return "ok";
    case DeviceStatus::kAborted: return "aborted";
    case DeviceStatus::kPeerAborted: return "peer aborted";
    case DeviceStatus::kTimeout: return "timed out";
    case DeviceStatus::kSizeMismatch: return "step size mismatch (ranks disagree on the operation?)";
    case DeviceStatus::kBarrierTimeout:
      return "timed out at a symmetric kernel's barrier (a peer never arrived: did every rank pass buffers in "
             "windows registered alike?)";
  }
  return "unknown";
}

// One ring collective, as the host executor runs it (src/core/executor.cc
// for AllReduce, src/core/collectives.cc for the others): channel c of
// nChannels works on the contiguous part channelPart() gives it (of each
// rank's block, for AllGather and ReduceScatter), through the schedule of
// algorithms/ring_allreduce.h or ring_collectives.h.
struct DeviceWork {
  DeviceColl coll = DeviceColl::kAllReduce;
  // Device-accessible. As in NCCL: AllGather's recvbuff and ReduceScatter's
  // sendbuff hold nranks blocks of blockStride elements; a Broadcast's
  // sendbuff off the root and a Reduce's recvbuff off the root may be null.
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;        // may equal sendbuff (in place; AllGather: its own block)
  size_t count = 0;                // elements: the whole buffer (AllReduce, Broadcast, Reduce), one block (AllGather, ReduceScatter)
  size_t blockStride = 0;          // AllGather, ReduceScatter: elements between ranks' blocks, ≥ count (NCCL: count)
  int rank = 0;                    // this rank, [0, nranks) (all but AllReduce)
  int root = 0;                    // Broadcast, Reduce: the root's rank
  ncclDataType_t type = ncclFloat32;
  size_t elemSize = 4;             // must equal typeSize(type)
  RedOp op;                        // resolved (makeRedOp / makePreMulSumOp)
  // PreMulSum with a device-resident scalar (ncclScalarDevice): elemSize
  // bytes the kernel reads when it starts, replacing op.scalar; null: none.
  const void* scalarPtr = nullptr;
  int nranks = 1;
  // RingAllReduceArgs::chunkElems (a multiple of alignElems) or
  // RingArgs::chunkElems; for AllGather and ReduceScatter at most half a
  // FIFO (sliceBytes/elemSize × max(1, nSteps/2)), as on the host.
  size_t chunkElems = 0;
  size_t alignElems = 1;           // channel parts and chunks are multiples of this
  size_t sliceBytes = 0;           // bytes per FIFO step: a multiple of elemSize, ≤ every stepBytes
  // Non-zero: abort every wait (ncclCommAbort). Device-visible (mapped pinned
  // host memory or device memory); null: none.
  uint32_t* abortFlag = nullptr;
  // Every wait of a channel gives up this many clock64() cycles after the
  // channel started (the operation's deadline); 0: never. See
  // deviceCyclesForMs() in device_launch.h.
  uint64_t timeoutCycles = 0;
  // nChannels device-visible words; a channel that fails stores its
  // DeviceStatus there (one that succeeds leaves it alone: zero it before the
  // launch). Null: failures are not reported (but still stop the channel and
  // abort its FIFO ends).
  uint32_t* channelStatus = nullptr;
  DeviceChannel channels[kMaxDeviceChannels];
};
// Passed by value as the kernel's parameter (__grid_constant__): stay within
// the classic 4 KiB parameter limit.
static_assert(sizeof(DeviceWork) <= 4096);

// Point-to-point (DESIGN.md §3): a group's sends and receives on device
// buffers run as one launch, so that no rank's send waits for a receive its
// peer would only start in a later launch. Operations on the same lane run in
// order by one thread block (a FIFO has one producer and one consumer: every
// send to a peer shares a lane, every receive from it another); lanes run
// concurrently.
enum class DeviceP2pKind : uint8_t {
  kSend,      // buff -> the peer's FIFO
  kRecv,      // our FIFO from the peer -> buff
  kCopy,      // buff -> the next op's buff (a local copy: the next op is its kCopyDst)
  kCopyDst,   // the destination of the kCopy before it; runs nothing itself
};
// Operations one launch carries (the kernel parameters hold them: 24 bytes each).
constexpr int kMaxDeviceP2pOps = 160;

struct DeviceP2pOp {
  void* buff = nullptr;   // kSend, kCopy: source; kRecv, kCopyDst: destination (device memory)
  uint64_t bytes = 0;
  int32_t peer = -1;      // kSend, kRecv: index into the FIFO tables
  uint16_t lane = 0;      // the thread block that runs it, [0, nLanes)
  DeviceP2pKind kind = DeviceP2pKind::kCopy;
};
static_assert(sizeof(DeviceP2pOp) == 24);

struct DeviceP2pWork {
  int nOps = 0;
  int nLanes = 0;             // thread blocks of the launch
  uint64_t sliceBytes = 0;    // bytes per FIFO step, the same on both ends; ≤ every FIFO's stepBytes
  uint32_t* abortFlag = nullptr;
  uint64_t timeoutCycles = 0;
  // kMaxDeviceChannels words: lane l reports a failure in word l % kMaxDeviceChannels.
  uint32_t* laneStatus = nullptr;
  // Device-visible tables indexed by peer (nranks entries each): the FIFO to
  // that peer (its memory, mapped here) and the FIFO from it (ours). They
  // live as long as the communicator, so a captured graph may replay them.
  const DeviceFifo* sendFifos = nullptr;
  const DeviceFifo* recvFifos = nullptr;
  int nranks = 0;
  DeviceP2pOp ops[kMaxDeviceP2pOps];
};
static_assert(sizeof(DeviceP2pWork) <= 4096);

// The operator as the kernel applies it: work.op with the scalar read from
// work.scalarPtr when there is one (device code reads device memory there).
PLAIT_HOST_DEVICE inline RedOp deviceRedOp(const DeviceWork& w) {
  RedOp op = w.op;
  if (w.scalarPtr != nullptr) {
    op.scalar = 0;
    const unsigned char* from = static_cast<const unsigned char*>(w.scalarPtr);
    unsigned char* to = reinterpret_cast<unsigned char*>(&op.scalar);  // little-endian: the low bytes
    for (size_t i = 0; i < w.elemSize && i < sizeof(op.scalar); ++i) to[i] = from[i];
  }
  return op;
}

// The RingArgs with which channel `channel` of nChannels runs `work` (not
// AllReduce), built exactly as src/core/collectives.cc's
// runRingCollectiveChannel builds them for the host: the same channel part,
// block stride, chunk, in-place rules and root position, so that host and
// device ranks may share a ring. `ring` is the channel's ring widened to int
// (RingArgs::ring; it must outlive the args). Returns false when the channel
// has nothing to do.
PLAIT_HOST_DEVICE inline bool deviceRingArgs(const DeviceWork& w, int nChannels, int channel, const int* ring,
                                             RingArgs* a) {
  const size_t elem = w.elemSize;
  size_t begin = 0, end = 0;
  channelPart(w.count, nChannels, channel, w.alignElems, &begin, &end);
  if (begin == end) return false;
  *a = RingArgs{};
  a->count = end - begin;
  a->blockStride = w.blockStride;
  a->elemSize = elem;
  a->nranks = w.nranks;
  a->position = w.channels[channel].position;
  a->ring = ring;
  a->rootPosition = 0;  // the host's std::find over the ring
  for (int p = 0; p < w.nranks; ++p) {
    if (ring[p] == w.root) {
      a->rootPosition = p;
      break;
    }
  }
  a->chunkElems = w.chunkElems;
  // Unused buffers may be null: offset only real pointers.
  const char* in = static_cast<const char*>(w.sendbuff);
  char* out = static_cast<char*>(w.recvbuff);
  if (in == nullptr) in = out;
  if (out == nullptr) out = const_cast<char*>(in);
  a->input = in + begin * elem;
  a->output = out + begin * elem;  // AllGather: plus each rank's block, in the schedule
  if (w.coll == DeviceColl::kAllGather) {
    a->inPlace = w.sendbuff == static_cast<const char*>(w.recvbuff) + static_cast<size_t>(w.rank) * w.blockStride * elem;
  } else if (w.coll == DeviceColl::kBroadcast) {
    a->inPlace = w.sendbuff == w.recvbuff;
  }
  return true;
}

// The same args counted in bytes (elemSize 1): a schedule that only moves
// data (AllGather, Broadcast) then makes the same transfers, and the same
// FIFO steps, whatever the element type.
PLAIT_HOST_DEVICE inline RingArgs ringArgsInBytes(RingArgs a) {
  a.count *= a.elemSize;
  a.blockStride *= a.elemSize;
  a.chunkElems *= a.elemSize;
  a.elemSize = 1;
  return a;
}

}  // namespace plait
