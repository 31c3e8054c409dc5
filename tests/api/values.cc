// values.cc — values.h's loops over whole buffers (see there), compiled with
// -O2 in every build so that the inline functions they call are inlined.
#include "values.h"

#include <cmath>
#include <cstring>

namespace plait_test {

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
