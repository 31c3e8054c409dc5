// The host reduce-copy kernels against a scalar reference, for every type x
// op kind x option (1 or 2 sources, pre-ops, post-op, 1 or 2 destinations,
// in-place, streaming stores), odd counts and misaligned pointers, on both
// instruction-set paths; and the RedOp mapping of NCCL's ops.
//
// The reference works on raw element bits: integers in 128-bit arithmetic
// reduced modulo 2^bits, floating values in double rounded at each step the
// contract names (the float accumulator, the element type) with
// FormatReference for the narrow formats — no code shared with the kernels.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "algorithms/format_reference.h"
#include "algorithms/reduce.h"
#include "sweep_mode.h"

using plait::RedOp;
using plait::RedOpKind;
using plait::testing::FormatReference;

namespace {

const FormatReference& narrowReference(ncclDataType_t type) {
  static const FormatReference half(plait::testing::kHalfSpec);
  static const FormatReference bf16(plait::testing::kBFloat16Spec);
  static const FormatReference e4m3(plait::testing::kE4M3Spec);
  static const FormatReference e5m2(plait::testing::kE5M2Spec);
  switch (type) {
    case ncclFloat16: return half;
    case ncclBfloat16: return bf16;
    case ncclFloat8e4m3: return e4m3;
    default: return e5m2;
  }
}

// What the reference knows about one element type.
struct TypeModel {
  ncclDataType_t type;
  size_t size;
  bool isInt;
  bool isSigned;
  const FormatReference* narrow;  // null for integers, float and double

  uint64_t mask() const { return size == 8 ? ~0ull : (1ull << (8 * size)) - 1; }

  // Integer value, sign-extended for signed types.
  __int128 intValue(uint64_t bits) const {
    if (isSigned && ((bits >> (8 * size - 1)) & 1))
      return static_cast<__int128>(static_cast<int64_t>(bits | ~mask()));
    return static_cast<__int128>(bits);
  }
  uint64_t intBits(__int128 v) const { return static_cast<uint64_t>(v) & mask(); }

  double value(uint64_t bits) const {
    if (narrow) return narrow->decode(static_cast<uint32_t>(bits));
    if (size == 4) {
      float f;
      uint32_t u = static_cast<uint32_t>(bits);
      std::memcpy(&f, &u, 4);
      return f;
    }
    double d;
    std::memcpy(&d, &bits, 8);
    return d;
  }
  // Rounds a double to the element type (RNE; NaN to some NaN).
  uint64_t round(double v) const {
    if (narrow) {
      if (std::isnan(v)) return narrow->signBit() - 1;  // all ones but the sign: a NaN in all four
      return narrow->encode(v);
    }
    if (size == 4) {
      const float f = static_cast<float>(v);
      uint32_t u;
      std::memcpy(&u, &f, 4);
      return u;
    }
    uint64_t u;
    std::memcpy(&u, &v, 8);
    return u;
  }
  // Rounds to the accumulator: float for narrow types, else the type itself.
  double toAcc(double v) const { return narrow || size == 4 ? static_cast<float>(v) : v; }
  bool isNan(uint64_t bits) const { return !isInt && std::isnan(value(bits)); }
};

TypeModel modelOf(ncclDataType_t t) {
  const bool narrow = t == ncclFloat16 || t == ncclBfloat16 || t == ncclFloat8e4m3 || t == ncclFloat8e5m2;
  const bool isInt = !plait::isFloatingType(t);
  const bool isSigned = t == ncclInt8 || t == ncclInt32 || t == ncclInt64;
  return TypeModel{t, plait::typeSize(t), isInt, isSigned, narrow ? &narrowReference(t) : nullptr};
}

struct Case {
  RedOp op;
  int nSrcs, nDsts;
  bool pre0, pre1, post, inPlace, nonTemporal;
  size_t count;
  int divisor;  // SumPostDiv
};

// One element of the result, by the contract in reduce_ops.h / reduce.h.
uint64_t referenceElt(const TypeModel& m, const Case& c, uint64_t a, uint64_t b) {
  const bool pre = c.op.kind == RedOpKind::kPreMulSum;
  const bool pre0 = pre && c.pre0, pre1 = pre && c.pre1 && c.nSrcs == 2;
  const bool post = c.op.kind == RedOpKind::kSumPostDiv && c.post;
  // Nothing to compute: a bit-exact copy (an fp8 inf stays inf, NaN payloads stay).
  if (c.nSrcs == 1 && !pre0 && !post) return a;
  if (m.isInt) {
    __int128 x = m.intValue(a), y = m.intValue(b);
    const __int128 s = m.intValue(c.op.scalar & m.mask());
    // Products wrap like the element type: multiply unsigned (no UB), then truncate.
    auto wrapMul = [](__int128 p, __int128 q) {
      return static_cast<__int128>(static_cast<unsigned __int128>(p) * static_cast<unsigned __int128>(q));
    };
    if (pre0) x = m.intValue(m.intBits(wrapMul(x, s)));
    if (pre1) y = m.intValue(m.intBits(wrapMul(y, s)));
    __int128 r = x;
    if (c.nSrcs == 2) {
      switch (c.op.kind) {
        case RedOpKind::kProd: r = m.intValue(m.intBits(wrapMul(x, y))); break;
        case RedOpKind::kMax: r = x > y ? x : y; break;
        case RedOpKind::kMin: r = x < y ? x : y; break;
        default: r = m.intValue(m.intBits(static_cast<__int128>(static_cast<unsigned __int128>(x) + static_cast<unsigned __int128>(y)))); break;
      }
    }
    if (post) {  // truncate toward zero, written without relying on '/' rounding
      const __int128 q = (r < 0 ? -r : r) / c.divisor;
      r = r < 0 ? -q : q;
    }
    return m.intBits(r);
  }
  double x = m.value(a), y = m.value(b);
  const double s = m.value(c.op.scalar & m.mask());
  if (pre0) x = m.value(m.round(m.toAcc(x * s)));
  if (pre1) y = m.value(m.round(m.toAcc(y * s)));
  double r = x;
  if (c.nSrcs == 2) {
    switch (c.op.kind) {
      case RedOpKind::kProd: r = m.toAcc(x * y); break;
      case RedOpKind::kMax: r = std::isnan(x) ? y : std::isnan(y) ? x : std::fmax(x, y); break;
      case RedOpKind::kMin: r = std::isnan(x) ? y : std::isnan(y) ? x : std::fmin(x, y); break;
      default: r = m.toAcc(x + y); break;
    }
  }
  if (post) r = m.toAcc(r / m.toAcc(c.divisor));
  return m.round(r);
}

bool sameResult(const TypeModel& m, RedOpKind kind, uint64_t got, uint64_t want) {
  if (got == want) return true;
  if (m.isNan(got) && m.isNan(want)) return true;
  // max/min of +0 and -0 may return either.
  if ((kind == RedOpKind::kMax || kind == RedOpKind::kMin) && !m.isInt && m.value(got) == 0 &&
      m.value(want) == 0)
    return true;
  return false;
}

uint64_t randomElt(const TypeModel& m, std::mt19937_64& rng) {
  const uint64_t raw = rng() & m.mask();
  if (m.isInt || m.narrow || rng() % 4 == 0) return raw;  // every pattern, specials included
  // float/double: mostly moderate values, so sums and products are not all inf.
  std::uniform_real_distribution<double> dist(-100.0, 100.0);
  return m.round(dist(rng));
}

// A buffer with guard bytes around the elements and a chosen misalignment.
struct Buffer {
  static constexpr size_t kGuard = 64;
  static constexpr unsigned char kPattern = 0xA5;
  std::vector<unsigned char> bytes;
  size_t offset;  // bytes from the start of the data area
  Buffer(size_t dataBytes, size_t misalignElems, size_t eltSize)
      : bytes(2 * kGuard + dataBytes + 64 + misalignElems * eltSize, kPattern),
        offset(misalignElems * eltSize) {}
  unsigned char* data() {
    // Start from a 64-byte aligned point so the misalignment is what we chose.
    auto base = reinterpret_cast<uintptr_t>(bytes.data() + kGuard);
    base = (base + 63) & ~uintptr_t(63);
    return reinterpret_cast<unsigned char*>(base) + offset;
  }
  bool guardsIntact(size_t dataBytes) {
    const unsigned char* d = data();
    for (const unsigned char* p = bytes.data(); p < d; ++p)
      if (*p != kPattern) return false;
    for (const unsigned char* p = d + dataBytes; p < bytes.data() + bytes.size(); ++p)
      if (*p != kPattern) return false;
    return true;
  }
  uint64_t get(size_t i, size_t size) {
    uint64_t v = 0;
    std::memcpy(&v, data() + i * size, size);
    return v;
  }
  void set(size_t i, size_t size, uint64_t v) { std::memcpy(data() + i * size, &v, size); }
};

std::string describe(const TypeModel& m, const Case& c) {
  std::ostringstream os;
  os << plait::typeName(m.type) << " kind=" << static_cast<int>(c.op.kind) << " nSrcs=" << c.nSrcs
     << " nDsts=" << c.nDsts << " pre0=" << c.pre0 << " pre1=" << c.pre1 << " post=" << c.post
     << " inPlace=" << c.inPlace << " nt=" << c.nonTemporal << " count=" << c.count
     << " isa=" << plait::reduceKernelIsa();
  return os.str();
}

// Runs one case; returns false (after reporting) on a wrong element or a
// write outside the destination.
bool runCase(const TypeModel& m, const Case& c, std::mt19937_64& rng) {
  const size_t sz = m.size, bytes = c.count * sz;
  Buffer src0(bytes, rng() % 4, sz), src1(bytes, rng() % 4, sz);
  Buffer dst0(bytes, rng() % 4, sz), dst1(bytes, rng() % 4, sz);
  std::vector<uint64_t> a(c.count), b(c.count);
  for (size_t i = 0; i < c.count; ++i) {
    a[i] = randomElt(m, rng), b[i] = randomElt(m, rng);
    src0.set(i, sz, a[i]);
    src1.set(i, sz, b[i]);
  }
  Buffer& out0 = c.inPlace ? src0 : dst0;
  plait::ReduceCopyArgs args;
  args.srcs[0] = src0.data();
  args.srcs[1] = c.nSrcs == 2 ? src1.data() : nullptr;
  args.nSrcs = c.nSrcs;
  args.dsts[0] = out0.data();
  args.dsts[1] = c.nDsts == 2 ? dst1.data() : nullptr;
  args.nDsts = c.nDsts;
  args.count = c.count;
  args.preOpSrc0 = c.pre0, args.preOpSrc1 = c.pre1, args.postOp = c.post;
  args.nonTemporal = c.nonTemporal;
  const plait::ReduceCopyFn fn = plait::reduceCopyFn(m.type, c.op.kind);
  REQUIRE(fn != nullptr);
  fn(c.op, args);

  for (Buffer* out : {&out0, c.nDsts == 2 ? &dst1 : nullptr}) {
    if (out == nullptr) continue;
    if (!out->guardsIntact(bytes)) {
      FAIL_CHECK("write outside the destination: " << describe(m, c));
      return false;
    }
    for (size_t i = 0; i < c.count; ++i) {
      const uint64_t want = referenceElt(m, c, a[i], b[i]), got = out->get(i, sz);
      if (!sameResult(m, c.op.kind, got, want)) {
        FAIL_CHECK(describe(m, c) << " element " << i << ": a=0x" << std::hex << a[i] << " b=0x"
                                  << b[i] << " got 0x" << got << " want 0x" << want);
        return false;
      }
    }
  }
  if (!src1.guardsIntact(bytes) || (!c.inPlace && !src0.guardsIntact(bytes))) {
    FAIL_CHECK("a source was overwritten: " << describe(m, c));
    return false;
  }
  for (size_t i = 0; i < c.count && !c.inPlace; ++i) {
    if (src0.get(i, sz) != a[i]) {
      FAIL_CHECK("source 0 modified: " << describe(m, c));
      return false;
    }
  }
  return true;
}

// A scalar that is neither 0 nor 1 in the element type, so pre-ops show.
uint64_t interestingScalar(const TypeModel& m, std::mt19937_64& rng) {
  if (m.isInt) return (rng() | 2) & m.mask();
  const double choices[] = {0.5, 1.0 / 3.0, -1.75, 3.0, 0.1};
  return m.round(choices[rng() % 5]);
}

RedOp opFor(const TypeModel& m, RedOpKind kind, std::mt19937_64& rng, int* divisor) {
  RedOp op;
  op.kind = kind;
  *divisor = 1;
  if (kind == RedOpKind::kPreMulSum) op.scalar = interestingScalar(m, rng);
  if (kind == RedOpKind::kSumPostDiv) {
    *divisor = 1 + static_cast<int>(rng() % 7);
    op.scalar = static_cast<uint64_t>(*divisor);
  }
  return op;
}

// Every type x kind x flag combination for the given counts; `fullFlags`
// false limits the flags to the natural ones, for large counts.
int sweep(const std::vector<size_t>& counts, bool fullFlags) {
  std::mt19937_64 rng(42);
  int failures = 0;
  for (int t = 0; t < ncclNumTypes; ++t) {
    const TypeModel m = modelOf(static_cast<ncclDataType_t>(t));
    for (int k = 0; k < plait::kNumRedOpKinds; ++k) {
      const auto kind = static_cast<RedOpKind>(k);
      for (int flags = 0; flags < 128; ++flags) {
        Case c{};
        c.op = opFor(m, kind, rng, &c.divisor);
        c.nSrcs = 1 + (flags & 1), c.nDsts = 1 + ((flags >> 1) & 1);
        c.pre0 = (flags >> 2) & 1, c.pre1 = (flags >> 3) & 1, c.post = (flags >> 4) & 1;
        c.inPlace = (flags >> 5) & 1, c.nonTemporal = (flags >> 6) & 1;
        if (!fullFlags && (c.nSrcs != 2 || c.pre0 || c.pre1 != (kind == RedOpKind::kPreMulSum) ||
                           c.post != (kind == RedOpKind::kSumPostDiv)))
          continue;
        for (size_t count : counts) {
          c.count = count;
          if (!runCase(m, c, rng) && ++failures >= 20) return failures;
        }
      }
    }
  }
  return failures;
}

// Runs `body` on the AVX2 path (when the CPU has it) and the generic path.
template <class Body>
void onEveryIsa(Body body) {
  for (bool generic : {false, true}) {
    plait::setReduceKernelGenericForTesting(generic);
    INFO("isa " << plait::reduceKernelIsa());
    body();
  }
  plait::setReduceKernelGenericForTesting(false);
}

}  // namespace

// PLAIT_TEST_SWEEP=quick (the ASan pass in CI, where this case took most of
// the test's 59 s): the dispatched kernels only; every ISA runs in the plain
// pass and nightly.
TEST_CASE("every type x op x option matches the reference at odd counts", "[reduce]") {
  if (plait_test::quickSweepRequested()) {
    INFO("isa " << plait::reduceKernelIsa());
    CHECK(sweep({0, 1, 7, 33, 1023}, /*fullFlags=*/true) == 0);
    return;
  }
  onEveryIsa([] { CHECK(sweep({0, 1, 7, 33, 1023}, /*fullFlags=*/true) == 0); });
}

// PLAIT_TEST_SWEEP=quick (the ASan pass in CI, where this case took 100 s,
// then 26 s with 40007 elements): one odd size on the dispatched path only,
// the smallest whose 1-byte outputs reach the streaming stores (16 KiB) plus
// a tail; both sizes on both paths run in the plain pass and nightly.
TEST_CASE("large buffers (the streaming-store path) match the reference", "[reduce]") {
  if (plait_test::quickSweepRequested()) {
    INFO("isa " << plait::reduceKernelIsa());
    CHECK(sweep({(16 << 10) + 7}, /*fullFlags=*/false) == 0);
    return;
  }
  onEveryIsa([] { CHECK(sweep({20000, 40007}, /*fullFlags=*/false) == 0); });
}

TEST_CASE("reduceCopyFn covers every valid pair and rejects invalid ones", "[reduce]") {
  for (int t = 0; t < ncclNumTypes; ++t)
    for (int k = 0; k < plait::kNumRedOpKinds; ++k)
      CHECK(plait::reduceCopyFn(static_cast<ncclDataType_t>(t), static_cast<RedOpKind>(k)) != nullptr);
  CHECK(plait::reduceCopyFn(static_cast<ncclDataType_t>(ncclNumTypes), RedOpKind::kSum) == nullptr);
  CHECK(plait::reduceCopyFn(static_cast<ncclDataType_t>(-1), RedOpKind::kSum) == nullptr);
  CHECK(plait::reduceCopyFn(ncclFloat, static_cast<RedOpKind>(6)) == nullptr);
}

TEST_CASE("makeRedOp maps NCCL's ops, Avg per type as NCCL does", "[reduce]") {
  RedOp op;
  REQUIRE(plait::makeRedOp(ncclFloat, ncclSum, 4, &op));
  CHECK(op.kind == RedOpKind::kSum);
  REQUIRE(plait::makeRedOp(ncclInt8, ncclProd, 4, &op));
  CHECK(op.kind == RedOpKind::kProd);
  REQUIRE(plait::makeRedOp(ncclUint64, ncclMax, 4, &op));
  CHECK(op.kind == RedOpKind::kMax);
  REQUIRE(plait::makeRedOp(ncclHalf, ncclMin, 4, &op));
  CHECK(op.kind == RedOpKind::kMin);

  REQUIRE(plait::makeRedOp(ncclFloat, ncclAvg, 3, &op));
  CHECK(op.kind == RedOpKind::kPreMulSum);
  const float third = 1.0f / 3.0f;
  uint32_t thirdBits;
  std::memcpy(&thirdBits, &third, 4);
  CHECK(op.scalar == thirdBits);
  REQUIRE(plait::makeRedOp(ncclDouble, ncclAvg, 8, &op));
  CHECK(op.scalar == 0x3fc0000000000000ull);  // 0.125
  REQUIRE(plait::makeRedOp(ncclHalf, ncclAvg, 4, &op));
  CHECK(op.scalar == 0x3400);  // 0.25
  REQUIRE(plait::makeRedOp(ncclBfloat16, ncclAvg, 2, &op));
  CHECK(op.scalar == 0x3f00);  // 0.5
  REQUIRE(plait::makeRedOp(ncclFloat8e4m3, ncclAvg, 4, &op));
  CHECK(op.scalar == 0x28);  // 0.25 = 2^-2: exponent 5, mantissa 0
  REQUIRE(plait::makeRedOp(ncclFloat8e5m2, ncclAvg, 4, &op));
  CHECK(op.scalar == 0x34);  // 0.25: exponent 13

  REQUIRE(plait::makeRedOp(ncclInt32, ncclAvg, 5, &op));
  CHECK(op.kind == RedOpKind::kSumPostDiv);
  CHECK(op.scalar == 5);

  RedOp untouched{RedOpKind::kMax, 77};
  CHECK(!plait::makeRedOp(ncclFloat, 5, 2, &untouched));
  CHECK(!plait::makeRedOp(ncclFloat, -1, 2, &untouched));
  CHECK(!plait::makeRedOp(static_cast<ncclDataType_t>(12), ncclSum, 2, &untouched));
  CHECK(!plait::makeRedOp(ncclFloat, ncclSum, 0, &untouched));
  CHECK(!plait::makeRedOp(ncclFloat, ncclSum, 2, nullptr));
  CHECK((untouched.kind == RedOpKind::kMax && untouched.scalar == 77));

  const double scalar = -2.5;
  REQUIRE(plait::makePreMulSumOp(ncclDouble, &scalar, &op));
  CHECK(op.kind == RedOpKind::kPreMulSum);
  CHECK(std::memcmp(&op.scalar, &scalar, 8) == 0);
  CHECK(!plait::makePreMulSumOp(ncclDouble, nullptr, &op));
}

TEST_CASE("Avg over ranks, chained as a ring would, gives the mean", "[reduce]") {
  // Rank r contributes r+1 everywhere; the chain is acc = pre(x0) + pre(x1),
  // then acc = acc + pre(x_r). Exact for these values in every type.
  const int nranks = 4;
  const size_t n = 37;
  for (ncclDataType_t t : {ncclFloat, ncclDouble, ncclHalf, ncclBfloat16, ncclInt32, ncclUint8,
                           ncclInt64, ncclFloat8e4m3, ncclFloat8e5m2}) {
    const TypeModel m = modelOf(t);
    INFO(plait::typeName(t));
    RedOp op;
    REQUIRE(plait::makeRedOp(t, ncclAvg, nranks, &op));
    auto encode = [&](int v) { return m.isInt ? static_cast<uint64_t>(v) : m.round(v); };
    std::vector<unsigned char> x(nranks * n * m.size), acc(n * m.size);
    for (int r = 0; r < nranks; ++r)
      for (size_t i = 0; i < n; ++i) {
        const uint64_t v = encode(r + 1);
        std::memcpy(&x[(r * n + i) * m.size], &v, m.size);
      }
    const auto fn = plait::reduceCopyFn(t, op.kind);
    plait::ReduceCopyArgs args;
    args.nSrcs = 2;
    args.count = n;
    args.dsts[0] = acc.data();
    for (int r = 1; r < nranks; ++r) {
      args.srcs[0] = r == 1 ? static_cast<const void*>(&x[0]) : acc.data();
      args.srcs[1] = &x[r * n * m.size];
      args.preOpSrc0 = r == 1;
      args.preOpSrc1 = true;
      args.postOp = r == nranks - 1;
      fn(op, args);
    }
    // Mean of 1..4 is 2.5; integer Avg truncates to 2.
    const uint64_t want = m.isInt ? 2 : m.round(2.5);
    for (size_t i = 0; i < n; ++i) {
      uint64_t got = 0;
      std::memcpy(&got, &acc[i * m.size], m.size);
      CHECK(got == want);
    }
  }
}
