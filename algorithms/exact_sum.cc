// exact_sum.cc — the host's exact sums over arrays (exact_sum.h): per
// element, a double sum whose rounding errors are caught exactly, or where
// that cannot tell, the long accumulator; rounded once either way.
#include "algorithms/exact_sum.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

#include "algorithms/exact_fold.h"

namespace plait {
namespace {

// s + x = sum + *err exactly (Knuth's TwoSum; no overflow).
inline double twoSum(double s, double x, double* err) {
  const double sum = s + x;
  const double back = sum - s;
  *err = (s - (sum - back)) + (x - back);
  return sum;
}

// The fast path: the sum in double with every rounding error caught by
// TwoSum and those errors summed exactly too, so that s + e is the exact sum
// (almost always for the narrow types: their values span few bits). Then
// one rounding to T gives the result: fl(s + e) for double; for the narrower
// types s + e must itself be a double, and that double rounds once to float
// (and must be a float for the formats narrower still). False: the slow,
// always exact, path must decide (also for infinities and NaNs).
template <class T>
bool roundExact(double s, double e, T* out) {
  if (!std::isfinite(s) || !std::isfinite(e)) return false;
  if constexpr (std::is_same_v<T, double>) {
    *out = e == 0 ? s : s + e;  // (e == 0 keeps the sign of an all -0 sum)
    return true;
  } else {
    double total = s;
    if (e != 0) {
      double rest = 0;
      total = twoSum(s, e, &rest);
      if (rest != 0) return false;
    }
    const float f = static_cast<float>(total);  // one rounding of the exact sum
    if constexpr (std::is_same_v<T, float>) {
      *out = f;
      return true;
    } else {
      if (static_cast<double>(f) != total) return false;  // would round twice
      *out = T::fromFloat(f);
      return true;
    }
  }
}

// Elements in blocks, the ranks' inputs in the outer loop: the TwoSum chains
// of different elements are independent, so they overlap (and vectorise)
// instead of each element waiting for its own chain.
template <class T>
void exactSumArrays(const void* const* inputs, int n, void* out, size_t count) {
  constexpr size_t kBlock = 256;
  double s[kBlock], e[kBlock];
  bool inexact[kBlock];
  ExactSum<T> acc;
  T* o = static_cast<T*>(out);
  for (size_t at = 0; at < count; at += kBlock) {
    const size_t m = std::min(kBlock, count - at);
    const T* first = static_cast<const T*>(inputs[0]) + at;
    for (size_t i = 0; i < m; ++i) {
      s[i] = exact_detail::toDouble(first[i]);
      e[i] = 0;
      inexact[i] = false;
    }
    for (int r = 1; r < n; ++r) {
      const T* x = static_cast<const T*>(inputs[r]) + at;
      for (size_t i = 0; i < m; ++i) {
        double err = 0, errOfErr = 0;
        s[i] = twoSum(s[i], exact_detail::toDouble(x[i]), &err);
        e[i] = twoSum(e[i], err, &errOfErr);
        inexact[i] = inexact[i] || errOfErr != 0;
      }
    }
    for (size_t i = 0; i < m; ++i) {
      T result;
      if (inexact[i] || !roundExact<T>(s[i], e[i], &result)) {
        acc.clear();
        for (int r = 0; r < n; ++r) acc.add(static_cast<const T*>(inputs[r])[at + i]);
        result = acc.result();
      }
      o[at + i] = result;  // every input of element at + i was read: out may alias one
    }
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
