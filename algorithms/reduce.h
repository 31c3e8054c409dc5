// reduce.h — the host executor's type-erased reduce-copy kernels: the inner
// loop of every collective on the host.
//
// One call reads one or two sources, optionally applies the operator's
// pre-op to either source, reduces, optionally applies the post-op, and
// writes the result to one or two destinations, in one vectorized pass.
// Kernels are chosen once per (type, op kind) with reduceCopyFn and called
// through a plain function pointer; the CPU's best instruction set (AVX2 with
// F16C on x86-64, else baseline) is picked at run time.
#pragma once

#include <cstddef>
#include <cstdint>

#include "algorithms/reduce_ops.h"
#include "algorithms/types.h"
#include "nccl.h"

namespace plait {

// Maps a built-in NCCL op (ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg) for
// `type` and `nranks` to a RedOp. ncclAvg becomes PreMulSum with scalar
// 1/nranks (rounded to the element type, as NCCL does) for floating types and
// SumPostDiv(nranks) for integer types. Returns false (and leaves *out alone)
// for an invalid type or op, nranks < 1, or a null out.
bool makeRedOp(ncclDataType_t type, int ncclOp, int nranks, RedOp* out);

// A PreMulSum RedOp whose scalar is the element at `scalar` (sizeof element
// bytes, as passed to ncclRedOpCreatePreMulSum). False for an invalid type or
// a null pointer.
bool makePreMulSumOp(ncclDataType_t type, const void* scalar, RedOp* out);

struct ReduceCopyArgs {
  const void* srcs[2] = {nullptr, nullptr};
  int nSrcs = 1;  // 1: copy (with optional preOp), 2: dst = op(srcs[0], srcs[1])
  void* dsts[2] = {nullptr, nullptr};
  int nDsts = 1;  // the same result is written to each destination (0: nothing)
  size_t count = 0;  // elements
  // Apply the PreMulSum scalar to that source before reducing. Ignored for
  // the other kinds.
  bool preOpSrc0 = false, preOpSrc1 = false;
  // Apply SumPostDiv's division to the result. Ignored for the other kinds.
  bool postOp = false;
  // Hint: streaming stores for large outputs that won't be re-read soon.
  bool nonTemporal = false;
};

// Computes args for `op`. Sources and destinations may alias each other
// exactly (in-place: dst == src0) but must not partially overlap. Pointers
// need only the element's natural alignment. One source with no pre-op or
// post-op is a bit-exact copy (an fp8 inf or a NaN payload survives it);
// anything computed goes through the accumulator and rounds back. Never fails, never blocks; thread-safe (no shared
// state).
using ReduceCopyFn = void (*)(const RedOp& op, const ReduceCopyArgs& args);

// The kernel for (type, kind); non-null for every valid pair, null otherwise.
// The kernel must be called with a RedOp of that kind.
ReduceCopyFn reduceCopyFn(ncclDataType_t type, RedOpKind kind);

// Whether this CPU has F16C (half <-> float conversions), read from CPUID:
// not every compiler's __builtin_cpu_supports knows the name (clang 14).
bool cpuHasF16c();

// The instruction set the kernels use on this CPU: "avx2" or "generic".
const char* reduceKernelIsa();

// Forces the generic (baseline) kernels, for tests that compare the two
// paths. Affects later reduceCopyFn calls only; not thread-safe with them.
void setReduceKernelGenericForTesting(bool generic);

}  // namespace plait
