// ring_collectives.h — AllGather, ReduceScatter, Broadcast and Reduce as
// ring schedules over the primitives (the same verbs as ring_allreduce.h,
// host or device).
//
// Ranks are named by their position in the ring: `ring[p]` is the rank at
// position p, and this rank sits at `position`. The user's buffers are laid
// out by rank, so a schedule maps "the chunk that position c owns" to the
// block of rank ring[c].
//
//  * AllGather: every block travels once around the ring: position q sends
//    its own block, forwards the blocks of q-1 .. q-(n-2) and keeps q+1's
//    last. (n-1)/n of the output crosses each link: the minimum.
//  * ReduceScatter: the first half of the ring AllReduce: block c is summed
//    along the ring starting at position c+1 and ends, complete, at c.
//  * Broadcast: a pipelined chain starting at the root's position; every
//    rank forwards each slice as soon as it has it.
//  * Reduce: a pipelined chain ending at the root: the rank after the root
//    starts, each rank adds its input and forwards, the root writes.
// Every element is reduced in the same order whatever the channel split, so
// results are deterministic from run to run.
//
// Large buffers are processed in loops of one chunk per block; a chunk never
// exceeds half a FIFO, so a ring (where every rank sends before it receives)
// cannot fill every FIFO at once.
#pragma once

#include <cstddef>

#include "algorithms/portability.h"
#include "algorithms/ring_allreduce.h"

namespace plait {

struct RingArgs {
  const char* input = nullptr;
  char* output = nullptr;
  size_t count = 0;        // elements of this channel's part of one block
  size_t blockStride = 0;  // elements between consecutive ranks' blocks (AllGather out, ReduceScatter in)
  size_t elemSize = 1;
  int nranks = 1;
  int position = 0;        // this rank's position in the ring
  const int* ring = nullptr;  // rank at each position
  int rootPosition = 0;    // Broadcast, Reduce
  size_t chunkElems = 1;   // largest chunk per block per loop
  bool inPlace = false;    // AllGather: input is already in the output; Broadcast root: same buffer
};

// output[ring[p] * blockStride + i] <- input of ring[p], for every p.
template <class Prims>
PLAIT_HOST_DEVICE bool ringAllGather(Prims& prims, const RingArgs& a) {
  using detail::ringMod;
  const int n = a.nranks;
  const int q = a.position;
  auto out = [&](int pos, size_t base) {
    return a.output + (static_cast<size_t>(a.ring[pos]) * a.blockStride + base) * a.elemSize;
  };
  for (size_t base = 0; base < a.count; base += a.chunkElems) {
    const size_t m = a.count - base < a.chunkElems ? a.count - base : a.chunkElems;
    bool ok = a.inPlace ? prims.send(out(q, base), m)
                        : prims.copySend(a.input + base * a.elemSize, out(q, base), m);
    for (int j = 1; ok && j <= n - 2; ++j) ok = prims.recvCopySend(out(ringMod(q - j, n), base), m);
    if (ok) ok = prims.recv(out(ringMod(q + 1, n), base), m);
    if (!ok) return false;
  }
  return true;
}

// output[i] <- op over ranks of input[ring[q] * blockStride + i].
template <class Prims>
PLAIT_HOST_DEVICE bool ringReduceScatter(Prims& prims, const RingArgs& a) {
  using detail::ringMod;
  const int n = a.nranks;
  const int q = a.position;
  auto in = [&](int pos, size_t base) {
    return a.input + (static_cast<size_t>(a.ring[pos]) * a.blockStride + base) * a.elemSize;
  };
  for (size_t base = 0; base < a.count; base += a.chunkElems) {
    const size_t m = a.count - base < a.chunkElems ? a.count - base : a.chunkElems;
    bool ok = prims.send(in(ringMod(q - 1, n), base), m);
    for (int j = 2; ok && j <= n - 1; ++j) ok = prims.recvReduceSend(in(ringMod(q - j, n), base), m);
    if (ok) ok = prims.recvReduceCopy(in(q, base), a.output + base * a.elemSize, m, /*postOp=*/true);
    if (!ok) return false;
  }
  return true;
}

// output <- input of the root, on every rank (the root copies unless in place).
template <class Prims>
PLAIT_HOST_DEVICE bool ringBroadcast(Prims& prims, const RingArgs& a) {
  const int p = detail::ringMod(a.position - a.rootPosition, a.nranks);  // distance from the root
  if (p == 0) return a.inPlace ? prims.send(a.input, a.count) : prims.copySend(a.input, a.output, a.count);
  if (p == a.nranks - 1) return prims.recv(a.output, a.count);
  return prims.recvCopySend(a.output, a.count);
}

// Root's output <- op over ranks of input; other ranks' outputs untouched.
template <class Prims>
PLAIT_HOST_DEVICE bool ringReduce(Prims& prims, const RingArgs& a) {
  // Distance from the chain's start, the position after the root's.
  const int p = detail::ringMod(a.position - a.rootPosition - 1, a.nranks);
  if (p == 0) return prims.send(a.input, a.count);
  if (p == a.nranks - 1) return prims.recvReduceCopy(a.input, a.output, a.count, /*postOp=*/true);
  return prims.recvReduceSend(a.input, a.count);
}

}  // namespace plait
