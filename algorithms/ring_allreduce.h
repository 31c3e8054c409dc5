// ring_allreduce.h — ring AllReduce: a reduce-scatter, then an all-gather.
//
// The n ranks of a ring split each loop of the buffer into n chunks. In the
// reduce-scatter half every rank sends one chunk to its successor, which adds
// its own contribution and passes it on; after n-1 steps the rank at ring
// position q holds the complete sum of chunk q. In the all-gather half that
// finished chunk travels once around the ring, each rank keeping a copy. Each
// rank sends and receives 2(n-1)/n of the buffer, the minimum for an
// all-reduce, and every chunk is reduced in the same order on all ranks, so
// all ranks end with bit-identical results.
//
// Position q works on chunk (q - j) mod n at step j:
//   send(q-1); recvReduceSend(q-j) for j=2..n-1; recvReduceCopySend(q);
//   recvCopySend(q-j) for j=1..n-2; recv(q+1).
// The primitives slice each chunk into FIFO steps, so the ring is pipelined.
#pragma once

#include <cstddef>

#include "algorithms/portability.h"

namespace plait {

struct RingAllReduceArgs {
  const char* input = nullptr;
  char* output = nullptr;
  size_t count = 0;        // elements in this channel's part
  size_t elemSize = 1;
  int nranks = 1;
  int position = 0;        // this rank's position in the ring
  size_t chunkElems = 1;   // largest chunk per rank per loop
  size_t alignElems = 1;   // chunks are multiples of this (except the tail)
};

namespace detail {
PLAIT_HOST_DEVICE inline size_t divUp(size_t a, size_t b) { return (a + b - 1) / b; }
PLAIT_HOST_DEVICE inline int ringMod(int a, int n) { return ((a % n) + n) % n; }
}  // namespace detail

// The elements [*begin, *end) that channel `channel` of `nChannels` works
// on: contiguous parts, multiples of alignElems (64 bytes) except the last,
// so channels never write the same cache line. Host and device executors
// split alike, so either may run a channel.
PLAIT_HOST_DEVICE inline void channelPart(size_t count, int nChannels, int channel, size_t alignElems,
                                          size_t* begin, size_t* end) {
  const size_t perChannel = (count + static_cast<size_t>(nChannels) - 1) / static_cast<size_t>(nChannels);
  const size_t part = (perChannel + alignElems - 1) / alignElems * alignElems;
  const size_t b = part * static_cast<size_t>(channel);
  *begin = b < count ? b : count;
  *end = count - *begin < part ? count : *begin + part;
}

template <class Prims>
PLAIT_HOST_DEVICE bool ringAllReduce(Prims& prims, const RingAllReduceArgs& a) {
  using detail::divUp;
  using detail::ringMod;
  const int n = a.nranks;
  const int q = a.position;
  const size_t loopElems = a.chunkElems * static_cast<size_t>(n);
  for (size_t base = 0; base < a.count; base += loopElems) {
    const size_t remaining = a.count - base < loopElems ? a.count - base : loopElems;
    const size_t chunk = divUp(divUp(remaining, static_cast<size_t>(n)), a.alignElems) * a.alignElems;
    // Offset and size of the chunk owned by ring position c in this loop.
    auto offsetOf = [&](int c) { return base + static_cast<size_t>(c) * chunk; };
    auto sizeOf = [&](int c) -> size_t {
      const size_t start = static_cast<size_t>(c) * chunk;
      if (start >= remaining) return 0;
      return remaining - start < chunk ? remaining - start : chunk;
    };
    auto in = [&](int c) { return a.input + offsetOf(c) * a.elemSize; };
    auto out = [&](int c) { return a.output + offsetOf(c) * a.elemSize; };
    bool ok = true;
    int c = ringMod(q - 1, n);
    if (sizeOf(c)) ok = prims.send(in(c), sizeOf(c));
    for (int j = 2; ok && j <= n - 1; ++j) {
      c = ringMod(q - j, n);
      if (sizeOf(c)) ok = prims.recvReduceSend(in(c), sizeOf(c));
    }
    c = q;
    if (ok && sizeOf(c)) ok = prims.recvReduceCopySend(in(c), out(c), sizeOf(c), /*postOp=*/true);
    for (int j = 1; ok && j <= n - 2; ++j) {
      c = ringMod(q - j, n);
      if (sizeOf(c)) ok = prims.recvCopySend(out(c), sizeOf(c));
    }
    c = ringMod(q + 1, n);
    if (ok && sizeOf(c)) ok = prims.recv(out(c), sizeOf(c));
    if (!ok) return false;
  }
  return true;
}

}  // namespace plait
