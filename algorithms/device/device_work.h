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
#include "algorithms/types.h"
#include "nccl.h"
#include "transport/fifo.h"

namespace plait {

// Channels one launch can carry (one thread block each).
constexpr int kMaxDeviceChannels = 32;
// Threads per block of the collective kernels.
constexpr int kDeviceThreads = 256;

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
};

// A channel's ring: this rank's place in it and its two connectors. Rings
// differ per channel (the communicator rotates them), so the position does too.
struct DeviceChannel {
  DeviceFifo recv;   // from the previous rank: this rank's own FIFO memory
  DeviceFifo send;   // to the next rank: the next rank's FIFO memory, mapped here
  int position = 0;  // this rank's position in this channel's ring, [0, nranks)
};

// Why a channel stopped, as the kernel reports it in DeviceWork::channelStatus.
enum class DeviceStatus : uint32_t {
  kOk = 0,
  kAborted = 1,       // the communicator's abort flag, or this end of a FIFO was aborted
  kPeerAborted = 2,   // the other end of a FIFO was aborted (or gave up after its own error)
  kTimeout = 3,       // a wait ran past DeviceWork::timeoutCycles
  kSizeMismatch = 4,  // a received step's size differs from what this rank expected
};

// Human-readable name of a DeviceStatus ("ok", "aborted", ...).
PLAIT_HOST_DEVICE constexpr const char* deviceStatusName(DeviceStatus s) {
  switch (s) {
    case DeviceStatus::kOk: return "ok";
    case DeviceStatus::kAborted: return "aborted";
    case DeviceStatus::kPeerAborted: return "peer aborted";
    case DeviceStatus::kTimeout: return "timed out";
    case DeviceStatus::kSizeMismatch: return "step size mismatch (ranks disagree on the operation?)";
  }
  return "unknown";
}

// One ring AllReduce, as the host executor runs it (src/core/executor.cc):
// channel c of nChannels reduces the contiguous part channelPart() gives it,
// through the ring schedule of algorithms/ring_allreduce.h.
struct DeviceWork {
  const void* sendbuff = nullptr;  // device-accessible
  void* recvbuff = nullptr;        // device-accessible; may equal sendbuff
  size_t count = 0;                // elements in the whole buffer
  ncclDataType_t type = ncclFloat32;
  size_t elemSize = 4;             // must equal typeSize(type)
  RedOp op;                        // resolved (makeRedOp / makePreMulSumOp)
  int nranks = 1;
  size_t chunkElems = 0;           // RingAllReduceArgs::chunkElems; multiple of alignElems
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

// The elements [*begin, *end) that channel `channel` of `nChannels` reduces:
// contiguous parts, multiples of alignElems except the last. The same split as
// the host executor's runRingChannel, so either executor may run a channel.
PLAIT_HOST_DEVICE inline void channelPart(size_t count, int nChannels, int channel, size_t alignElems,
                                          size_t* begin, size_t* end) {
  const size_t perChannel = (count + static_cast<size_t>(nChannels) - 1) / static_cast<size_t>(nChannels);
  const size_t part = (perChannel + alignElems - 1) / alignElems * alignElems;
  const size_t b = part * static_cast<size_t>(channel);
  *begin = b < count ? b : count;
  *end = count - *begin < part ? count : *begin + part;
}

}  // namespace plait
