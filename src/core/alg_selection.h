// alg_selection.h — which algorithms one call may use: NCCL 2.32's per-call
// `algSelection` (ncclCollConfig_t), in NCCL_ALGO's syntax:
//   "ring"                          this list, for every collective
//   "^oneshot,direct"               every algorithm but these
//   "allreduce:ring;allgather:^direct"  per collective (others: unrestricted)
// Names are case-insensitive. Plait runs ring, oneshot, tree (its
// log-depth schedules: halving-doubling AllReduce, binomial Broadcast and
// Reduce), direct and symmetric (Task's kAlgo* bits); NCCL's pat, nvls,
// nvlstree, collnetdirect and collnetchain are accepted names that Plait
// never runs.
#pragma once

#include <cstdint>
#include <string>

#include "core/task.h"
#include "plait/status.hpp"

namespace plait {

struct AlgSelection {
  bool restricted = false;  // false: the tuner chooses freely
  uint8_t algos = 0;        // kAlgo* bits allowed when restricted (may be 0: none Plait runs)
};

// The selection `text` makes for `coll`. Null or "" is unrestricted. An
// unknown algorithm or collective name, or a malformed string, is an
// invalid argument naming it.
Result<AlgSelection> parseAlgSelection(const char* text, CollType coll);

// "ring, oneshot": the names of `algos`, for messages.
std::string algoNames(uint8_t algos);

}  // namespace plait
