// exact_fold.h — the host's exact sum of n arrays (exact_sum.h), for the
// reproducible mode's exact sums (core/reproducible.cc).
#pragma once

#include <cstddef>

#include "nccl.h"

namespace plait {

// out[i] = the exact sum of inputs[0][i] ... inputs[n-1][i], rounded once to
// `type` (to nearest, ties to even). `out` may be one of the inputs. False
// (nothing written) for a type that is not floating: integer sums are exact
// in any order already.
bool exactSumInto(ncclDataType_t type, const void* const* inputs, int n, void* out, size_t count);

}  // namespace plait
