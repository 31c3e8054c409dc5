// task.h — one operation as the API hands it to the core: plain data.
#pragma once

#include <cstddef>
#include <cstdint>

#include "algorithms/reduce.h"
#include "nccl.h"

namespace plait {

class HostStream;

enum class CollType : uint8_t {
  kAllReduce,
  kBroadcast,
  kReduce,
  kAllGather,
  kReduceScatter,
  kAlltoAll,
  kGather,
  kScatter,
  kSend,
  kRecv,
};

const char* collName(CollType coll);

inline bool isSendOrRecv(CollType c) { return c == CollType::kSend || c == CollType::kRecv; }

// Operations run as batches of sends and receives (core/p2p.cc).
inline bool isPointToPoint(CollType c) {
  return c == CollType::kSend || c == CollType::kRecv || c == CollType::kAlltoAll || c == CollType::kGather ||
         c == CollType::kScatter;
}

// Whether the `bytes` at `a` and the `bytes` at `b` share any byte (an
// AlltoAll's input and output, each `bytes` long).
inline bool rangesOverlap(const void* a, const void* b, size_t bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + bytes && y < x + bytes;
}

struct Task {
  CollType coll = CollType::kAllReduce;
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  size_t count = 0;  // elements, as the API defines it for this collective
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t ncclOp = ncclSum;  // as the caller passed it (a user op's handle included)
  RedOp op;          // resolved reduction (Avg and PreMulSum made concrete)
  int root = 0;      // Broadcast, Reduce, Gather, Scatter
  int peer = -1;     // Send, Recv
  HostStream* stream = nullptr;  // null: blocking, complete on return
  // Device buffers (CUDA executor, src/device/): the op is enqueued on
  // cudaStream (a cudaStream_t; null: CUDA's default stream) and the call
  // returns at once. `stream` is then null.
  bool onDevice = false;
  void* cudaStream = nullptr;
  // PreMulSum with ncclScalarDevice on device buffers: the kernel reads the
  // scalar here when it starts (op.scalar is then unused).
  const void* deviceScalar = nullptr;
  // Per call (the nccl*Config entry points, core/call_options.h): the
  // algorithms it may use (kAlgo* bits; 0: any) and whether a selection it
  // cannot honour is an error; channel bounds (0: the tuner's); a tag for
  // the logs; a CUDA event to record once the kernel is launched.
  uint8_t algos = 0;
  bool forceAlgos = true;
  int minChannels = 0;
  int maxChannels = 0;
  uint64_t profilerTag = 0;
  void* launchEvent = nullptr;
};

// Bits of Task::algos: Plait's algorithms, by how a call may select them.
enum : uint8_t {
  kAlgoRing = 1,       // the ring schedules (host and device)
  kAlgoOneShot = 2,    // host AllReduce: every rank pushes to every peer
  kAlgoDirect = 4,     // registered buffers read in place (core/direct.h)
  kAlgoSymmetric = 8,  // device buffers in symmetric windows (no FIFO)
  kAlgoTree = 16,      // host log-depth schedules: halving-doubling AllReduce, binomial Broadcast and Reduce
};

}  // namespace plait
