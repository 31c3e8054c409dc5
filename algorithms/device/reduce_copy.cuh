// reduce_copy.cuh — the device counterpart of reduce.h's reduce-copy kernels:
// one thread block reads one or two sources, applies the operator's pre-op to
// either, reduces, applies the post-op, and writes one or two destinations, in
// one pass.
//
// Semantics are those of reduce.h's ReduceCopyFn, computed per element with
// the functors of reduce_ops.h (reduceBits below is reduceElt on storage
// bits): one source with no pre-op or post-op is a bit-exact byte copy (an fp8
// inf or a NaN payload survives it), anything computed goes through the
// accumulator and rounds back; with two sources the result is
// reduce(src0, src1) in that order; sources and destinations may alias exactly
// but not partially overlap.
//
// Where every pointer has the same offset modulo 16 the bulk moves as 16-byte
// vectors (the head up to the first 16-byte boundary and the tail go element
// by element); otherwise everything goes element by element. Loads are
// ld.global.cg (L2, not L1): a source may be a FIFO step another GPU or the
// host has just rewritten, and L1 is not coherent with their stores.
//
// Device code only; every thread of the block must call, with the same
// arguments. Does not synchronise the block.
#pragma once

#include <cstddef>
#include <cstdint>

#include "algorithms/reduce_ops.h"

namespace plait {
namespace device {

// The unsigned integer type of N bytes, for loads that __ldcg provides.
template <size_t N> struct BitsOf;
template <> struct BitsOf<1> { using type = unsigned char; };
template <> struct BitsOf<2> { using type = unsigned short; };
template <> struct BitsOf<4> { using type = unsigned int; };
template <> struct BitsOf<8> { using type = unsigned long long; };

// Loads a T (a scalar of 1, 2, 4 or 8 bytes) with ld.global.cg.
template <class T>
__device__ PLAIT_INLINE T loadCg(const T* p) {
  using B = typename BitsOf<sizeof(T)>::type;
  const B bits = __ldcg(reinterpret_cast<const B*>(p));
  T x;
  __builtin_memcpy(&x, &bits, sizeof(T));
  return x;
}

// One element computed from storage bits: reduceElt (reduce_ops.h) without
// the struct round trip.
template <class Fn, bool kTwoSrcs>
__device__ PLAIT_INLINE typename EltTraits<typename Fn::Elt>::Storage reduceBits(
    const Fn& fn, typename EltTraits<typename Fn::Elt>::Storage a,
    typename EltTraits<typename Fn::Elt>::Storage b, bool pre0, bool pre1, bool post) {
  using Traits = EltTraits<typename Fn::Elt>;
  auto x = Traits::loadBits(a);
  if (Fn::kHasPreOp && pre0) x = fn.preOp(x);
  if constexpr (kTwoSrcs) {
    auto y = Traits::loadBits(b);
    if (Fn::kHasPreOp && pre1) y = fn.preOp(y);
    x = fn.reduce(x, y);
  }
  if (Fn::kHasPostOp && post) x = fn.postOp(x);
  return Traits::storeBits(x);
}

// What one reduce-copy call works on. Null dsts are skipped; src1 null means
// one source.
struct ReduceCopyPtrs {
  const void* src0 = nullptr;
  const void* src1 = nullptr;
  void* dst0 = nullptr;
  void* dst1 = nullptr;
  size_t count = 0;  // elements
  bool preOpSrc0 = false, preOpSrc1 = false, postOp = false;
};

// 16-byte vectors each thread keeps in flight per loop trip (memory-level
// parallelism: a thread block with one outstanding load per thread moves only
// a few GB/s from HBM).
constexpr int kCopyUnroll = 8;
constexpr int kReduceUnroll = 4;

// Copies `bytes` bytes from src to dst (which may be equal: then nothing),
// block-wide, 16 bytes at a time where both share their offset modulo 16.
__device__ inline __noinline__ void blockCopyBytes(const char* src, char* dst, size_t bytes) {
  if (dst == nullptr || dst == src || bytes == 0) return;
  const size_t tid = threadIdx.x, nThreads = blockDim.x;
  const uintptr_t mis = reinterpret_cast<uintptr_t>(src) & 15;
  size_t head = bytes, nVec = 0;
  if ((reinterpret_cast<uintptr_t>(dst) & 15) == mis) {
    head = (16 - mis) & 15;
    if (head > bytes) head = bytes;
    nVec = (bytes - head) / 16;
  }
  const size_t vecEnd = head + nVec * 16;
  for (size_t i = tid; i < head; i += nThreads) dst[i] = static_cast<char>(__ldcg(reinterpret_cast<const unsigned char*>(src + i)));
  const uint4* s = reinterpret_cast<const uint4*>(src + head);
  uint4* d = reinterpret_cast<uint4*>(dst + head);
  size_t i = tid;
  for (; i + (kCopyUnroll - 1) * nThreads < nVec; i += kCopyUnroll * nThreads) {
    uint4 r[kCopyUnroll];
#pragma unroll
    for (int u = 0; u < kCopyUnroll; ++u) r[u] = __ldcg(s + i + u * nThreads);
#pragma unroll
    for (int u = 0; u < kCopyUnroll; ++u) d[i + u * nThreads] = r[u];
  }
  for (; i < nVec; i += nThreads) d[i] = __ldcg(s + i);
  for (i = vecEnd + tid; i < bytes; i += nThreads)
    dst[i] = static_cast<char>(__ldcg(reinterpret_cast<const unsigned char*>(src + i)));
}

template <class Fn, bool kTwoSrcs>
__device__ __noinline__ void blockReduceCopyImpl(const Fn& fn, const ReduceCopyPtrs& p) {
  using T = typename Fn::Elt;
  using S = typename EltTraits<T>::Storage;
  static_assert(sizeof(S) == sizeof(T) && 16 % sizeof(S) == 0);
  constexpr size_t kPerVec = 16 / sizeof(S);
  const S* s0 = static_cast<const S*>(p.src0);
  const S* s1 = static_cast<const S*>(p.src1);
  S* d0 = static_cast<S*>(p.dst0);
  S* d1 = static_cast<S*>(p.dst1);
  const size_t tid = threadIdx.x, nThreads = blockDim.x;

  // Pointers need only the element's alignment; vectorise when all share the
  // same offset within 16 bytes (FIFO steps are 64-byte aligned, so this is
  // the user buffer's own alignment).
  const uintptr_t mis = reinterpret_cast<uintptr_t>(s0) & 15;
  bool same = true;
  if (kTwoSrcs) same = same && (reinterpret_cast<uintptr_t>(s1) & 15) == mis;
  if (d0) same = same && (reinterpret_cast<uintptr_t>(d0) & 15) == mis;
  if (d1) same = same && (reinterpret_cast<uintptr_t>(d1) & 15) == mis;
  size_t head = p.count, nVec = 0;
  if (same) {
    head = ((16 - mis) & 15) / sizeof(S);
    if (head > p.count) head = p.count;
    nVec = (p.count - head) / kPerVec;
  }
  const size_t vecEnd = head + nVec * kPerVec;

  auto one = [&](size_t i) {
    const S a = loadCg(s0 + i);
    S b{};
    if constexpr (kTwoSrcs) b = loadCg(s1 + i);
    const S r = reduceBits<Fn, kTwoSrcs>(fn, a, b, p.preOpSrc0, p.preOpSrc1, p.postOp);
    if (d0) d0[i] = r;
    if (d1) d1[i] = r;
  };

  union Vec {
    uint4 v;
    S e[kPerVec];
  };
  const uint4* v0 = reinterpret_cast<const uint4*>(s0 + head);
  const uint4* v1 = kTwoSrcs ? reinterpret_cast<const uint4*>(s1 + head) : nullptr;
  uint4* w0 = d0 ? reinterpret_cast<uint4*>(d0 + head) : nullptr;
  uint4* w1 = d1 ? reinterpret_cast<uint4*>(d1 + head) : nullptr;
  // kUnroll vectors per thread in flight: load them all, then reduce and
  // store (what one outstanding load per thread leaves on the table is most of
  // the memory bandwidth: measured on an H100, perf/results/device/).
  auto vectors = [&]<int kUnroll>(size_t i) {
    Vec a[kUnroll], b[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      a[u].v = __ldcg(v0 + i + u * nThreads);
      if constexpr (kTwoSrcs) b[u].v = __ldcg(v1 + i + u * nThreads);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      Vec r;
#pragma unroll
      for (size_t k = 0; k < kPerVec; ++k)
        r.e[k] = reduceBits<Fn, kTwoSrcs>(fn, a[u].e[k], kTwoSrcs ? b[u].e[k] : S{}, p.preOpSrc0, p.preOpSrc1,
                                          p.postOp);
      if (w0) w0[i + u * nThreads] = r.v;
      if (w1) w1[i + u * nThreads] = r.v;
    }
  };
  size_t i = tid;
  for (; i + (kReduceUnroll - 1) * nThreads < nVec; i += kReduceUnroll * nThreads)
    vectors.template operator()<kReduceUnroll>(i);
  for (; i < nVec; i += nThreads) vectors.template operator()<1>(i);

  // The head and the tail, element by element, in one loop (one copy of the
  // element code: it is large for the 8- and 16-bit formats).
  const size_t nScalar = head + (p.count - vecEnd);
  for (size_t j = tid; j < nScalar; j += nThreads) one(j < head ? j : vecEnd + (j - head));
}

// dst0, dst1 <- post(reduce(pre(src0), pre(src1))), per the flags; see the
// file comment. Every thread of the block calls it with the same arguments.
template <class Fn>
__device__ inline void blockReduceCopy(const Fn& fn, const ReduceCopyPtrs& p) {
  if (p.count == 0 || (p.dst0 == nullptr && p.dst1 == nullptr)) return;
  const bool pre0 = Fn::kHasPreOp && p.preOpSrc0;
  const bool post = Fn::kHasPostOp && p.postOp;
  if (p.src1 == nullptr) {
    if (!pre0 && !post) {  // a plain copy: bit-exact
      const size_t bytes = p.count * sizeof(typename Fn::Elt);
      blockCopyBytes(static_cast<const char*>(p.src0), static_cast<char*>(p.dst0), bytes);
      blockCopyBytes(static_cast<const char*>(p.src0), static_cast<char*>(p.dst1), bytes);
      return;
    }
    blockReduceCopyImpl<Fn, false>(fn, p);
  } else {
    blockReduceCopyImpl<Fn, true>(fn, p);
  }
}

// The copy "operator" of the data-moving collectives and of point-to-point:
// bytes, no pre- or post-op. The copy verbs never reduce; reduce() exists
// because DevicePrimitives compiles one pass for every verb.
struct FuncCopyBytes : FuncBase<uint8_t> {
  __device__ explicit FuncCopyBytes(const RedOp& = {}) {}
  __device__ PLAIT_INLINE Acc reduce(Acc, Acc b) const { return b; }
};

}  // namespace device
}  // namespace plait
