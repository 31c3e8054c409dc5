// reproducible.h — the reproducible mode's parts that other files use
// (PLAIT_REPRODUCIBLE; the mode itself is in reproducible.cc).
#pragma once

#include <cstddef>

#include "algorithms/reduce.h"
#include "nccl.h"
#include "plait/status.hpp"

namespace plait {

// PLAIT_REPRODUCIBLE (core/reproducible.cc): kReproducibleOff, the rank
// order (kReproducibleOrder) or exact sums (kReproducibleExact); an
// invalid argument naming the value otherwise.
enum : int { kReproducibleOff = 0, kReproducibleOrder = 1, kReproducibleExact = 2 };
Result<int> reproducibleMode();
// The reproducible mode's fold of n inputs (already scaled by their ranks'
// PreMulSum scalars and rounded): out = inputs[0] op inputs[1] op ... left
// to right, one reduce-copy step at a time, or with `exact` (sums) their
// exact sum rounded once. `out` may be one of the inputs only when exact
// or when it is inputs[0] or inputs[1].
void foldInRankOrder(const RedOp& op, ncclDataType_t type, bool exact, const void* const* inputs, int n, void* out,
                     size_t count);

}  // namespace plait
