// values.h — test inputs and an independent reference for reductions.
//
// Elements are encoded from small numbers with code written here, not with
// the library's converters, and decoded the same way: bit layouts are taken
// from the formats' definitions (sign, exponent bits, bias, mantissa bits).
// The loops every collective check runs (fill, compare, patterns) are in
// values.cc, compiled with -O2 in every build (tests/CMakeLists.txt:
// plait_test_values): at the sanitizer build's -O0 the per-element calls
// were about 90% of its longest tests' time.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "nccl.h"
#include "sweep_mode.h"

namespace plait_test {

struct Format {
  int expBits, manBits, bias;
};

inline size_t sizeOf(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
  }
}

inline bool isFloat(ncclDataType_t t) { return t >= ncclFloat16; }

// Whether sweeps are quick (PLAIT_TEST_SWEEP=quick): scripts/test.sh sets it
// for the device emulator's and ASan's runs of the collective matrix, where
// each case costs a kernel on emulated threads or runs 2-3 times slower; the
// plain pass and PLAIT_NIGHTLY=1 run everything. Says so once.
inline bool quickSweep() {
  static const bool quick = [] {
    const bool q = plait_test::quickSweepRequested();
    if (q)
      std::printf("PLAIT_TEST_SWEEP=quick: sweeps cover int8, bfloat16, float32, uint64 on 1, 2, 4, 5 ranks "
                  "(large and misaligned buffers: 2, 5 ranks)\n");
    return q;
  }();
  return quick;
}

// The types a sweep covers: all twelve, or when quick one of each width and
// kind (every type's kernels still run in device_compile_check,
// device_conformance and the plain pass).
inline std::vector<ncclDataType_t> sweepTypes() {
  if (quickSweep()) return {ncclInt8, ncclBfloat16, ncclFloat32, ncclUint64};
  return {ncclInt8,    ncclUint8,   ncclInt32,   ncclUint32,   ncclInt64,      ncclUint64,
          ncclFloat16, ncclFloat32, ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
}
inline bool isSigned(ncclDataType_t t) { return t == ncclInt8 || t == ncclInt32 || t == ncclInt64 || isFloat(t); }

inline Format smallFormat(ncclDataType_t t) {
  switch (t) {
    case ncclFloat16: return {5, 10, 15};
    case ncclBfloat16: return {8, 7, 127};
    case ncclFloat8e4m3: return {4, 3, 7};
    default: return {5, 2, 15};  // e5m2
  }
}

// Encodes a value that the format represents exactly (small integers,
// halves, quarters...). Normal numbers only, plus zero.
inline uint32_t encodeSmall(double v, Format f) {
  uint32_t sign = v < 0 ? 1u : 0u;
  double a = std::fabs(v);
  if (a == 0) return sign << (f.expBits + f.manBits);
  int e = static_cast<int>(std::floor(std::log2(a)));
  double mant = a / std::ldexp(1.0, e) - 1.0;  // in [0,1)
  uint32_t m = static_cast<uint32_t>(std::lround(mant * (1u << f.manBits)));
  return (sign << (f.expBits + f.manBits)) | (static_cast<uint32_t>(e + f.bias) << f.manBits) | m;
}

inline double decodeSmall(uint32_t bits, Format f) {
  uint32_t sign = (bits >> (f.expBits + f.manBits)) & 1u;
  uint32_t e = (bits >> f.manBits) & ((1u << f.expBits) - 1);
  uint32_t m = bits & ((1u << f.manBits) - 1);
  double v = e == 0 ? std::ldexp(static_cast<double>(m), 1 - f.bias - f.manBits)
                    : std::ldexp(1.0 + static_cast<double>(m) / (1u << f.manBits), static_cast<int>(e) - f.bias);
  return sign ? -v : v;
}

// Writes value v (exactly representable in t) at index i of buf.
inline void store(void* buf, size_t i, ncclDataType_t t, double v) {
  char* p = static_cast<char*>(buf) + i * sizeOf(t);
  switch (t) {
    case ncclInt8: { int8_t x = static_cast<int8_t>(static_cast<int64_t>(v)); std::memcpy(p, &x, 1); break; }
    case ncclUint8: { uint8_t x = static_cast<uint8_t>(static_cast<int64_t>(v)); std::memcpy(p, &x, 1); break; }
    case ncclInt32: { int32_t x = static_cast<int32_t>(v); std::memcpy(p, &x, 4); break; }
    case ncclUint32: { uint32_t x = static_cast<uint32_t>(static_cast<int64_t>(v)); std::memcpy(p, &x, 4); break; }
    case ncclInt64: { int64_t x = static_cast<int64_t>(v); std::memcpy(p, &x, 8); break; }
    case ncclUint64: { uint64_t x = static_cast<uint64_t>(static_cast<int64_t>(v)); std::memcpy(p, &x, 8); break; }
    case ncclFloat32: { float x = static_cast<float>(v); std::memcpy(p, &x, 4); break; }
    case ncclFloat64: std::memcpy(p, &v, 8); break;
    case ncclFloat16: case ncclBfloat16: {
      uint16_t x = static_cast<uint16_t>(encodeSmall(v, smallFormat(t)));
      std::memcpy(p, &x, 2);
      break;
    }
    default: { uint8_t x = static_cast<uint8_t>(encodeSmall(v, smallFormat(t))); std::memcpy(p, &x, 1); break; }
  }
}

// Reads element i as a double (integers keep their type's wrap-around value).
inline double load(const void* buf, size_t i, ncclDataType_t t) {
  const char* p = static_cast<const char*>(buf) + i * sizeOf(t);
  switch (t) {
    case ncclInt8: { int8_t x; std::memcpy(&x, p, 1); return x; }
    case ncclUint8: { uint8_t x; std::memcpy(&x, p, 1); return x; }
    case ncclInt32: { int32_t x; std::memcpy(&x, p, 4); return x; }
    case ncclUint32: { uint32_t x; std::memcpy(&x, p, 4); return x; }
    case ncclInt64: { int64_t x; std::memcpy(&x, p, 8); return static_cast<double>(x); }
    case ncclUint64: { uint64_t x; std::memcpy(&x, p, 8); return static_cast<double>(x); }
    case ncclFloat32: { float x; std::memcpy(&x, p, 4); return x; }
    case ncclFloat64: { double x; std::memcpy(&x, p, 8); return x; }
    case ncclFloat16: case ncclBfloat16: { uint16_t x; std::memcpy(&x, p, 2); return decodeSmall(x, smallFormat(t)); }
    default: { uint8_t x; std::memcpy(&x, p, 1); return decodeSmall(x, smallFormat(t)); }
  }
}

// The input of `rank` at index i for reduction `op`, chosen so that every
// partial result of sum, prod, max and min is exactly representable.
inline double inputValue(ncclDataType_t t, ncclRedOp_t op, int rank, size_t i) {
  const bool fp8 = t == ncclFloat8e4m3 || t == ncclFloat8e5m2;
  const size_t k = static_cast<size_t>(rank) * 7 + i * 3;
  switch (op) {
    case ncclProd: return static_cast<double>(k % 2 + 1);             // products are powers of two
    case ncclMax: case ncclMin: {
      double v = static_cast<double>(k % (fp8 ? 8 : 64));
      return isSigned(t) ? v - (fp8 ? 4 : 32) : v;
    }
    default: return static_cast<double>(k % (fp8 ? 2 : 3));           // sums stay small and exact
  }
}

// Wraps an exact integer result the way the type's arithmetic does.
inline double wrapInt(double v, ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return static_cast<int8_t>(static_cast<uint8_t>(static_cast<int64_t>(v)));
    case ncclUint8: return static_cast<uint8_t>(static_cast<int64_t>(v));
    case ncclInt32: return static_cast<int32_t>(static_cast<uint32_t>(static_cast<int64_t>(v)));
    case ncclUint32: return static_cast<uint32_t>(static_cast<int64_t>(v));
    default: return v;
  }
}

// The expected result at index i over nranks ranks.
inline double expectedValue(ncclDataType_t t, ncclRedOp_t op, int nranks, size_t i) {
  double acc = inputValue(t, op, 0, i);
  for (int r = 1; r < nranks; ++r) {
    double v = inputValue(t, op, r, i);
    switch (op) {
      case ncclProd: acc *= v; break;
      case ncclMax: acc = std::max(acc, v); break;
      case ncclMin: acc = std::min(acc, v); break;
      default: acc += v; break;
    }
  }
  if (op == ncclAvg) {
    if (!isFloat(t)) return std::trunc(acc / nranks);
    return acc / nranks;
  }
  return isFloat(t) ? acc : wrapInt(acc, t);
}

// Tolerance for comparing a result to expectedValue: exact except for the
// floating-point average, where each input is scaled by 1/n in the type's
// precision before summing.
inline double tolerance(ncclDataType_t t, ncclRedOp_t op, int nranks, double expected) {
  if (op != ncclAvg || !isFloat(t)) return 0;
  const int manBits = t == ncclFloat32 ? 23 : t == ncclFloat64 ? 52 : smallFormat(t).manBits;
  return (std::fabs(expected) + 1.0) * (nranks + 1) * std::ldexp(1.0, -manBits);
}

// Loops over whole buffers, the ones every collective check runs (in
// values.cc: optimised even where the test is not).
// Writes rank's inputs for op to elements [first, first+count) of buf, the
// values of indices index0... of the reduced vector.
void fillInputs(void* buf, size_t first, size_t count, ncclDataType_t t, ncclRedOp_t op, int rank, size_t index0);

// The first element of a range that is not what it should be: its index
// within the range (-1: none), the value read and the one expected.
struct Mismatch {
  long long index = -1;
  double got = 0, want = 0;
};
// Elements [first, first+count) of buf against rank's inputs (exact).
Mismatch firstInputMismatch(const void* buf, size_t first, size_t count, ncclDataType_t t, ncclRedOp_t op, int rank,
                            size_t index0);
// Elements [first, first+count) of buf against the reduction over nranks of
// indices index0..., within tolerance().
Mismatch firstReducedMismatch(const void* buf, size_t first, size_t count, ncclDataType_t t, ncclRedOp_t op,
                              int nranks, size_t index0);

// Bit patterns for the collectives that move data without arithmetic.
// Element i of the pattern `seed`: well-mixed bits of the element's width.
// For floating types the exponent's top bit is cleared, so the pattern is
// never Inf or NaN (a copy that goes through arithmetic keeps it intact).
inline uint64_t patternBits(ncclDataType_t t, uint64_t seed, size_t i) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(i) + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  const int bits = static_cast<int>(sizeOf(t)) * 8;
  if (bits < 64) z &= (uint64_t(1) << bits) - 1;
  if (isFloat(t)) z &= ~(uint64_t(1) << (bits - 2));
  return z;
}

// Seed of rank `rank`'s data for block `block` (block -1: the whole input).
inline uint64_t seedOf(int rank, int block) { return 1000003ull * static_cast<uint64_t>(rank + 1) + block + 7; }

// Writes count pattern elements starting at element `first` of buf, pattern
// indices starting at 0.
void fillPattern(void* buf, size_t first, size_t count, ncclDataType_t t, uint64_t seed);

// Index of the first element of got that differs from pattern `seed`, or -1.
long long patternMismatch(const void* got, size_t first, size_t count, ncclDataType_t t, uint64_t seed);

// Index of the first of n bytes at p that is not `value`, or -1.
long long firstByteNot(const void* p, size_t n, unsigned char value);

}  // namespace plait_test
