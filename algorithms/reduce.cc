// reduce.cc — the host reduce-copy kernels for every type x op kind.
//
// Structure: one loop body (reduceLoopBody) written over elements with the
// functors of reduce_ops.h, with every option a compile-time flag so the loop
// is straight-line code that GCC vectorizes. The body is inlined into two
// wrappers compiled for different instruction sets: baseline x86-64 (or the
// native baseline elsewhere) and AVX2+F16C, chosen at run time. A table per
// (type, kind) maps the runtime flags of ReduceCopyArgs to the instantiation.
//
// Aliasing: sources and destinations may be the same array (in-place) but
// never partially overlap, so there is no loop-carried dependence; the loops
// say so with `#pragma GCC ivdep` instead of letting GCC add runtime overlap
// checks that would send in-place calls down a scalar path.
//
// Non-temporal stores: results are computed a block at a time into an
// L1-resident buffer and streamed out with movntdq (skipping the
// read-for-ownership of the destination), then one sfence per call.
#include "algorithms/reduce.h"

#include <array>
#include <cstring>
#include <type_traits>
#include <utility>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#endif

namespace plait {
namespace {

struct LoopPtrs {
  const void* s0;
  const void* s1;
  void* d0;
  void* d1;
  size_t n;
};

// Flag bits of one loop instantiation.
enum : int { kSrc2 = 1, kDst2 = 2, kPre0 = 4, kPre1 = 8, kPost = 16, kNumMasks = 32 };

template <class Fn, int kMask>
PLAIT_INLINE void reduceLoopBody(const Fn& fn, const LoopPtrs& p) {
  using Traits = EltTraits<typename Fn::Elt>;
  using S = typename Traits::Storage;
  const S* s0 = static_cast<const S*>(p.s0);
  const S* s1 = static_cast<const S*>(p.s1);
  S* d0 = static_cast<S*>(p.d0);
  S* d1 = static_cast<S*>(p.d1);
  const size_t n = p.n;
#if !defined(__clang__)  // clang: no equivalent it accepts quietly (vectorize(assume_safety) warns where it cannot)
#pragma GCC ivdep
#endif
  for (size_t i = 0; i < n; ++i) {
    auto a = Traits::loadBits(s0[i]);
    if constexpr ((kMask & kPre0) != 0) a = fn.preOp(a);
    if constexpr ((kMask & kSrc2) != 0) {
      auto b = Traits::loadBits(s1[i]);
      if constexpr ((kMask & kPre1) != 0) b = fn.preOp(b);
      a = fn.reduce(a, b);
    }
    if constexpr ((kMask & kPost) != 0) a = fn.postOp(a);
    const S r = Traits::storeBits(a);
    d0[i] = r;
    if constexpr ((kMask & kDst2) != 0) d1[i] = r;
  }
}

template <class Fn, int kMask>
void reduceLoopGeneric(const Fn& fn, const LoopPtrs& p) {
  reduceLoopBody<Fn, kMask>(fn, p);
}

#if defined(__x86_64__)
template <class Fn, int kMask>
__attribute__((target("avx2,f16c"))) void reduceLoopAvx2(const Fn& fn, const LoopPtrs& p) {
  reduceLoopBody<Fn, kMask>(fn, p);
}

// Half on AVX2: F16C converts 8 elements per instruction, where the portable
// integer conversion costs dozens. The operator runs on a block of 8 floats
// (GCC vectorizes that inner loop); the tail goes through the portable body,
// which is bit-identical to F16C (types_test checks every pattern).
template <class Fn, int kMask>
__attribute__((target("avx2,f16c"))) void reduceLoopHalfF16c(const Fn& fn, const LoopPtrs& p) {
  const auto* s0 = static_cast<const uint16_t*>(p.s0);
  const auto* s1 = static_cast<const uint16_t*>(p.s1);
  auto* d0 = static_cast<uint16_t*>(p.d0);
  auto* d1 = static_cast<uint16_t*>(p.d1);
  const size_t n = p.n;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    alignas(32) float a[8], b[8];
    _mm256_store_ps(a, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s0 + i))));
    if constexpr ((kMask & kSrc2) != 0)
      _mm256_store_ps(b, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s1 + i))));
    for (int j = 0; j < 8; ++j) {
      float x = a[j];
      if constexpr ((kMask & kPre0) != 0) x = fn.preOp(x);
      if constexpr ((kMask & kSrc2) != 0) {
        float y = b[j];
        if constexpr ((kMask & kPre1) != 0) y = fn.preOp(y);
        x = fn.reduce(x, y);
      }
      if constexpr ((kMask & kPost) != 0) x = fn.postOp(x);
      a[j] = x;
    }
    const __m128i r = _mm256_cvtps_ph(_mm256_load_ps(a), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d0 + i), r);
    if constexpr ((kMask & kDst2) != 0) _mm_storeu_si128(reinterpret_cast<__m128i*>(d1 + i), r);
  }
  const LoopPtrs rest{s0 + i, s1 ? s1 + i : nullptr, d0 + i, d1 ? d1 + i : nullptr, n - i};
  reduceLoopBody<Fn, kMask>(fn, rest);
}
#endif

// Which flag combinations a functor has loops for. Masks without a reduction,
// pre-op or post-op are plain copies and take the memcpy path.
template <class Fn>
constexpr bool hasLoop(int mask) {
  if ((mask & (kPre0 | kPre1)) != 0 && !Fn::kHasPreOp) return false;
  if ((mask & kPost) != 0 && !Fn::kHasPostOp) return false;
  if ((mask & kPre1) != 0 && (mask & kSrc2) == 0) return false;
  return (mask & (kSrc2 | kPre0 | kPost)) != 0;
}

template <class Fn>
using LoopFn = void (*)(const Fn&, const LoopPtrs&);

template <class Fn, bool kAvx2, int kMask>
constexpr LoopFn<Fn> loopOrNull() {
  if constexpr (!hasLoop<Fn>(kMask)) {
    return nullptr;
#if defined(__x86_64__)
  } else if constexpr (kAvx2 && std::is_same_v<typename Fn::Elt, Half>) {
    return &reduceLoopHalfF16c<Fn, kMask>;
  } else if constexpr (kAvx2) {
    return &reduceLoopAvx2<Fn, kMask>;
#endif
  } else {
    return &reduceLoopGeneric<Fn, kMask>;
  }
}

template <class Fn, bool kAvx2, int... kMasks>
constexpr std::array<LoopFn<Fn>, kNumMasks> makeLoopTable(std::integer_sequence<int, kMasks...>) {
  return {loopOrNull<Fn, kAvx2, kMasks>()...};
}

// ---- stores -----------------------------------------------------------------

// Copies `bytes` to dst with streaming stores where dst is 16-byte aligned,
// ordinary stores for the ragged ends. The caller issues the sfence.
void streamCopy(void* dst, const void* src, size_t bytes) {
#if defined(__x86_64__)
  char* d = static_cast<char*>(dst);
  const char* s = static_cast<const char*>(src);
  const size_t head = (16 - (reinterpret_cast<uintptr_t>(d) & 15)) & 15;
  if (head >= bytes) {
    std::memcpy(d, s, bytes);
    return;
  }
  std::memcpy(d, s, head);
  d += head, s += head, bytes -= head;
  size_t i = 0;
  for (; i + 64 <= bytes; i += 64) {
    const __m128i a = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i));
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 16));
    const __m128i c = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 32));
    const __m128i e = _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i + 48));
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i), a);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 16), b);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 32), c);
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i + 48), e);
  }
  for (; i + 16 <= bytes; i += 16)
    _mm_stream_si128(reinterpret_cast<__m128i*>(d + i),
                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(s + i)));
  std::memcpy(d + i, s + i, bytes - i);
#else
  std::memcpy(dst, src, bytes);
#endif
}

void storeFence() {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

// Below this many output bytes streaming stores are not worth the fence and
// the cache misses they cause when the output is read again soon.
constexpr size_t kMinStreamBytes = 16 << 10;
// Results are staged in a buffer this large (fits L1 with the inputs' lines).
constexpr size_t kStageBytes = 4 << 10;

void copyToDsts(const ReduceCopyArgs& a, size_t bytes) {
  const bool stream = a.nonTemporal && bytes >= kMinStreamBytes;
  for (int d = 0; d < a.nDsts; ++d) {
    if (a.dsts[d] == a.srcs[0]) continue;
    if (stream) {
      streamCopy(a.dsts[d], a.srcs[0], bytes);
    } else {
      std::memcpy(a.dsts[d], a.srcs[0], bytes);
    }
  }
  if (stream) storeFence();
}

// Runs `loop` a block at a time into a staging buffer and streams each block
// to the destinations.
template <class Fn>
void runStreamed(LoopFn<Fn> loop, const Fn& fn, const LoopPtrs& p, int nDsts) {
  using T = typename Fn::Elt;
  alignas(64) unsigned char stage[kStageBytes];
  constexpr size_t kBlock = kStageBytes / sizeof(T);
  const char* s0 = static_cast<const char*>(p.s0);
  const char* s1 = static_cast<const char*>(p.s1);
  for (size_t done = 0; done < p.n; done += kBlock) {
    const size_t n = p.n - done < kBlock ? p.n - done : kBlock;
    const size_t off = done * sizeof(T);
    LoopPtrs block{s0 + off, s1 ? s1 + off : nullptr, stage, nullptr, n};
    loop(fn, block);
    streamCopy(static_cast<char*>(p.d0) + off, stage, n * sizeof(T));
    if (nDsts == 2) streamCopy(static_cast<char*>(p.d1) + off, stage, n * sizeof(T));
  }
  storeFence();
}

// ---- the type-erased entry points ------------------------------------------

template <class T, RedOpKind kKind, bool kAvx2>
void reduceCopyEntry(const RedOp& op, const ReduceCopyArgs& a) {
  using Fn = FuncFor<kKind, T>;
  if (a.count == 0 || a.nDsts <= 0) return;
  int mask = 0;
  if (a.nSrcs == 2) mask |= kSrc2;
  if (a.nDsts == 2) mask |= kDst2;
  if (Fn::kHasPreOp && a.preOpSrc0) mask |= kPre0;
  if (Fn::kHasPreOp && a.preOpSrc1 && a.nSrcs == 2) mask |= kPre1;
  if (Fn::kHasPostOp && a.postOp) mask |= kPost;
  const size_t bytes = a.count * sizeof(T);
  if ((mask & ~kDst2) == 0) {
    copyToDsts(a, bytes);
    return;
  }
  static constexpr auto kLoops = makeLoopTable<Fn, kAvx2>(std::make_integer_sequence<int, kNumMasks>());
  const Fn fn(op);
  const LoopPtrs p{a.srcs[0], a.srcs[1], a.dsts[0], a.nDsts == 2 ? a.dsts[1] : nullptr, a.count};
  if (a.nonTemporal && bytes >= kMinStreamBytes) {
    runStreamed<Fn>(kLoops[mask & ~kDst2], fn, p, a.nDsts);
  } else {
    kLoops[mask](fn, p);
  }
}

using KindTable = std::array<ReduceCopyFn, kNumRedOpKinds>;

template <class T, bool kAvx2>
constexpr KindTable kindTable() {
  return {&reduceCopyEntry<T, RedOpKind::kSum, kAvx2>,
          &reduceCopyEntry<T, RedOpKind::kProd, kAvx2>,
          &reduceCopyEntry<T, RedOpKind::kMax, kAvx2>,
          &reduceCopyEntry<T, RedOpKind::kMin, kAvx2>,
          &reduceCopyEntry<T, RedOpKind::kPreMulSum, kAvx2>,
          &reduceCopyEntry<T, RedOpKind::kSumPostDiv, kAvx2>};
}

template <bool kAvx2>
constexpr std::array<KindTable, ncclNumTypes> typeTable() {
  return {kindTable<int8_t, kAvx2>(),   kindTable<uint8_t, kAvx2>(),  kindTable<int32_t, kAvx2>(),
          kindTable<uint32_t, kAvx2>(), kindTable<int64_t, kAvx2>(),  kindTable<uint64_t, kAvx2>(),
          kindTable<Half, kAvx2>(),     kindTable<float, kAvx2>(),    kindTable<double, kAvx2>(),
          kindTable<BFloat16, kAvx2>(), kindTable<Fp8E4M3, kAvx2>(),  kindTable<Fp8E5M2, kAvx2>()};
}
static_assert(ncclInt8 == 0 && ncclFloat8e5m2 == 11 && ncclNumTypes == 12,
              "typeTable lists types in ncclDataType_t order");

constexpr auto kGenericKernels = typeTable<false>();
#if defined(__x86_64__)
constexpr auto kAvx2Kernels = typeTable<true>();
#endif

bool cpuHasAvx2() {
#if defined(__x86_64__)
  static const bool has = __builtin_cpu_supports("avx2") && cpuHasF16c();
  return has;
#else
  return false;
#endif
}

bool gForceGeneric = false;  // tests only; see setReduceKernelGenericForTesting

bool useAvx2() { return !gForceGeneric && cpuHasAvx2(); }

// ---- RedOp construction -----------------------------------------------------

template <class T>
uint64_t eltBits(T value) {
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(T));
  return bits;
}

// The bits of 1/nranks in `type` (NCCL computes it in double, converts to
// float for the narrow types).
uint64_t reciprocalBits(ncclDataType_t type, int nranks) {
  const double r = 1.0 / nranks;
  switch (type) {
    case ncclFloat16: return eltBits(Half::fromFloat(static_cast<float>(r)));
    case ncclFloat32: return eltBits(static_cast<float>(r));
    case ncclFloat64: return eltBits(r);
    case ncclBfloat16: return eltBits(BFloat16::fromFloat(static_cast<float>(r)));
    case ncclFloat8e4m3: return eltBits(Fp8E4M3::fromFloat(static_cast<float>(r)));
    case ncclFloat8e5m2: return eltBits(Fp8E5M2::fromFloat(static_cast<float>(r)));
    default: return 0;
  }
}

}  // namespace

bool makeRedOp(ncclDataType_t type, int ncclOp, int nranks, RedOp* out) {
  if (out == nullptr || !isValidType(type) || nranks < 1) return false;
  RedOp op;
  switch (ncclOp) {
    case ncclSum: op.kind = RedOpKind::kSum; break;
    case ncclProd: op.kind = RedOpKind::kProd; break;
    case ncclMax: op.kind = RedOpKind::kMax; break;
    case ncclMin: op.kind = RedOpKind::kMin; break;
    case ncclAvg:
      if (isFloatingType(type)) {
        op.kind = RedOpKind::kPreMulSum;
        op.scalar = reciprocalBits(type, nranks);
      } else {
        op.kind = RedOpKind::kSumPostDiv;
        op.scalar = static_cast<uint64_t>(nranks);
      }
      break;
    default: return false;
  }
  *out = op;
  return true;
}

bool makePreMulSumOp(ncclDataType_t type, const void* scalar, RedOp* out) {
  if (out == nullptr || scalar == nullptr || !isValidType(type)) return false;
  RedOp op;
  op.kind = RedOpKind::kPreMulSum;
  std::memcpy(&op.scalar, scalar, typeSize(type));
  *out = op;
  return true;
}

ReduceCopyFn reduceCopyFn(ncclDataType_t type, RedOpKind kind) {
  const int k = static_cast<int>(kind);
  if (!isValidType(type) || k < 0 || k >= kNumRedOpKinds) return nullptr;
#if defined(__x86_64__)
  if (useAvx2()) return kAvx2Kernels[type][k];
#endif
  return kGenericKernels[type][k];
}

bool cpuHasF16c() {
#if defined(__x86_64__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  return __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & bit_F16C) != 0;
#else
  return false;
#endif
}

const char* reduceKernelIsa() { return useAvx2() ? "avx2" : "generic"; }

void setReduceKernelGenericForTesting(bool generic) { gForceGeneric = generic; }

}  // namespace plait
