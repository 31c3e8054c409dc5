// exact_sum.h — sums of floating-point values computed exactly and rounded
// once, so that the result does not depend on the order of the additions:
// the reproducible mode's exact sums (PLAIT_REPRODUCIBLE=2,
// core/reproducible.cc).
//
// ExactSum<T> is a long accumulator (after Kulisch): a fixed-point number
// wide enough for every finite value of T, kept as 32-bit digits in 64-bit
// words, so each addition is exact and up to 2^31 additions never overflow
// a word. result() rounds the exact sum to T once, to nearest with ties to
// even, with T's subnormals; the order of add() calls never changes it.
// Special values: any NaN, or +inf with -inf, gives NaN; otherwise an
// infinity gives that infinity (the fp8 formats saturate it, as every
// conversion to them does, types.h); an exact zero is -0 only when every
// value added was -0 (what IEEE addition gives in round-to-nearest).
//
// Header-only and PLAIT_HOST_DEVICE, so a kernel can use it too.
#pragma once

#include <cstdint>

#include "algorithms/portability.h"
#include "algorithms/types.h"

#if !PLAIT_ON_DEVICE
#include <cmath>
#endif

namespace plait {

// Per format: significand bits (the hidden one included), the exponent of
// the smallest subnormal's bit, and the exponent of the largest finite
// value's top bit.
template <class T> struct ExactFormat;
template <> struct ExactFormat<double> { static constexpr int kPrecision = 53, kMinExp = -1074, kMaxExp = 1023; };
template <> struct ExactFormat<float> { static constexpr int kPrecision = 24, kMinExp = -149, kMaxExp = 127; };
template <> struct ExactFormat<Half> { static constexpr int kPrecision = 11, kMinExp = -24, kMaxExp = 15; };
template <> struct ExactFormat<BFloat16> { static constexpr int kPrecision = 8, kMinExp = -133, kMaxExp = 127; };
template <> struct ExactFormat<Fp8E4M3> { static constexpr int kPrecision = 4, kMinExp = -9, kMaxExp = 8; };
template <> struct ExactFormat<Fp8E5M2> { static constexpr int kPrecision = 3, kMinExp = -16, kMaxExp = 15; };

namespace exact_detail {

PLAIT_HOST_DEVICE PLAIT_INLINE uint64_t doubleBits(double v) {
#if PLAIT_ON_DEVICE
  return static_cast<uint64_t>(__double_as_longlong(v));
#else
  return __builtin_bit_cast(uint64_t, v);
#endif
}
PLAIT_HOST_DEVICE PLAIT_INLINE int countTrailingZeros(uint64_t v) {  // v != 0
#if PLAIT_ON_DEVICE
  return __ffsll(static_cast<long long>(v)) - 1;
#else
  return __builtin_ctzll(v);
#endif
}
PLAIT_HOST_DEVICE PLAIT_INLINE int topBit(uint32_t v) {  // v != 0
#if PLAIT_ON_DEVICE
  return 31 - __clz(static_cast<int>(v));
#else
  return 31 - __builtin_clz(v);
#endif
}

template <class T> PLAIT_HOST_DEVICE PLAIT_INLINE double toDouble(T v) { return static_cast<double>(v.toFloat()); }
template <> PLAIT_HOST_DEVICE PLAIT_INLINE double toDouble<double>(double v) { return v; }
template <> PLAIT_HOST_DEVICE PLAIT_INLINE double toDouble<float>(float v) { return v; }

// `v` is a value of T (or an infinity or NaN): the narrowing is exact.
template <class T> PLAIT_HOST_DEVICE PLAIT_INLINE T fromDouble(double v) {
  return T::fromFloat(static_cast<float>(v));
}
template <> PLAIT_HOST_DEVICE PLAIT_INLINE double fromDouble<double>(double v) { return v; }
template <> PLAIT_HOST_DEVICE PLAIT_INLINE float fromDouble<float>(double v) { return static_cast<float>(v); }

}  // namespace exact_detail

template <class T>
class ExactSum {
  using F = ExactFormat<T>;

 public:
  // 32-bit digits from 2^kMinExp up: the largest finite value's bits, 2^31
  // of them summed (31 carry bits), and the three digits one addition
  // touches.
  static constexpr int kDigits = (F::kMaxExp + 1 - F::kMinExp + 31 + 32) / 32 + 3;

  // Only the digits add() touched are non-zero.
  PLAIT_HOST_DEVICE void clear() {
    for (int i = lo_; i <= hi_; ++i) digits_[i] = 0;
    lo_ = kDigits;
    hi_ = -1;
    nan_ = posInf_ = negInf_ = false;
    allNegZero_ = true;
  }

  PLAIT_HOST_DEVICE ExactSum() {
    for (int i = 0; i < kDigits; ++i) digits_[i] = 0;
    lo_ = 0;
    hi_ = -1;
    clear();
  }

  PLAIT_HOST_DEVICE void add(T value) {
    const uint64_t bits = exact_detail::doubleBits(exact_detail::toDouble(value));
    const bool negative = (bits >> 63) != 0;
    const int biased = static_cast<int>((bits >> 52) & 0x7ff);
    uint64_t mant = bits & ((uint64_t(1) << 52) - 1);
    if (biased == 0x7ff) {
      if (mant != 0) nan_ = true;
      else if (negative) negInf_ = true;
      else posInf_ = true;
      return;
    }
    allNegZero_ = allNegZero_ && negative && biased == 0 && mant == 0;
    if (biased == 0 && mant == 0) return;
    int exp = -1074;
    if (biased != 0) {
      mant |= uint64_t(1) << 52;
      exp = biased - 1075;
    }
    const int tz = exact_detail::countTrailingZeros(mant);
    mant >>= tz;
    exp += tz;  // a value of T: exp >= F::kMinExp, mant < 2^53
    const int shift = exp - F::kMinExp;
    const int at = shift >> 5, off = shift & 31;
    const uint64_t low = mant << off;
    const int64_t parts[3] = {static_cast<int64_t>(low & 0xffffffffu), static_cast<int64_t>(low >> 32),
                              off == 0 ? 0 : static_cast<int64_t>(mant >> (64 - off))};
    for (int k = 0; k < 3; ++k) digits_[at + k] += negative ? -parts[k] : parts[k];
    if (at < lo_) lo_ = at;
    if (at + 2 > hi_) hi_ = at + 2;
  }

  // The exact sum rounded to T (to nearest, ties to even).
  PLAIT_HOST_DEVICE T result() const {
    if (nan_ || (posInf_ && negInf_)) return exact_detail::fromDouble<T>(quietNan());
    if (posInf_) return exact_detail::fromDouble<T>(infinity());
    if (negInf_) return exact_detail::fromDouble<T>(-infinity());
    if (hi_ < 0) return exact_detail::fromDouble<T>(allNegZero_ ? -0.0 : 0.0);
    // Normalise into 32-bit digits; the carry out of the top says the sign.
    int64_t d[kDigits];
    for (int i = lo_; i < kDigits; ++i) d[i] = i <= hi_ ? digits_[i] : 0;
    int64_t carry = 0;
    int end = lo_;  // digits [lo_, end) hold the value, end's carry its sign
    for (; end < kDigits; ++end) {
      const int64_t v = d[end] + carry;
      carry = v >> 32;  // floor division (arithmetic shift)
      d[end] = v - carry * (int64_t(1) << 32);
      // Past the digits add() touched, the carry settles at 0 (>= 0) or -1
      // (< 0), and the digit it left is nonzero when negative.
      if (end > hi_ && (carry == 0 || carry == -1)) {
        ++end;
        break;
      }
    }
    const bool negative = carry < 0;
    if (negative) {  // two's complement over [lo_, end): the digits below lo_ are 0
      int64_t c = 1;
      for (int i = lo_; i < end; ++i) {
        const int64_t v = (int64_t(0xffffffff) - d[i]) + c;
        d[i] = v & 0xffffffff;
        c = v >> 32;
      }
    }
    int top = end - 1;
    while (top >= lo_ && d[top] == 0) --top;
    if (top < lo_) return exact_detail::fromDouble<T>(0.0);  // cancelled exactly: +0
    const int topBitIndex = top * 32 + exact_detail::topBit(static_cast<uint32_t>(d[top]));
    int ulp = topBitIndex - F::kPrecision + 1;  // bit index (from 2^kMinExp) of the result's last bit
    if (ulp < 0) ulp = 0;                       // subnormal: the last bit is 2^kMinExp
    uint64_t mant = bitsAt(d, lo_, end, ulp, topBitIndex - ulp + 1);
    if (ulp > 0) {
      const bool half = bitsAt(d, lo_, end, ulp - 1, 1) != 0;
      bool sticky = false;
      const int below = ulp - 1;  // bits [0, below) decide ties
      for (int i = lo_; i < end && i * 32 < below && !sticky; ++i) {
        const int n = below - i * 32;
        const uint64_t digit = static_cast<uint64_t>(d[i]);
        sticky = (n >= 32 ? digit : digit & ((uint64_t(1) << n) - 1)) != 0;
      }
      if (half && (sticky || (mant & 1))) ++mant;  // may reach 2^precision: still exact in a double
    }
    double value = scale(static_cast<double>(mant), ulp + F::kMinExp);
    return exact_detail::fromDouble<T>(negative ? -value : value);
  }

 private:
  // `count` (<= 53) bits of the normalised digits from bit `from` up (the
  // digits outside [lo, end) are zero).
  PLAIT_HOST_DEVICE static uint64_t bitsAt(const int64_t* d, int lo, int end, int from, int count) {
    const int at = from >> 5, off = from & 31;
    auto digit = [&](int i) -> uint64_t { return i >= lo && i < end ? static_cast<uint64_t>(d[i]) : 0; };
    uint64_t w = (digit(at) >> off) | (digit(at + 1) << (32 - off));
    if (off > 0) w |= digit(at + 2) << (64 - off);
    return count >= 64 ? w : w & ((uint64_t(1) << count) - 1);
  }
  // v * 2^exp for an integer v <= 2^54 whose product is a double (or
  // overflows to inf): multiplications by exact powers of two, no libm.
  PLAIT_HOST_DEVICE static double pow2(int exp) {  // -1022 <= exp <= 1023
    const uint64_t bits = static_cast<uint64_t>(exp + 1023) << 52;
#if PLAIT_ON_DEVICE
    return __longlong_as_double(static_cast<long long>(bits));
#else
    return __builtin_bit_cast(double, bits);
#endif
  }
  PLAIT_HOST_DEVICE static double scale(double v, int exp) {
    if (exp < -1022) return v * pow2(exp + 200) * pow2(-200);  // a subnormal double: the last step is exact
    if (exp > 1023) return v * pow2(1023) * pow2(exp - 1023 > 1023 ? 1023 : exp - 1023);
    return v * pow2(exp);
  }
  PLAIT_HOST_DEVICE static double infinity() { return HUGE_VAL; }
  PLAIT_HOST_DEVICE static double quietNan() { return NAN; }

  int64_t digits_[kDigits];
  int lo_, hi_;  // the digits add() touched: [lo_, hi_]
  bool nan_, posInf_, negInf_;
  bool allNegZero_;
};

}  // namespace plait
