// values.h — test inputs and an independent reference for reductions.
//
// Elements are encoded from small numbers with code written here, not with
// the library's converters, and decoded the same way: bit layouts are taken
// from the formats' definitions (sign, exponent bits, bias, mantissa bits).
// The per-element functions and the loops every collective check runs
// (fill, compare, patterns) are defined in values.cc, compiled with -O2 in
// every build (tests/CMakeLists.txt: plait_test_values): at the sanitizer
// build's -O0 the per-element calls were about 90% of its longest tests'
// time. Not inline here: an inline definition's -O0 copy from a test file
// could be the one the linker keeps, and clang's was (its ASan pass ran the
// reduction tests at half speed).
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

Format smallFormat(ncclDataType_t t);

// Encodes a value that the format represents exactly (small integers,
// halves, quarters...). Normal numbers only, plus zero.
uint32_t encodeSmall(double v, Format f);

double decodeSmall(uint32_t bits, Format f);

// Writes value v (exactly representable in t) at index i of buf.
void store(void* buf, size_t i, ncclDataType_t t, double v);

// Reads element i as a double (integers keep their type's wrap-around value).
double load(const void* buf, size_t i, ncclDataType_t t);

// The input of `rank` at index i for reduction `op`, chosen so that every
// partial result of sum, prod, max and min is exactly representable.
double inputValue(ncclDataType_t t, ncclRedOp_t op, int rank, size_t i);

// Wraps an exact integer result the way the type's arithmetic does.
double wrapInt(double v, ncclDataType_t t);

// The expected result at index i over nranks ranks.
double expectedValue(ncclDataType_t t, ncclRedOp_t op, int nranks, size_t i);

// Tolerance for comparing a result to expectedValue: exact except for the
// floating-point average, where each input is scaled by 1/n in the type's
// precision before summing.
double tolerance(ncclDataType_t t, ncclRedOp_t op, int nranks, double expected);

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
uint64_t patternBits(ncclDataType_t t, uint64_t seed, size_t i);

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
