// types.h — Plait's element types: the 16-bit and 8-bit floating formats as
// plain structs of their bits, their conversions to and from float, and the
// mapping between ncclDataType_t and C++ types.
//
// Everything here compiles for the host (g++) and the device (nvcc): no OS
// headers, no exceptions, every function PLAIT_HOST_DEVICE.
//
// Conversion contract (the same on host and device):
//   * toFloat() is exact (every format here is a subset of float); a
//     signaling NaN comes back quiet (Half, Fp8E5M2, like F16C; BFloat16's
//     toFloat is the plain bit shift).
//   * fromFloat() rounds to nearest, ties to even, with correct subnormals.
//   * NaN stays NaN: IEEE-like formats (Half, BFloat16, Fp8E5M2) keep the
//     sign and the top payload bits and set the quiet bit (what x86 F16C's
//     vcvtps2ph does); Fp8E4M3 has a single NaN encoding, S.1111.111.
//   * Overflow: Half and BFloat16 give ±inf (IEEE). The fp8 formats saturate
//     to ±max finite (448 for E4M3, 57344 for E5M2), infinities included, as
//     NCCL does with CUDA's __NV_SATFINITE conversions.
// The conversions are branch-free integer/float arithmetic so that loops over
// arrays of them vectorize.
#pragma once

#include <cstddef>
#include <cstdint>

#include "algorithms/portability.h"
#include "nccl.h"

namespace plait {

namespace detail {

PLAIT_HOST_DEVICE PLAIT_INLINE uint32_t floatToBits(float f) {
#if PLAIT_ON_DEVICE
  return __float_as_uint(f);
#else
  return __builtin_bit_cast(uint32_t, f);
#endif
}
PLAIT_HOST_DEVICE PLAIT_INLINE float bitsToFloat(uint32_t u) {
#if PLAIT_ON_DEVICE
  return __uint_as_float(u);
#else
  return __builtin_bit_cast(float, u);
#endif
}

// A binary floating format narrower than float: kExp exponent bits, kMan
// mantissa bits, bias 2^(kExp-1)-1. kIeee: the all-ones exponent means inf
// (mantissa 0) or NaN; otherwise (E4M3) only all-ones exponent and mantissa
// is NaN and the rest of that binade is finite. kSatFinite: out-of-range
// values and infinities become ±max finite instead of ±inf.
template <int kExpBits, int kManBits, bool kIeeeLike, bool kSaturates>
struct SmallFloatFormat {
  static constexpr int kExp = kExpBits;
  static constexpr int kMan = kManBits;
  static constexpr bool kIeee = kIeeeLike;
  static constexpr bool kSatFinite = kSaturates;
  static constexpr int kBias = (1 << (kExp - 1)) - 1;
  static constexpr int kShift = 23 - kMan;  // float mantissa bits dropped
  static constexpr uint32_t kSignBit = 1u << (kExp + kMan);
  static constexpr uint32_t kAbsMask = kSignBit - 1;
  static constexpr uint32_t kManMask = (1u << kMan) - 1;
  static constexpr uint32_t kInf = ((1u << kExp) - 1) << kMan;  // IEEE only
  static constexpr uint32_t kMaxFinite = kIeee ? kInf - 1 : kAbsMask - 1;
  static constexpr uint32_t kQuietBit = 1u << (kMan - 1);
  // Float bits of the smallest normal of this format, 2^(1-bias).
  static constexpr uint32_t kMinNormalFloatBits = uint32_t(127 + 1 - kBias) << 23;
  // Float bits of 2^(bias+1): the first value whose rounding is +inf.
  static constexpr uint32_t kOverflowFloatBits = uint32_t(127 + kBias + 1) << 23;
  // Exponent rebias between float and this format, in float bit position.
  static constexpr uint32_t kRebias = uint32_t(127 - kBias) << 23;
};

template <class F>
PLAIT_HOST_DEVICE PLAIT_INLINE uint32_t encodeSmallFloat(float value) {
  const uint32_t u = floatToBits(value);
  const uint32_t sign = (u >> 31) * F::kSignBit;
  const uint32_t a = u & 0x7fffffffu;
  // Normal range: rebias, then round the dropped bits to nearest even. For
  // values below the normal range this wraps; the select below discards it.
  uint32_t n = a - F::kRebias;
  n += ((1u << (F::kShift - 1)) - 1) + ((n >> F::kShift) & 1);
  const uint32_t normal = n >> F::kShift;
  // Subnormal range (and zero): the significand m (with its implicit bit;
  // float subnormals have none and the exponent of 1) shifted right by s
  // bits, rounded to nearest even. A carry out gives the smallest normal,
  // which is the right encoding.
  const uint32_t e = a >> 23;
  const uint32_t m = (a & 0x7fffffu) | (e != 0 ? 0x800000u : 0u);
  uint32_t s = 151 - F::kBias - F::kMan - (e != 0 ? e : 1);  // >= kShift+1 where used
  s = s < 31 ? s : 31;                                       // no UB; 31 rounds to 0
  s = s > 0 ? s : 1;                                         // unused then, but (1u << (s - 1)) must be defined
  const uint32_t sub = (m + ((1u << (s - 1)) - 1) + ((m >> s) & 1)) >> s;
  uint32_t r;
  if constexpr (F::kSatFinite) {
    // A huge `a` (up to inf) does not wrap n: the clamp catches it.
    r = normal < F::kMaxFinite ? normal : F::kMaxFinite;
  } else {
    r = a >= F::kOverflowFloatBits ? F::kInf : normal;
  }
  r = a < F::kMinNormalFloatBits ? sub : r;
  uint32_t nan;
  if constexpr (F::kIeee) {
    nan = F::kInf | F::kQuietBit | ((a >> F::kShift) & (F::kQuietBit - 1));
  } else {
    nan = F::kAbsMask;
  }
  r = a > 0x7f800000u ? nan : r;
  return r | sign;
}

// Shifts t left until bit kTop is its leading one (t != 0, t < 2^(kTop+1)),
// adding the shift to *shifted: a branch-free binary search in steps of
// kStep, kStep/2, ..., 1 (data-dependent selects, which vectorize).
template <int kTop, int kStep>
PLAIT_HOST_DEVICE PLAIT_INLINE uint32_t normalizeLeft(uint32_t t, uint32_t* shifted) {
  if constexpr (kStep == 0) {
    return t;
  } else {
    const uint32_t c = t < (1u << (kTop + 1 - kStep)) ? uint32_t(kStep) : 0u;
    *shifted += c;
    return normalizeLeft<kTop, kStep / 2>(t << c, shifted);
  }
}

template <class F>
PLAIT_HOST_DEVICE PLAIT_INLINE float decodeSmallFloat(uint32_t bits) {
  const uint32_t sign = (bits & F::kSignBit) << (31 - F::kExp - F::kMan);
  const uint32_t a = bits & F::kAbsMask;
  const uint32_t exp = a >> F::kMan;
  const uint32_t normal = (a << F::kShift) + F::kRebias;
  // Subnormal: m * 2^(1-bias-kMan), normalized with integer operations only
  // (no FP instruction that GCC would consider trapping, so the selects
  // vectorize): p is the position of m's leading one.
  const uint32_t m = a & F::kManMask;
  uint32_t lz = 0;  // how far m's leading one is below bit kMan-1
  const uint32_t t = normalizeLeft<F::kMan - 1, (F::kMan >= 8 ? 8 : F::kMan >= 4 ? 4 : 2)>(m, &lz);
  const uint32_t sub = m == 0 ? 0u
                              : ((uint32_t(127 - F::kBias) - lz) << 23) |
                                    ((t << (F::kShift + 1)) & 0x7fffffu);
  uint32_t r = exp == 0 ? sub : normal;
  if constexpr (F::kIeee) {
    // Inf, or NaN with its payload kept and the quiet bit set (as F16C does).
    const uint32_t special = 0x7f800000u | (m << F::kShift) | (m != 0 ? 0x400000u : 0u);
    r = exp == (1u << (F::kExp)) - 1 ? special : r;
  } else {
    r = a == F::kAbsMask ? 0x7fc00000u : r;
  }
  return bitsToFloat(r | sign);
}

using HalfFormat = SmallFloatFormat<5, 10, true, false>;
using BFloat16Format = SmallFloatFormat<8, 7, true, false>;
using Fp8E4M3Format = SmallFloatFormat<4, 3, false, true>;
using Fp8E5M2Format = SmallFloatFormat<5, 2, true, true>;

}  // namespace detail

// IEEE 754 binary16.
struct Half {
  uint16_t bits;
  PLAIT_HOST_DEVICE PLAIT_INLINE float toFloat() const {
    return detail::decodeSmallFloat<detail::HalfFormat>(bits);
  }
  PLAIT_HOST_DEVICE PLAIT_INLINE static Half fromFloat(float f) {
    return Half{static_cast<uint16_t>(detail::encodeSmallFloat<detail::HalfFormat>(f))};
  }
};

// bfloat16: the top half of a float.
struct BFloat16 {
  uint16_t bits;
  PLAIT_HOST_DEVICE PLAIT_INLINE float toFloat() const {
    return detail::bitsToFloat(uint32_t(bits) << 16);
  }
  PLAIT_HOST_DEVICE PLAIT_INLINE static BFloat16 fromFloat(float f) {
    // Same exponent range as float, so rounding the low 16 bits is the whole
    // conversion (subnormals included, overflow carries into inf).
    const uint32_t u = detail::floatToBits(f);
    const uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1)) >> 16;
    const uint32_t nan = (u >> 16) | 0x40u;
    return BFloat16{static_cast<uint16_t>((u & 0x7fffffffu) > 0x7f800000u ? nan : rounded)};
  }
};

// OCP FP8 E4M3 ("fn"): bias 7, no infinity, max ±448, NaN = S.1111.111.
struct Fp8E4M3 {
  uint8_t bits;
  PLAIT_HOST_DEVICE PLAIT_INLINE float toFloat() const {
    return detail::decodeSmallFloat<detail::Fp8E4M3Format>(bits);
  }
  PLAIT_HOST_DEVICE PLAIT_INLINE static Fp8E4M3 fromFloat(float f) {
    return Fp8E4M3{static_cast<uint8_t>(detail::encodeSmallFloat<detail::Fp8E4M3Format>(f))};
  }
};

// OCP FP8 E5M2: bias 15, IEEE-like (inf and NaNs), max ±57344.
struct Fp8E5M2 {
  uint8_t bits;
  PLAIT_HOST_DEVICE PLAIT_INLINE float toFloat() const {
    return detail::decodeSmallFloat<detail::Fp8E5M2Format>(bits);
  }
  PLAIT_HOST_DEVICE PLAIT_INLINE static Fp8E5M2 fromFloat(float f) {
    return Fp8E5M2{static_cast<uint8_t>(detail::encodeSmallFloat<detail::Fp8E5M2Format>(f))};
  }
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2);
static_assert(sizeof(Fp8E4M3) == 1 && sizeof(Fp8E5M2) == 1);

// ---- ncclDataType_t <-> C++ type -------------------------------------------

// TypeOf<ncclFloat16>::type is Half, and so on; DataTypeOf<Half>::value is
// ncclFloat16.
template <ncclDataType_t kType> struct TypeOf;
template <class T> struct DataTypeOf;

#define PLAIT_TYPE_MAPPING_(nccl, cpp)                                \
  template <> struct TypeOf<nccl> { using type = cpp; };              \
  template <> struct DataTypeOf<cpp> { static constexpr ncclDataType_t value = nccl; };
PLAIT_TYPE_MAPPING_(ncclInt8, int8_t)
PLAIT_TYPE_MAPPING_(ncclUint8, uint8_t)
PLAIT_TYPE_MAPPING_(ncclInt32, int32_t)
PLAIT_TYPE_MAPPING_(ncclUint32, uint32_t)
PLAIT_TYPE_MAPPING_(ncclInt64, int64_t)
PLAIT_TYPE_MAPPING_(ncclUint64, uint64_t)
PLAIT_TYPE_MAPPING_(ncclFloat16, Half)
PLAIT_TYPE_MAPPING_(ncclFloat32, float)
PLAIT_TYPE_MAPPING_(ncclFloat64, double)
PLAIT_TYPE_MAPPING_(ncclBfloat16, BFloat16)
PLAIT_TYPE_MAPPING_(ncclFloat8e4m3, Fp8E4M3)
PLAIT_TYPE_MAPPING_(ncclFloat8e5m2, Fp8E5M2)
#undef PLAIT_TYPE_MAPPING_

template <ncclDataType_t kType>
using TypeOfT = typename TypeOf<kType>::type;

// True for 0 <= type < ncclNumTypes.
PLAIT_HOST_DEVICE constexpr bool isValidType(int type) { return type >= 0 && type < ncclNumTypes; }

// Bytes per element; 0 for an invalid type.
PLAIT_HOST_DEVICE constexpr size_t typeSize(ncclDataType_t type) {
  switch (type) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

// True for the floating types (half, float, double, bfloat16, fp8).
PLAIT_HOST_DEVICE constexpr bool isFloatingType(ncclDataType_t type) {
  switch (type) {
    case ncclFloat16: case ncclFloat32: case ncclFloat64: case ncclBfloat16:
    case ncclFloat8e4m3: case ncclFloat8e5m2: return true;
    default: return false;
  }
}

// nccl-tests' name ("float", "bfloat16", "f8e4m3", ...); "invalid" otherwise.
PLAIT_HOST_DEVICE constexpr const char* typeName(ncclDataType_t type) {
  switch (type) {
    case ncclInt8: return "int8";
    case ncclUint8: return "uint8";
    case ncclInt32: return "int32";
    case ncclUint32: return "uint32";
    case ncclInt64: return "int64";
    case ncclUint64: return "uint64";
    case ncclFloat16: return "half";
    case ncclFloat32: return "float";
    case ncclFloat64: return "double";
    case ncclBfloat16: return "bfloat16";
    case ncclFloat8e4m3: return "f8e4m3";
    case ncclFloat8e5m2: return "f8e5m2";
    default: return "invalid";
  }
}

}  // namespace plait
