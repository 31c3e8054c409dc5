// Unit tests of the *_perf tools' independent checker (tools/perf/datatypes.cc):
// the element codecs, the exactness of the input pattern, and that countWrong
// sees a single wrong element.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <vector>

#include "common.h"

using namespace plait::perf;

namespace {

const ncclDataType_t kTypes[] = {ncclInt8,    ncclUint8,    ncclInt32,      ncclUint32,
                                 ncclInt64,   ncclUint64,   ncclFloat16,    ncclFloat32,
                                 ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
const TestOp kOps[] = {TestOp::kSum, TestOp::kProd, TestOp::kMax, TestOp::kMin, TestOp::kMulSum};

}  // namespace

TEST_CASE("codecs round-trip small integers and known bit patterns", "[perf]") {
  for (ncclDataType_t t : kTypes) {
    unsigned char buf[8];
    for (int v = 0; v <= 8; ++v) {
      encodeValue(t, v, buf);
      CHECK(decodeValue(t, buf) == v);
    }
  }
  uint16_t h;
  encodeValue(ncclFloat16, 1.0, &h);
  CHECK(h == 0x3c00);
  encodeValue(ncclBfloat16, -2.0, &h);
  CHECK(h == 0xc000);
  uint8_t b = 0x7e;  // e4m3: largest finite, 448
  CHECK(decodeValue(ncclFloat8e4m3, &b) == 448.0);
  b = 0x7f;
  CHECK(std::isnan(decodeValue(ncclFloat8e4m3, &b)));
  b = 0x7c;  // e5m2: infinity
  CHECK(std::isinf(decodeValue(ncclFloat8e5m2, &b)));
  b = 0x01;  // e5m2 smallest subnormal 2^-16
  CHECK(decodeValue(ncclFloat8e5m2, &b) == std::ldexp(1.0, -16));
}

TEST_CASE("the reduced pattern is exact and matches a plain reduction", "[perf]") {
  for (ncclDataType_t t : kTypes) {
    for (TestOp op : kOps) {
      for (int n : {1, 2, 3, 4, 7, 8}) {
        PatternTable reduced = reducedPattern(t, op, n);
        for (size_t j = 0; j < kPatternPeriod; j += 97) {
          double acc = rankPattern(t, op, 0, n).values[j];
          for (int r = 1; r < n; ++r) {
            double v = rankPattern(t, op, r, n).values[j];
            if (op == TestOp::kProd) acc *= v;
            else if (op == TestOp::kMax) acc = std::max(acc, v);
            else if (op == TestOp::kMin) acc = std::min(acc, v);
            else acc += v;
          }
          if (op == TestOp::kMulSum) acc *= 2;
          // The encoded expected value decodes to the exact result.
          CHECK(decodeValue(t, reduced.bytes.data() + j * typeSize(t)) == acc);
        }
      }
    }
  }
}

TEST_CASE("countWrong counts exactly the corrupted elements", "[perf]") {
  PatternTable table = rankPattern(ncclFloat32, TestOp::kSum, 1, 4);
  const size_t count = 5000;
  std::vector<float> data(count);
  fillPattern(data.data(), count, table, 3);
  CHECK(countWrong(data.data(), count, table, 3) == 0);
  CHECK(countWrong(data.data(), count, table, 4) > 0);  // shifted by one element
  data[1234] += 1;
  data[4999] = NAN;
  CHECK(countWrong(data.data(), count, table, 3) == 2);
}

TEST_CASE("avg on floating types is checked with a tolerance", "[perf]") {
  PatternTable avg = reducedPattern(ncclFloat32, TestOp::kAvg, 3);
  REQUIRE(avg.tolerance > 0);
  std::vector<float> data(kPatternPeriod);
  for (size_t j = 0; j < kPatternPeriod; ++j) data[j] = static_cast<float>(avg.values[j] * (1 + 1e-7));
  CHECK(countWrong(data.data(), kPatternPeriod, avg, 0) == 0);
  data[10] = static_cast<float>(avg.values[10] + 1);
  CHECK(countWrong(data.data(), kPatternPeriod, avg, 0) == 1);
}
