// halving_doubling.h — AllReduce by recursive halving, then recursive
// doubling (Rabenseifner's algorithm): log2(n) exchanges each way instead of
// the ring's n-1, the same bytes per rank (2(n-1)/n of the buffer).
//
// With p = the largest power of two <= n and r = n - p, the first 2r ranks
// fold in pairs first: each even one sends its input to the odd one after it,
// which reduces the two and takes part for both; the even one waits for the
// result at the end. The p taking part are numbered 0..p-1 ("index": rank
// 2i+1 for i < r, rank i+r beyond). The buffer splits into p blocks, block i
// ending at index i:
//   reduce-scatter, mask = p/2 .. 1: exchange with index ^ mask, sending the
//     half of the current range that the peer keeps and reducing the half
//     this index keeps with the peer's copy of it;
//   all-gather, mask = 1 .. p/2: exchange with index ^ mask, sending the
//     range this index holds and receiving the peer's beside it.
// Each block is reduced at one index only, then copied, so every rank ends
// with the same bits. The all-gather half alone is AllGather by recursive
// doubling (recursiveDoublingAllGather, power-of-two rank counts). Exchanges go slice by slice, a send then a receive, so
// two peers each sending first never wait on each other beyond one FIFO step.
//
// `Links` hands out primitives between this rank and one peer:
//   Prims& links.prims(int slot, int recvFrom, int sendTo, bool srcScaled)
// (-1: no such direction; `srcScaled`: the local source already carries the
// PreMulSum scalar, so it is not applied again). A slot's primitives stay
// valid until the same slot is asked again; each verb moves at most one FIFO
// step when given `sliceElems` elements or fewer.
#pragma once

#include <cstddef>

#include "algorithms/portability.h"

namespace plait {

struct HalvingDoublingArgs {
  const char* input = nullptr;
  char* output = nullptr;
  size_t count = 0;       // elements
  size_t elemSize = 1;
  int nranks = 1;
  int rank = 0;
  size_t sliceElems = 1;  // elements per FIFO step
  size_t alignElems = 1;  // blocks are multiples of this (64 bytes), except the last
};

namespace hd {

PLAIT_HOST_DEVICE inline int floorPow2(int n) {
  int p = 1;
  while (p * 2 <= n) p *= 2;
  return p;
}
// The rank that takes part as `index` when `rem` pairs fold.
PLAIT_HOST_DEVICE inline int rankOfIndex(int index, int rem) { return index < rem ? 2 * index + 1 : index + rem; }
// The index of `rank`, or -1 for a folded (even, below 2*rem) rank.
PLAIT_HOST_DEVICE inline int indexOfRank(int rank, int rem) {
  if (rank >= 2 * rem) return rank - rem;
  return rank % 2 == 1 ? rank / 2 : -1;
}
PLAIT_HOST_DEVICE inline size_t minSize(size_t a, size_t b) { return a < b ? a : b; }

// Sends [send, send + sendN) to the peer while keepDst <- op(peer's, keepSrc)
// over keepN elements, slice by slice.
template <class Prims>
PLAIT_HOST_DEVICE bool exchangeReduce(Prims& p, const char* send, size_t sendN, const char* keepSrc, char* keepDst,
                                      size_t keepN, size_t slice, size_t elem, bool postOp) {
  for (size_t i = 0; i < sendN || i < keepN; i += slice) {
    if (i < sendN && !p.send(send + i * elem, minSize(slice, sendN - i))) return false;
    if (i < keepN && !p.recvReduceCopy(keepSrc + i * elem, keepDst + i * elem, minSize(slice, keepN - i), postOp))
      return false;
  }
  return true;
}

// Sends [send, send + sendN) while receiving recvN elements into recv.
template <class Prims>
PLAIT_HOST_DEVICE bool exchangeCopy(Prims& p, const char* send, size_t sendN, char* recv, size_t recvN, size_t slice,
                                    size_t elem) {
  for (size_t i = 0; i < sendN || i < recvN; i += slice) {
    if (i < sendN && !p.send(send + i * elem, minSize(slice, sendN - i))) return false;
    if (i < recvN && !p.recv(recv + i * elem, minSize(slice, recvN - i))) return false;
  }
  return true;
}

// The all-gather half: `index` holds block `index` (of p2, block b at
// start(b) elements of `out`) and ends with all of them, exchanging with
// index ^ 1, ^ 2, ... the range it holds for the one beside it.
template <class Links, class Start>
PLAIT_HOST_DEVICE bool doublingGather(Links& links, char* out, const Start& start, int index, int rem, int p2,
                                      size_t slice, size_t e) {
  int lo = index;
  for (int size = 1; size < p2; size *= 2) {
    const int peer = rankOfIndex(index ^ size, rem);
    const int other = lo ^ size;  // ranges are aligned to their size
    const size_t m0 = start(lo), o0 = start(other);
    auto& p = links.prims(0, peer, peer, true);
    if (!exchangeCopy(p, out + m0 * e, start(lo + size) - m0, out + o0 * e, start(other + size) - o0, slice, e))
      return false;
    lo = lo < other ? lo : other;
  }
  return true;
}

}  // namespace hd

template <class Links>
PLAIT_HOST_DEVICE bool halvingDoublingAllReduce(Links& links, const HalvingDoublingArgs& a) {
  const int p2 = hd::floorPow2(a.nranks);
  const int rem = a.nranks - p2;
  const size_t e = a.elemSize, slice = a.sliceElems;
  const char* work = a.input;  // where this rank's partial sums are
  bool scaled = false;         // whether `work` carries the PreMulSum scalar
  if (a.rank < 2 * rem) {      // the fold: even ranks hand their input over
    if (a.rank % 2 == 0) {
      if (!links.prims(0, -1, a.rank + 1, false).send(a.input, a.count)) return false;
      return links.prims(0, a.rank + 1, -1, true).recv(a.output, a.count);
    }
    if (!links.prims(0, a.rank - 1, -1, false).recvReduceCopy(a.input, a.output, a.count, false)) return false;
    work = a.output;
    scaled = true;
  }
  const int index = hd::indexOfRank(a.rank, rem);
  const size_t per = (a.count + p2 - 1) / p2;
  const size_t block = (per + a.alignElems - 1) / a.alignElems * a.alignElems;
  auto start = [&](int b) { return hd::minSize(a.count, static_cast<size_t>(b) * block); };
  int lo = 0, size = p2;
  for (int mask = p2 / 2; mask >= 1; mask /= 2) {
    const int half = size / 2;
    const bool upper = (index & mask) != 0;
    const int keep = upper ? lo + half : lo, give = upper ? lo : lo + half;
    const int peer = hd::rankOfIndex(index ^ mask, rem);
    const size_t k0 = start(keep), g0 = start(give);
    auto& p = links.prims(0, peer, peer, scaled);
    if (!hd::exchangeReduce(p, work + g0 * e, start(give + half) - g0, work + k0 * e, a.output + k0 * e,
                            start(keep + half) - k0, slice, e, mask == 1))
      return false;
    work = a.output;
    scaled = true;
    lo = keep;
    size = half;
  }
  if (!hd::doublingGather(links, a.output, start, index, rem, p2, slice, e)) return false;
  if (a.rank < 2 * rem) return links.prims(0, -1, a.rank - 1, true).send(a.output, a.count);
  return true;
}

// AllGather by recursive doubling, for a power-of-two rank count: output
// block r (count elements at r * count) is rank r's input. This rank's own
// block must already be in place in the output (the caller copies it).
template <class Links>
PLAIT_HOST_DEVICE bool recursiveDoublingAllGather(Links& links, const HalvingDoublingArgs& a) {
  auto start = [&](int b) { return static_cast<size_t>(b) * a.count; };
  return hd::doublingGather(links, a.output, start, a.rank, 0, a.nranks, a.sliceElems, a.elemSize);
}

}  // namespace plait
