// soak_workload.h — what each rank of the kill-anywhere soak does (issue 15
// item 6): a communicator, then an endless mix of collectives, point-to-point
// groups and splits, every result checked, until a call fails. The rank then
// reports the failure to the soak's parent and aborts its communicators.
//
// Public API only (nccl.h): the soak is what a user's program would see.
#pragma once

#include <cstdint>

#include "nccl.h"

namespace soak {

// What a rank was doing when its first call failed.
enum class Phase : int32_t { kInit = 0, kCollective = 1, kPointToPoint = 2, kSplit = 3, kChild = 4, kWrong = 5 };
const char* phaseName(Phase phase);

// One rank's report, written to the parent in one write() (< PIPE_BUF, so
// reports from several ranks never interleave).
struct Report {
  int32_t rank = -1;
  int32_t pid = 0;
  int32_t result = 0;         // the failed call's ncclResult_t
  Phase phase = Phase::kInit;
  int32_t childRank = -1;     // the victim's rank in the split communicator, for kChild
  int32_t pad = 0;
  uint64_t operations = 0;    // calls that succeeded before the failure
  uint64_t failedAtNs = 0;    // CLOCK_MONOTONIC when the failing call returned
  uint64_t abortNs = 0;       // how long ncclCommAbort took afterwards
  char message[1536] = {};    // ncclGetLastError's text (or the wrong value found)
};

struct RankArgs {
  int rank = 0;
  int nranks = 0;
  ncclUniqueId id{};
  int reportFd = -1;
  uint64_t seed = 0;
};

// Runs rank `args.rank` until a call fails, writes its Report, returns the
// process's exit code (0: reported).
int runRank(const RankArgs& args);

uint64_t monotonicNs();

}  // namespace soak
