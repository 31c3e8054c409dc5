// format_reference.h — an independent model of the narrow floating formats
// for tests: values are decoded with ldexp in double, and rounding is a
// nearest-value search over the sorted table of every finite value of the
// format (ties to the even encoding), so nothing here shares code or method
// with algorithms/types.h.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace plait::testing {

struct FormatSpec {
  int expBits;
  int manBits;
  bool ieee;       // all-ones exponent is inf/NaN (else only S.1..1.1..1 is NaN)
  bool satFinite;  // overflow (and inf) gives max finite instead of inf
};

constexpr FormatSpec kHalfSpec{5, 10, true, false};
constexpr FormatSpec kBFloat16Spec{8, 7, true, false};
constexpr FormatSpec kE4M3Spec{4, 3, false, true};
constexpr FormatSpec kE5M2Spec{5, 2, true, true};

class FormatReference {
 public:
  explicit FormatReference(FormatSpec spec) : spec_(spec) {
    const uint32_t count = 1u << (spec.expBits + spec.manBits);  // non-negative patterns
    for (uint32_t b = 0; b < count; ++b) {
      const double v = decode(b);
      if (std::isfinite(v)) finite_.push_back({v, b});
    }
    std::sort(finite_.begin(), finite_.end(),
              [](const Entry& x, const Entry& y) { return x.value < y.value; });
  }

  int bits() const { return 1 + spec_.expBits + spec_.manBits; }
  uint32_t signBit() const { return 1u << (spec_.expBits + spec_.manBits); }

  // The value of an encoding (NaN for NaN encodings).
  double decode(uint32_t b) const {
    const int bias = (1 << (spec_.expBits - 1)) - 1;
    const uint32_t man = b & ((1u << spec_.manBits) - 1);
    const uint32_t exp = (b >> spec_.manBits) & ((1u << spec_.expBits) - 1);
    const bool neg = (b & signBit()) != 0;
    const uint32_t expMax = (1u << spec_.expBits) - 1;
    double v;
    if (spec_.ieee && exp == expMax) {
      v = man == 0 ? std::numeric_limits<double>::infinity() : std::nan("");
    } else if (!spec_.ieee && exp == expMax && man == (1u << spec_.manBits) - 1) {
      v = std::nan("");
    } else if (exp == 0) {
      v = std::ldexp(static_cast<double>(man), 1 - bias - spec_.manBits);
    } else {
      v = std::ldexp(1.0 + std::ldexp(static_cast<double>(man), -spec_.manBits),
                     static_cast<int>(exp) - bias);
    }
    return neg ? -v : v;
  }

  bool isNan(uint32_t b) const { return std::isnan(decode(b)); }

  // Round-to-nearest-even of a non-NaN double `x` (exactly representable
  // inputs only matter; doubles are exact for every float).
  uint32_t encode(double x) const {
    const uint32_t sign = std::signbit(x) ? signBit() : 0u;
    const double ax = std::fabs(x);
    const Entry& top = finite_.back();
    if (ax > top.value) {
      if (spec_.satFinite) return sign | top.bits;
      // IEEE: the halfway point above max rounds to even, which is inf (max
      // has an odd mantissa).
      const double ulp = top.value - finite_[finite_.size() - 2].value;
      if (ax >= top.value + ulp / 2) return sign | infBits();
      return sign | top.bits;
    }
    auto hi = std::lower_bound(finite_.begin(), finite_.end(), ax,
                               [](const Entry& e, double v) { return e.value < v; });
    if (hi->value == ax) return sign | hi->bits;
    auto lo = hi - 1;
    const double dLo = ax - lo->value, dHi = hi->value - ax;
    if (dLo < dHi) return sign | lo->bits;
    if (dHi < dLo) return sign | hi->bits;
    return sign | ((lo->bits & 1) == 0 ? lo->bits : hi->bits);
  }

  bool saturates() const { return spec_.satFinite; }
  uint32_t infBits() const { return ((1u << spec_.expBits) - 1) << spec_.manBits; }
  double maxFinite() const { return finite_.back().value; }
  // Every finite non-negative value, ascending.
  std::vector<double> finiteValues() const {
    std::vector<double> out;
    for (const Entry& e : finite_) out.push_back(e.value);
    return out;
  }

 private:
  struct Entry {
    double value;
    uint32_t bits;
  };
  FormatSpec spec_;
  std::vector<Entry> finite_;
};

}  // namespace plait::testing
