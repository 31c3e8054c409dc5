// exact_sum.cc — the host's exact sums over arrays (exact_sum.h): one
// accumulator per element, the inputs added in any order, rounded once.
#include "algorithms/exact_sum.h"

#include "algorithms/exact_fold.h"

namespace plait {
namespace {

template <class T>
void exactSumArrays(const void* const* inputs, int n, void* out, size_t count) {
  ExactSum<T> acc;
  T* o = static_cast<T*>(out);
  for (size_t i = 0; i < count; ++i) {
    acc.clear();
    for (int r = 0; r < n; ++r) acc.add(static_cast<const T*>(inputs[r])[i]);
    o[i] = acc.result();  // every input of element i was read: out may alias one
  }
}

}  // namespace

bool exactSumInto(ncclDataType_t type, const void* const* inputs, int n, void* out, size_t count) {
  switch (type) {
    case ncclFloat64: exactSumArrays<double>(inputs, n, out, count); return true;
    case ncclFloat32: exactSumArrays<float>(inputs, n, out, count); return true;
    case ncclFloat16: exactSumArrays<Half>(inputs, n, out, count); return true;
    case ncclBfloat16: exactSumArrays<BFloat16>(inputs, n, out, count); return true;
    case ncclFloat8e4m3: exactSumArrays<Fp8E4M3>(inputs, n, out, count); return true;
    case ncclFloat8e5m2: exactSumArrays<Fp8E5M2>(inputs, n, out, count); return true;
    default: return false;
  }
}

}  // namespace plait
