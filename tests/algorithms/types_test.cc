// Conversions of the narrow floating types, checked exhaustively against an
// independent reference (format_reference.h), plus known rounding cases and
// the ncclDataType_t helpers.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>

#include "algorithms/format_reference.h"
#include "algorithms/reduce.h"
#include "algorithms/types.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

using plait::testing::FormatReference;

namespace {

float fromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
uint32_t toBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}

template <class T> uint32_t bitsOf(T x) { return x.bits; }
template <class T> T fromRaw(uint32_t b) {
  T x;
  x.bits = static_cast<decltype(x.bits)>(b);
  return x;
}

template <class T> FormatReference makeReference();
template <> FormatReference makeReference<plait::Half>() { return FormatReference(plait::testing::kHalfSpec); }
template <> FormatReference makeReference<plait::BFloat16>() { return FormatReference(plait::testing::kBFloat16Spec); }
template <> FormatReference makeReference<plait::Fp8E4M3>() { return FormatReference(plait::testing::kE4M3Spec); }
template <> FormatReference makeReference<plait::Fp8E5M2>() { return FormatReference(plait::testing::kE5M2Spec); }

// Checks fromFloat(f) against the reference; returns false (and reports) on
// a mismatch. NaN inputs must give a NaN of the same sign.
template <class T>
bool checkEncode(const FormatReference& ref, float f) {
  const uint32_t got = bitsOf(T::fromFloat(f));
  if (std::isnan(f)) {
    const bool ok = ref.isNan(got) && ((got & ref.signBit()) != 0) == std::signbit(f);
    if (!ok) FAIL_CHECK("NaN " << std::hex << toBits(f) << " -> " << got);
    return ok;
  }
  const uint32_t want = ref.encode(static_cast<double>(f));
  if (got != want) {
    FAIL_CHECK("fromFloat(" << f << " = 0x" << std::hex << toBits(f) << ") = 0x" << got
                            << ", want 0x" << want);
    return false;
  }
  return true;
}

template <class T>
void checkAllPatterns() {
  const FormatReference ref = makeReference<T>();
  const uint32_t count = 1u << (8 * sizeof(T));
  int failures = 0;
  for (uint32_t b = 0; b < count && failures < 10; ++b) {
    const T x = fromRaw<T>(b);
    const float f = x.toFloat();
    const double want = ref.decode(b);
    if (std::isnan(want)) {
      if (!std::isnan(f)) {
        ++failures;
        FAIL_CHECK("0x" << std::hex << b << " should be NaN");
      }
      // Round trip keeps NaN-ness and sign; a quiet IEEE NaN keeps its bits.
      const uint32_t back = bitsOf(T::fromFloat(f));
      if (!ref.isNan(back) || (back & ref.signBit()) != (b & ref.signBit())) {
        ++failures;
        FAIL_CHECK("NaN 0x" << std::hex << b << " came back as 0x" << back);
      }
      continue;
    }
    if (static_cast<double>(f) != want || std::signbit(f) != std::signbit(want)) {
      ++failures;
      FAIL_CHECK("toFloat(0x" << std::hex << b << ") = " << f << ", want " << want);
      continue;
    }
    uint32_t expect = b;
    if (std::isinf(want) && ref.saturates())  // fp8: inf saturates to max finite
      expect = (b & ref.signBit()) | ref.encode(ref.maxFinite());
    const uint32_t back = bitsOf(T::fromFloat(f));
    if (back != expect) {
      ++failures;
      FAIL_CHECK("0x" << std::hex << b << " round-trips to 0x" << back);
    }
  }
  CHECK(failures == 0);
}

// Every representable value, its neighbours in float, every midpoint between
// consecutive values and the floats next to it, beyond the top, and zeros.
template <class T>
void checkRoundingAtBoundaries() {
  const FormatReference ref = makeReference<T>();
  const std::vector<double> values = ref.finiteValues();
  int failures = 0;
  auto check = [&](double v) {
    for (float f : {static_cast<float>(v), -static_cast<float>(v)}) {
      for (float g : {f, std::nextafter(f, 0.0f), std::nextafter(f, INFINITY),
                      std::nextafter(f, -INFINITY)}) {
        if (failures < 10 && !checkEncode<T>(ref, g)) ++failures;
      }
    }
  };
  for (size_t i = 0; i < values.size(); ++i) {
    check(values[i]);
    if (i + 1 < values.size()) check((values[i] + values[i + 1]) / 2);  // exact in double and float
  }
  const double top = values.back(), ulp = top - values[values.size() - 2];
  for (double v : {top + ulp / 4, top + ulp / 2, top + ulp, 2 * top, 1e30, 3.0e38})
    check(v);
  for (float f : {INFINITY, -INFINITY, 0.0f, -0.0f, std::numeric_limits<float>::denorm_min(),
                  std::numeric_limits<float>::min(), std::numeric_limits<float>::max()})
    if (!checkEncode<T>(ref, f)) ++failures;
  CHECK(failures == 0);
}

// A sweep over the whole float space (every 4099th pattern, and random ones).
template <class T>
void checkFloatSweep() {
  const FormatReference ref = makeReference<T>();
  int failures = 0;
  for (uint64_t u = 0; u <= 0xffffffffull && failures < 10; u += 4099)
    if (!checkEncode<T>(ref, fromBits(static_cast<uint32_t>(u)))) ++failures;
  std::mt19937 rng(1234);
  for (int i = 0; i < 200000 && failures < 10; ++i)
    if (!checkEncode<T>(ref, fromBits(static_cast<uint32_t>(rng())))) ++failures;
  CHECK(failures == 0);
}

}  // namespace

TEMPLATE_TEST_CASE("every bit pattern decodes like the reference and round-trips", "[types]",
                   plait::Half, plait::BFloat16, plait::Fp8E4M3, plait::Fp8E5M2) {
  checkAllPatterns<TestType>();
}

TEMPLATE_TEST_CASE("fromFloat rounds to nearest even at every boundary", "[types]", plait::Half,
                   plait::BFloat16, plait::Fp8E4M3, plait::Fp8E5M2) {
  checkRoundingAtBoundaries<TestType>();
}

TEMPLATE_TEST_CASE("fromFloat matches the reference across the float space", "[types]",
                   plait::Half, plait::BFloat16, plait::Fp8E4M3, plait::Fp8E5M2) {
  checkFloatSweep<TestType>();
}

TEST_CASE("known rounding cases", "[types]") {
  using plait::BFloat16;
  using plait::Fp8E4M3;
  using plait::Fp8E5M2;
  using plait::Half;
  // Half: ties to even, overflow threshold, subnormals.
  CHECK(Half::fromFloat(1.0f).bits == 0x3c00);
  CHECK(Half::fromFloat(1.0f + 0x1p-11f).bits == 0x3c00);        // tie, even down
  CHECK(Half::fromFloat(1.0f + 3 * 0x1p-11f).bits == 0x3c02);    // tie, even up
  CHECK(Half::fromFloat(65504.0f).bits == 0x7bff);
  CHECK(Half::fromFloat(65519.996f).bits == 0x7bff);
  CHECK(Half::fromFloat(65520.0f).bits == 0x7c00);  // tie between max and 2^16 -> inf
  CHECK(Half::fromFloat(-1e10f).bits == 0xfc00);
  CHECK(Half::fromFloat(0x1p-24f).bits == 0x0001);
  CHECK(Half::fromFloat(0x1p-25f).bits == 0x0000);                // tie to even (0)
  CHECK(Half::fromFloat(0x1.000002p-25f).bits == 0x0001);
  CHECK(Half::fromFloat(3 * 0x1p-25f).bits == 0x0002);            // tie, even up
  CHECK(Half::fromFloat(0x1.ff8p-15f).bits == 0x03ff);            // largest subnormal
  CHECK(Half::fromFloat(0x1.ffcp-15f).bits == 0x0400);            // tie, up to min normal
  CHECK(Half::fromFloat(0x1.ffbfep-15f).bits == 0x03ff);
  CHECK(Half{0x0001}.toFloat() == 0x1p-24f);
  CHECK(Half{0x7c00}.toFloat() == INFINITY);
  CHECK(Half::fromFloat(fromBits(0x7fc00000)).bits == 0x7e00);
  CHECK(Half::fromFloat(fromBits(0xff800001)).bits == 0xfe00);    // sNaN quietened, sign kept
  // BFloat16.
  CHECK(BFloat16::fromFloat(fromBits(0x3f808000)).bits == 0x3f80);  // tie, even down
  CHECK(BFloat16::fromFloat(fromBits(0x3f818000)).bits == 0x3f82);  // tie, even up
  CHECK(BFloat16::fromFloat(fromBits(0x3f808001)).bits == 0x3f81);
  CHECK(BFloat16::fromFloat(std::numeric_limits<float>::max()).bits == 0x7f80);
  CHECK(BFloat16::fromFloat(fromBits(0x00008000)).bits == 0x0000);  // subnormal tie
  CHECK(BFloat16::fromFloat(fromBits(0x00018000)).bits == 0x0002);
  CHECK(BFloat16::fromFloat(fromBits(0x7f800001)).bits == 0x7fc0);
  // E4M3: no inf, saturating, NaN 0x7f.
  CHECK(Fp8E4M3::fromFloat(448.0f).bits == 0x7e);
  CHECK(Fp8E4M3::fromFloat(464.0f).bits == 0x7e);
  CHECK(Fp8E4M3::fromFloat(1e9f).bits == 0x7e);
  CHECK(Fp8E4M3::fromFloat(INFINITY).bits == 0x7e);
  CHECK(Fp8E4M3::fromFloat(-INFINITY).bits == 0xfe);
  CHECK(Fp8E4M3::fromFloat(NAN).bits == 0x7f);
  CHECK(Fp8E4M3::fromFloat(0x1p-9f).bits == 0x01);
  CHECK(Fp8E4M3::fromFloat(0x1p-10f).bits == 0x00);     // tie to even (0)
  CHECK(Fp8E4M3::fromFloat(3 * 0x1p-10f).bits == 0x02);  // tie, even up
  CHECK(Fp8E4M3::fromFloat(1.0625f).bits == 0x38);       // 1 + 1/16: tie, even down
  CHECK(Fp8E4M3{0x7e}.toFloat() == 448.0f);
  CHECK(std::isnan(Fp8E4M3{0xff}.toFloat()));
  CHECK(Fp8E4M3{0x08}.toFloat() == 0x1p-6f);
  // E5M2: IEEE-like, saturating.
  CHECK(Fp8E5M2::fromFloat(57344.0f).bits == 0x7b);
  CHECK(Fp8E5M2::fromFloat(61440.0f).bits == 0x7b);
  CHECK(Fp8E5M2::fromFloat(INFINITY).bits == 0x7b);
  CHECK(Fp8E5M2::fromFloat(-1e30f).bits == 0xfb);
  CHECK(Fp8E5M2::fromFloat(0x1p-16f).bits == 0x01);
  CHECK(Fp8E5M2::fromFloat(0x1p-17f).bits == 0x00);
  CHECK(Fp8E5M2{0x7c}.toFloat() == INFINITY);
  CHECK(std::isnan(Fp8E5M2::fromFloat(NAN).toFloat()));
}

#if defined(__x86_64__)
namespace {
__attribute__((target("f16c"))) uint16_t f16cEncode(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}
__attribute__((target("f16c"))) uint32_t f16cDecode(uint16_t h) { return toBits(_cvtsh_ss(h)); }
}  // namespace

TEST_CASE("Half matches the F16C instructions bit for bit, NaNs included", "[types]") {
  if (!plait::cpuHasF16c()) {
    WARN("skipped: this CPU has no F16C");
    return;
  }
  int failures = 0;
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint32_t got = toBits(plait::Half{static_cast<uint16_t>(b)}.toFloat());
    if (got != f16cDecode(static_cast<uint16_t>(b)) && failures++ < 10)
      FAIL_CHECK("decode 0x" << std::hex << b);
  }
  for (uint64_t u = 0; u <= 0xffffffffull; u += 997) {
    const float f = fromBits(static_cast<uint32_t>(u));
    if (plait::Half::fromFloat(f).bits != f16cEncode(f) && failures++ < 10)
      FAIL_CHECK("encode 0x" << std::hex << u);
  }
  CHECK(failures == 0);
}
#endif

TEST_CASE("data type helpers follow nccl-tests' names and NCCL's sizes", "[types]") {
  CHECK(plait::typeSize(ncclInt8) == 1);
  CHECK(plait::typeSize(ncclFloat16) == 2);
  CHECK(plait::typeSize(ncclBfloat16) == 2);
  CHECK(plait::typeSize(ncclFloat32) == 4);
  CHECK(plait::typeSize(ncclUint64) == 8);
  CHECK(plait::typeSize(ncclFloat8e5m2) == 1);
  CHECK(plait::typeSize(static_cast<ncclDataType_t>(12)) == 0);
  const char* names[] = {"int8",  "uint8", "int32",    "uint32", "int64",  "uint64",
                         "half",  "float", "double",   "bfloat16", "f8e4m3", "f8e5m2"};
  for (int t = 0; t < ncclNumTypes; ++t) {
    CHECK(std::string(plait::typeName(static_cast<ncclDataType_t>(t))) == names[t]);
    CHECK(plait::isValidType(t));
  }
  CHECK(!plait::isValidType(-1));
  CHECK(!plait::isValidType(ncclNumTypes));
  CHECK(plait::isFloatingType(ncclFloat8e4m3));
  CHECK(plait::isFloatingType(ncclDouble));
  CHECK(!plait::isFloatingType(ncclUint8));
  CHECK(!plait::isFloatingType(ncclInt64));
  static_assert(std::is_same_v<plait::TypeOfT<ncclFloat16>, plait::Half>);
  static_assert(std::is_same_v<plait::TypeOfT<ncclInt64>, int64_t>);
  static_assert(plait::DataTypeOf<plait::BFloat16>::value == ncclBfloat16);
  static_assert(plait::DataTypeOf<uint32_t>::value == ncclUint32);
  static_assert(std::is_trivially_copyable_v<plait::Half> &&
                std::is_trivially_copyable_v<plait::Fp8E4M3>);
  CHECK(sizeof(plait::TypeOfT<ncclFloat8e4m3>) == plait::typeSize(ncclFloat8e4m3));
}
