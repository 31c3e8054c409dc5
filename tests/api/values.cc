// values.cc — values.h's per-element reference and its loops over whole
// buffers (see there), compiled with -O2 in every build so that the loops
// inline the per-element functions.
#include "values.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace plait_test {

Format smallFormat(ncclDataType_t t) {
  switch (t) {
    case ncclFloat16: return {5, 10, 15};
    case ncclBfloat16: return {8, 7, 127};
    case ncclFloat8e4m3: return {4, 3, 7};
    default: return {5, 2, 15};  // e5m2
  }
}

uint32_t encodeSmall(double v, Format f) {
  uint32_t sign = v < 0 ? 1u : 0u;
  double a = std::fabs(v);
  if (a == 0) return sign << (f.expBits + f.manBits);
  int e = static_cast<int>(std::floor(std::log2(a)));
  double mant = a / std::ldexp(1.0, e) - 1.0;  // in [0,1)
  uint32_t m = static_cast<uint32_t>(std::lround(mant * (1u << f.manBits)));
  return (sign << (f.expBits + f.manBits)) | (static_cast<uint32_t>(e + f.bias) << f.manBits) | m;
}

double decodeSmall(uint32_t bits, Format f) {
  uint32_t sign = (bits >> (f.expBits + f.manBits)) & 1u;
  uint32_t e = (bits >> f.manBits) & ((1u << f.expBits) - 1);
  uint32_t m = bits & ((1u << f.manBits) - 1);
  double v = e == 0 ? std::ldexp(static_cast<double>(m), 1 - f.bias - f.manBits)
                    : std::ldexp(1.0 + static_cast<double>(m) / (1u << f.manBits), static_cast<int>(e) - f.bias);
  return sign ? -v : v;
}

void store(void* buf, size_t i, ncclDataType_t t, double v) {
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

double load(const void* buf, size_t i, ncclDataType_t t) {
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

double inputValue(ncclDataType_t t, ncclRedOp_t op, int rank, size_t i) {
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

double wrapInt(double v, ncclDataType_t t) {
  switch (t) {
    case ncclInt8: return static_cast<int8_t>(static_cast<uint8_t>(static_cast<int64_t>(v)));
    case ncclUint8: return static_cast<uint8_t>(static_cast<int64_t>(v));
    case ncclInt32: return static_cast<int32_t>(static_cast<uint32_t>(static_cast<int64_t>(v)));
    case ncclUint32: return static_cast<uint32_t>(static_cast<int64_t>(v));
    default: return v;
  }
}

double expectedValue(ncclDataType_t t, ncclRedOp_t op, int nranks, size_t i) {
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

double tolerance(ncclDataType_t t, ncclRedOp_t op, int nranks, double expected) {
  if (op != ncclAvg || !isFloat(t)) return 0;
  const int manBits = t == ncclFloat32 ? 23 : t == ncclFloat64 ? 52 : smallFormat(t).manBits;
  return (std::fabs(expected) + 1.0) * (nranks + 1) * std::ldexp(1.0, -manBits);
}

uint64_t patternBits(ncclDataType_t t, uint64_t seed, size_t i) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(i) + 0x632be59bd9b4e019ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  const int bits = static_cast<int>(sizeOf(t)) * 8;
  if (bits < 64) z &= (uint64_t(1) << bits) - 1;
  if (isFloat(t)) z &= ~(uint64_t(1) << (bits - 2));
  return z;
}


void fillInputs(void* buf, size_t first, size_t count, ncclDataType_t t, ncclRedOp_t op, int rank, size_t index0) {
  for (size_t i = 0; i < count; ++i) store(buf, first + i, t, inputValue(t, op, rank, index0 + i));
}

Mismatch firstInputMismatch(const void* buf, size_t first, size_t count, ncclDataType_t t, ncclRedOp_t op, int rank,
                            size_t index0) {
  for (size_t i = 0; i < count; ++i) {
    const double got = load(buf, first + i, t), want = inputValue(t, op, rank, index0 + i);
    if (got != want) return {static_cast<long long>(i), got, want};
  }
  return {};
}

Mismatch firstReducedMismatch(const void* buf, size_t first, size_t count, ncclDataType_t t, ncclRedOp_t op,
                              int nranks, size_t index0) {
  for (size_t i = 0; i < count; ++i) {
    const double got = load(buf, first + i, t), want = expectedValue(t, op, nranks, index0 + i);
    if (!(std::fabs(got - want) <= tolerance(t, op, nranks, want))) return {static_cast<long long>(i), got, want};
  }
  return {};
}

void fillPattern(void* buf, size_t first, size_t count, ncclDataType_t t, uint64_t seed) {
  const size_t w = sizeOf(t);
  char* p = static_cast<char*>(buf) + first * w;
  for (size_t i = 0; i < count; ++i) {
    const uint64_t v = patternBits(t, seed, i);
    std::memcpy(p + i * w, &v, w);  // little-endian: the low bytes
  }
}

long long patternMismatch(const void* got, size_t first, size_t count, ncclDataType_t t, uint64_t seed) {
  const size_t w = sizeOf(t);
  const char* p = static_cast<const char*>(got) + first * w;
  for (size_t i = 0; i < count; ++i) {
    const uint64_t want = patternBits(t, seed, i);
    uint64_t v = 0;
    std::memcpy(&v, p + i * w, w);
    if (v != want) return static_cast<long long>(i);
  }
  return -1;
}

long long firstByteNot(const void* p, size_t n, unsigned char value) {
  const auto* b = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i)
    if (b[i] != value) return static_cast<long long>(i);
  return -1;
}

}  // namespace plait_test
