// ExactSum (algorithms/exact_sum.h): the exact sum rounded once, whatever
// the order. References: for inputs whose exact sum a wider type holds
// (double for the narrow formats and float, __float128 for double), that
// sum rounded once by an independent method (format_reference.h's
// nearest-value search, or the hardware's conversion); plus cases known by
// hand where any order of ordinary additions fails.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

#include "algorithms/exact_fold.h"
#include "algorithms/exact_sum.h"
#include "algorithms/format_reference.h"

using plait::BFloat16;
using plait::ExactSum;
using plait::Fp8E4M3;
using plait::Fp8E5M2;
using plait::Half;
using plait::testing::FormatReference;

namespace {

template <class T> uint64_t bitsOf(T v) {
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}

template <class T> constexpr ncclDataType_t typeOf() {
  if constexpr (std::is_same_v<T, double>) return ncclFloat64;
  else if constexpr (std::is_same_v<T, float>) return ncclFloat32;
  else if constexpr (std::is_same_v<T, Half>) return ncclFloat16;
  else if constexpr (std::is_same_v<T, BFloat16>) return ncclBfloat16;
  else if constexpr (std::is_same_v<T, Fp8E4M3>) return ncclFloat8e4m3;
  else return ncclFloat8e5m2;
}

// The accumulator alone, and exactSumInto (its fast double path first) over
// one-element arrays: both must give the reference, so they must agree.
template <class T> T sumOf(const std::vector<T>& xs) {
  ExactSum<T> acc;
  for (const T& x : xs) acc.add(x);
  const T slow = acc.result();
  std::vector<const void*> inputs;
  for (const T& x : xs) inputs.push_back(&x);
  T fast;
  REQUIRE(plait::exactSumInto(typeOf<T>(), inputs.data(), static_cast<int>(xs.size()), &fast, 1));
  INFO("the accumulator and exactSumInto disagree");
  REQUIRE(bitsOf(fast) == bitsOf(slow));
  return slow;
}

float f32(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Random values of a narrow format with exponents in [-span, span] (the
// exact sum of 64 of them then fits a double), their decoded doubles.
template <class T>
std::vector<T> narrowValues(const FormatReference& ref, std::mt19937_64& rng, int n, int span) {
  std::vector<T> out;
  std::uniform_int_distribution<uint32_t> pattern(0, (1u << ref.bits()) - 1);
  while (static_cast<int>(out.size()) < n) {
    const uint32_t b = pattern(rng);
    const double v = ref.decode(b);
    if (!std::isfinite(v) || (v != 0 && std::abs(std::ilogb(v)) > span)) continue;
    T x;
    x.bits = static_cast<decltype(x.bits)>(b);
    out.push_back(x);
  }
  return out;
}

template <class T>
void checkNarrowFormat(plait::testing::FormatSpec spec, int span) {
  const FormatReference ref(spec);
  std::mt19937_64 rng(1234);
  for (int trial = 0; trial < 3000; ++trial) {
    const int n = 1 + trial % 64;
    std::vector<T> xs = narrowValues<T>(ref, rng, n, span);
    double exact = 0;  // exact: every partial sum fits 53 bits
    for (const T& x : xs) exact += ref.decode(x.bits);
    const uint32_t want = ref.encode(exact);
    const T got = sumOf(xs);
    INFO("trial " << trial << " n " << n << " exact " << exact);
    REQUIRE(static_cast<uint32_t>(got.bits) == want);
    std::shuffle(xs.begin(), xs.end(), rng);
    REQUIRE(sumOf(xs).bits == got.bits);
  }
}

}  // namespace

TEST_CASE("exact sums of the narrow formats are the exact sum rounded once", "[exact]") {
  checkNarrowFormat<Half>(plait::testing::kHalfSpec, 40);     // every half: 2^-24 .. 2^15
  checkNarrowFormat<BFloat16>(plait::testing::kBFloat16Spec, 20);
  checkNarrowFormat<Fp8E4M3>(plait::testing::kE4M3Spec, 40);
  checkNarrowFormat<Fp8E5M2>(plait::testing::kE5M2Spec, 40);
}

TEST_CASE("exact float sums: the double sum rounded once, at any order", "[exact]") {
  std::mt19937_64 rng(99);
  std::uniform_int_distribution<uint32_t> mant(0, (1u << 23) - 1);
  std::uniform_int_distribution<int> exp(127 - 12, 127 + 12);  // spread 2^24 x 2^24: the double sum is exact
  for (int trial = 0; trial < 3000; ++trial) {
    const int n = 1 + trial % 100;
    std::vector<float> xs;
    double exact = 0;
    for (int i = 0; i < n; ++i) {
      const uint32_t sign = (rng() & 1) << 31;
      xs.push_back(f32(sign | (static_cast<uint32_t>(exp(rng)) << 23) | mant(rng)));
      exact += xs.back();
    }
    const float got = sumOf(xs);
    REQUIRE(bitsOf(got) == bitsOf(static_cast<float>(exact)));
    std::shuffle(xs.begin(), xs.end(), rng);
    REQUIRE(bitsOf(sumOf(xs)) == bitsOf(got));
  }
}

TEST_CASE("exact double sums: the quad-precision sum rounded once, at any order", "[exact]") {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<uint64_t> mant(0, (uint64_t(1) << 52) - 1);
  std::uniform_int_distribution<int> exp(1023 - 25, 1023 + 25);  // 113-bit quad holds these sums exactly
  for (int trial = 0; trial < 3000; ++trial) {
    const int n = 1 + trial % 100;
    std::vector<double> xs;
    __float128 exact = 0;
    for (int i = 0; i < n; ++i) {
      const uint64_t bits = ((rng() & 1) << 63) | (static_cast<uint64_t>(exp(rng)) << 52) | mant(rng);
      double d;
      std::memcpy(&d, &bits, 8);
      xs.push_back(d);
      exact += d;
    }
    const double got = sumOf(xs);
    REQUIRE(bitsOf(got) == bitsOf(static_cast<double>(exact)));
    std::shuffle(xs.begin(), xs.end(), rng);
    REQUIRE(bitsOf(sumOf(xs)) == bitsOf(got));
  }
}

TEST_CASE("exact sums where ordinary additions fail in some or every order", "[exact]") {
  const float big = 1e30f, maxf = std::numeric_limits<float>::max();
  CHECK(sumOf<float>({big, 1.0f, -big}) == 1.0f);          // left to right: 0
  CHECK(sumOf<float>({maxf, maxf, -maxf}) == maxf);        // left to right: inf
  CHECK(sumOf<float>({1.0f, std::ldexp(1.0f, -24)}) == 1.0f);  // a tie: to even
  CHECK(sumOf<float>({1.0f, std::ldexp(1.0f, -24), std::ldexp(1.0f, -60)}) ==
        1.0f + std::ldexp(1.0f, -23));  // just above the tie: up
  CHECK(sumOf<float>({1.0f + std::ldexp(1.0f, -23), std::ldexp(1.0f, -24)}) ==
        1.0f + std::ldexp(1.0f, -22));  // a tie from an odd mantissa: up to even
  const float tiny = std::numeric_limits<float>::denorm_min();
  CHECK(sumOf<float>({tiny, tiny, tiny}) == 3 * tiny);
  CHECK(sumOf<float>({-2048.0f, 1024.0f, -3072.0f}) == -4096.0f);  // a power of two a digit apart
  CHECK(sumOf<float>({-1024.0f, -1024.0f}) == -2048.0f);
  // Just above a tie only through a third, far smaller value: the double
  // path's rounding errors do not sum exactly in a double here.
  CHECK(sumOf<double>({1.0, std::ldexp(1.0, -53), std::ldexp(1.0, -200)}) == 1.0 + std::ldexp(1.0, -52));
  // 1 + 2^-11 + 2^-24 is above half's tie at 1 + 2^-11, but rounds to that
  // tie in float first: rounding through float would give 1.
  CHECK(sumOf<Half>({Half::fromFloat(1.0f), Half::fromFloat(std::ldexp(1.0f, -11)), Half::fromFloat(std::ldexp(1.0f, -24))})
            .toFloat() == 1.0f + std::ldexp(1.0f, -10));
  CHECK(sumOf<double>({1e308, 1e308, -1e308}) == 1e308);
  CHECK(sumOf<double>({1.0, 1e-300, -1.0}) == 1e-300);
  const double dtiny = std::numeric_limits<double>::denorm_min();
  CHECK(sumOf<double>({dtiny, -dtiny, dtiny}) == dtiny);
  // Signs of zero and special values.
  CHECK(std::signbit(sumOf<float>({-0.0f, -0.0f})));
  CHECK(!std::signbit(sumOf<float>({-0.0f, 0.0f})));
  CHECK(!std::signbit(sumOf<float>({1.0f, -1.0f})));
  const float inf = std::numeric_limits<float>::infinity();
  CHECK(sumOf<float>({inf, 1.0f}) == inf);
  CHECK(sumOf<float>({-inf, 1.0f}) == -inf);
  CHECK(std::isnan(sumOf<float>({inf, -inf})));
  CHECK(std::isnan(sumOf<float>({1.0f, std::nanf("")})));
  CHECK(sumOf<float>({maxf, maxf}) == inf);  // overflow rounds to inf
  CHECK(sumOf<float>({-maxf, -maxf}) == -inf);
  // fp8 E4M3 saturates: 448 + 448 is 448.
  CHECK(sumOf<Fp8E4M3>({Fp8E4M3::fromFloat(448), Fp8E4M3::fromFloat(448)}).toFloat() == 448.0f);
}

TEST_CASE("exactSumInto folds arrays element by element, in place too", "[exact]") {
  std::vector<float> a = {1e30f, 1.0f, 3.0f}, b = {1.0f, 1e30f, -3.0f}, c = {-1e30f, -1e30f, 0.5f};
  const void* inputs[3] = {a.data(), b.data(), c.data()};
  std::vector<float> out(3);
  REQUIRE(plait::exactSumInto(ncclFloat32, inputs, 3, out.data(), 3));
  CHECK(out == std::vector<float>{1.0f, 1.0f, 0.5f});
  REQUIRE(plait::exactSumInto(ncclFloat32, inputs, 3, b.data(), 3));  // out aliases an input
  CHECK(b == std::vector<float>{1.0f, 1.0f, 0.5f});
  std::vector<int32_t> ints = {1};
  const void* intInputs[1] = {ints.data()};
  CHECK_FALSE(plait::exactSumInto(ncclInt32, intInputs, 1, ints.data(), 1));
}
