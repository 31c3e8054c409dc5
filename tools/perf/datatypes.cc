// tools/perf/datatypes.cc — type names, the input pattern and the checker.
//
// The checker is independent of the library on purpose: it encodes and
// decodes half, bfloat16 and fp8 itself, and computes expected results in
// double precision from the pattern definition alone.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "common.h"

namespace plait::perf {
namespace {

struct TypeInfo {
  const char* name;
  size_t size;
  bool floating;
  double exactLimit;  // largest integer below which every integer is exact
  double epsilon;     // unit roundoff for the tolerance of avg
};

// Indexed by ncclDataType_t.
constexpr TypeInfo kTypes[ncclNumTypes] = {
    {"int8", 1, false, 127, 0},           {"uint8", 1, false, 255, 0},
    {"int32", 4, false, 2147483647.0, 0}, {"uint32", 4, false, 4294967295.0, 0},
    {"int64", 8, false, 9.0e15, 0},       {"uint64", 8, false, 9.0e15, 0},
    {"half", 2, true, 2048, 0x1p-10},     {"float", 4, true, 16777216.0, 0x1p-23},
    {"double", 8, true, 9.0e15, 0x1p-52}, {"bfloat16", 2, true, 256, 0x1p-7},
    {"f8e4m3", 1, true, 16, 0x1p-3},      {"f8e5m2", 1, true, 8, 0x1p-2},
};

const TypeInfo& info(ncclDataType_t type) { return kTypes[static_cast<int>(type)]; }

// A small binary floating-point format (sign, expBits, manBits).
struct MiniFloat {
  int expBits;
  int manBits;
  bool ieeeSpecials;  // false: e4m3 (no infinity, only S.1111.111 is NaN)
};

MiniFloat miniFormat(ncclDataType_t type) {
  switch (type) {
    case ncclFloat16: return {5, 10, true};
    case ncclBfloat16: return {8, 7, true};
    case ncclFloat8e4m3: return {4, 3, false};
    default: return {5, 2, true};  // ncclFloat8e5m2
  }
}

// Rounds to nearest even; values past the largest finite saturate to it
// (the pattern never produces such values).
uint32_t encodeMini(double x, MiniFloat f) {
  const int bias = (1 << (f.expBits - 1)) - 1;
  uint32_t sign = std::signbit(x) ? 1u : 0u;
  x = std::fabs(x);
  uint32_t bits = 0;
  if (x != 0) {
    int e = std::ilogb(x);
    int minExp = 1 - bias;
    if (e < minExp) e = minExp - 1;  // subnormal: exponent field 0
    double scaled = std::ldexp(x, f.manBits - std::max(e, minExp));
    auto mant = static_cast<uint64_t>(std::nearbyint(scaled));
    int field = e < minExp ? 0 : e + bias;
    if (e >= minExp && mant >= (2ull << f.manBits)) { mant >>= 1; ++field; }
    if (field == 0 && mant >= (1ull << f.manBits)) field = 1;
    uint32_t manMask = (1u << f.manBits) - 1;
    bits = (static_cast<uint32_t>(field) << f.manBits) | (static_cast<uint32_t>(mant) & manMask);
  }
  return (sign << (f.expBits + f.manBits)) | bits;
}

double decodeMini(uint32_t bits, MiniFloat f) {
  const int bias = (1 << (f.expBits - 1)) - 1;
  uint32_t manMask = (1u << f.manBits) - 1;
  uint32_t expMask = (1u << f.expBits) - 1;
  uint32_t mant = bits & manMask;
  uint32_t field = (bits >> f.manBits) & expMask;
  bool negative = (bits >> (f.expBits + f.manBits)) & 1u;
  double value;
  if (f.ieeeSpecials && field == expMask) {
    value = mant ? std::nan("") : INFINITY;
  } else if (!f.ieeeSpecials && field == expMask && mant == manMask) {
    value = std::nan("");
  } else if (field == 0) {
    value = std::ldexp(static_cast<double>(mant), 1 - bias - f.manBits);
  } else {
    value = std::ldexp(static_cast<double>(mant | (1u << f.manBits)), static_cast<int>(field) - bias - f.manBits);
  }
  return negative ? -value : value;
}

template <typename T>
void storeAs(void* dst, double v) {
  T t = static_cast<T>(v);
  std::memcpy(dst, &t, sizeof(T));
}

template <typename T>
double loadAs(const void* src) {
  T t;
  std::memcpy(&t, src, sizeof(T));
  return static_cast<double>(t);
}

void encode(ncclDataType_t type, double v, void* dst) {
  switch (type) {
    case ncclInt8: return storeAs<int8_t>(dst, v);
    case ncclUint8: return storeAs<uint8_t>(dst, v);
    case ncclInt32: return storeAs<int32_t>(dst, v);
    case ncclUint32: return storeAs<uint32_t>(dst, v);
    case ncclInt64: return storeAs<int64_t>(dst, v);
    case ncclUint64: return storeAs<uint64_t>(dst, v);
    case ncclFloat32: return storeAs<float>(dst, v);
    case ncclFloat64: return storeAs<double>(dst, v);
    default: break;
  }
  uint32_t bits = encodeMini(v, miniFormat(type));
  if (info(type).size == 2) {
    auto b16 = static_cast<uint16_t>(bits);
    std::memcpy(dst, &b16, 2);
  } else {
    auto b8 = static_cast<uint8_t>(bits);
    std::memcpy(dst, &b8, 1);
  }
}

double decode(ncclDataType_t type, const void* src) {
  switch (type) {
    case ncclInt8: return loadAs<int8_t>(src);
    case ncclUint8: return loadAs<uint8_t>(src);
    case ncclInt32: return loadAs<int32_t>(src);
    case ncclUint32: return loadAs<uint32_t>(src);
    case ncclInt64: return loadAs<int64_t>(src);
    case ncclUint64: return loadAs<uint64_t>(src);
    case ncclFloat32: return loadAs<float>(src);
    case ncclFloat64: return loadAs<double>(src);
    default: break;
  }
  uint32_t bits = 0;
  if (info(type).size == 2) {
    uint16_t b16;
    std::memcpy(&b16, src, 2);
    bits = b16;
  } else {
    bits = *static_cast<const uint8_t*>(src);
  }
  return decodeMini(bits, miniFormat(type));
}

// The largest pattern value m such that the op over nranks values in [0, m]
// stays exact.
double valueRange(ncclDataType_t type, TestOp op, int nranks) {
  double limit = std::min(info(type).exactLimit, 1.0 * (1 << 20));
  double m = limit;
  if (op == TestOp::kSum || op == TestOp::kAvg) m = std::floor(limit / nranks);
  if (op == TestOp::kMulSum) m = std::floor(limit / (2.0 * nranks));
  return std::min(m, 100.0);
}

double patternValue(ncclDataType_t type, TestOp op, int rank, int nranks, size_t j) {
  if (op == TestOp::kProd) {
    // Exactly one rank holds a 2 on every third element: products are 1 or 2.
    return (j % 3 == 0 && static_cast<int>(j % nranks) == rank) ? 2 : 1;
  }
  double m = valueRange(type, op, nranks);
  if (m < 1) return (rank == 0 && j % 2 == 0) ? 1 : 0;  // too many ranks: keep sums tiny
  auto k = static_cast<uint64_t>(m) + 1;
  return static_cast<double>((j * 7 + static_cast<uint64_t>(rank) * 13 + 3) % k);
}

PatternTable makeTable(ncclDataType_t type, std::vector<double> values, double tolerance) {
  PatternTable t;
  t.type = type;
  t.values = std::move(values);
  t.tolerance = tolerance;
  size_t elt = typeSize(type);
  t.bytes.resize(t.values.size() * elt);
  for (size_t j = 0; j < t.values.size(); ++j) encode(type, t.values[j], t.bytes.data() + j * elt);
  return t;
}

bool elementMatches(const PatternTable& t, const uint8_t* got, size_t j) {
  size_t elt = typeSize(t.type);
  if (std::memcmp(got, t.bytes.data() + j * elt, elt) == 0) return true;
  if (t.tolerance == 0) return false;
  double g = decode(t.type, got), e = t.values[j];
  return std::fabs(g - e) <= t.tolerance * std::max(std::fabs(e), 1.0);
}

}  // namespace

const char* typeName(ncclDataType_t type) {
  int t = static_cast<int>(type);
  return t >= 0 && t < ncclNumTypes ? kTypes[t].name : "?";
}
size_t typeSize(ncclDataType_t type) { return info(type).size; }
bool isFloatingType(ncclDataType_t type) { return info(type).floating; }
void encodeValue(ncclDataType_t type, double v, void* dst) { encode(type, v, dst); }
double decodeValue(ncclDataType_t type, const void* src) { return decode(type, src); }

const char* opName(TestOp op) {
  switch (op) {
    case TestOp::kSum: return "sum";
    case TestOp::kProd: return "prod";
    case TestOp::kMax: return "max";
    case TestOp::kMin: return "min";
    case TestOp::kAvg: return "avg";
    case TestOp::kMulSum: return "mulsum";
    case TestOp::kNone: return "none";
  }
  return "?";
}

PatternTable rankPattern(ncclDataType_t type, TestOp op, int rank, int nranks) {
  std::vector<double> values(kPatternPeriod);
  for (size_t j = 0; j < kPatternPeriod; ++j) values[j] = patternValue(type, op, rank, nranks, j);
  return makeTable(type, std::move(values), 0);
}

PatternTable reducedPattern(ncclDataType_t type, TestOp op, int nranks) {
  std::vector<double> values(kPatternPeriod);
  for (size_t j = 0; j < kPatternPeriod; ++j) {
    double acc = patternValue(type, op, 0, nranks, j);
    for (int r = 1; r < nranks; ++r) {
      double v = patternValue(type, op, r, nranks, j);
      switch (op) {
        case TestOp::kProd: acc *= v; break;
        case TestOp::kMax: acc = std::max(acc, v); break;
        case TestOp::kMin: acc = std::min(acc, v); break;
        default: acc += v; break;
      }
    }
    if (op == TestOp::kMulSum) acc *= 2;
    if (op == TestOp::kAvg) acc = isFloatingType(type) ? acc / nranks : std::floor(acc / nranks);
    values[j] = acc;
  }
  double tolerance = 0;
  // Avg on floating types may scale before or after summing: allow n roundings.
  if (op == TestOp::kAvg && isFloatingType(type)) tolerance = 2.0 * nranks * info(type).epsilon;
  return makeTable(type, std::move(values), tolerance);
}

void fillPattern(void* dst, size_t count, const PatternTable& table, size_t phase) {
  size_t elt = typeSize(table.type);
  auto* out = static_cast<uint8_t*>(dst);
  phase %= kPatternPeriod;
  while (count > 0) {
    size_t run = std::min(count, kPatternPeriod - phase);
    std::memcpy(out, table.bytes.data() + phase * elt, run * elt);
    out += run * elt;
    count -= run;
    phase = 0;
  }
}

size_t countWrong(const void* data, size_t count, const PatternTable& table, size_t phase) {
  size_t elt = typeSize(table.type);
  const auto* got = static_cast<const uint8_t*>(data);
  phase %= kPatternPeriod;
  size_t wrong = 0;
  while (count > 0) {
    size_t run = std::min(count, kPatternPeriod - phase);
    if (std::memcmp(got, table.bytes.data() + phase * elt, run * elt) != 0) {
      for (size_t j = 0; j < run; ++j) wrong += elementMatches(table, got + j * elt, phase + j) ? 0 : 1;
    }
    got += run * elt;
    count -= run;
    phase = 0;
  }
  return wrong;
}

}  // namespace plait::perf
