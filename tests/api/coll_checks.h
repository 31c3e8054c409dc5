// coll_checks.h — one operation of each collective, checked on one rank
// (defined in test_collectives.cc and test_coll_reduce.cc), so the forked
// process tests can run the same checks.
#pragma once

#include <catch2/catch.hpp>

#include "coll_util.h"

namespace coll_data {
plait_test::Outcome checkBroadcast(ncclComm_t comm, const plait_test::CaseInfo& c, int variant);
plait_test::Outcome checkAllGather(ncclComm_t comm, const plait_test::CaseInfo& c, int variant);
plait_test::Outcome checkAlltoAll(ncclComm_t comm, const plait_test::CaseInfo& c, int variant);
plait_test::Outcome checkGather(ncclComm_t comm, const plait_test::CaseInfo& c, int variant);
plait_test::Outcome checkScatter(ncclComm_t comm, const plait_test::CaseInfo& c, int variant);
}  // namespace coll_data

namespace coll_reduce {
plait_test::Outcome checkReduce(ncclComm_t comm, const plait_test::CaseInfo& c, int variant);
plait_test::Outcome checkReduceScatter(ncclComm_t comm, const plait_test::CaseInfo& c, int variant);
}  // namespace coll_reduce

namespace plait_test {

// A reduced sweep (six types, five counts) of one collective, for the
// passes that repeat the full sweeps on another path (forked processes,
// registered buffers).
inline SweepSpec reducedSpec(const char* coll, bool rooted, bool reduction, std::vector<int> variants = {0, 1}) {
  SweepSpec s;
  s.coll = coll;
  s.rooted = rooted;
  s.reduction = reduction;
  s.variants = std::move(variants);
  s.types = {ncclInt8, ncclFloat16, ncclInt32, ncclFloat32, ncclFloat64, ncclBfloat16};
  s.counts = {0, 1, 7, 4099, 70001};
  return s;
}

// Runs spec's sweep with threads as ranks for each rank count; every failing
// rank's first error is reported.
inline void runSweep(const SweepSpec& spec, const CheckFn& check, const std::vector<int>& rankCounts) {
  for (int nranks : rankCounts) {
    INFO("nranks " << nranks);
    auto failures =
        runThreads(nranks, [&](int rank, ncclComm_t comm) { return sweep(rank, nranks, comm, spec, check); });
    for (auto& f : failures) FAIL_CHECK(f);
  }
}

// The rank counts of the sweeps: kSweepRanks, or when quick 1, 2, 4, 5 (the
// single rank, a power of two, an odd count; not 8 threads on a small machine).
// The rank counts of the large-buffer and misaligned cases: 2, 3, 5, or
// when quick 2 and 5.
inline const std::vector<int> kSmallRanks = quickSweep() ? std::vector<int>{2, 5} : std::vector<int>{2, 3, 5};

inline const std::vector<int> kRanks = quickSweep() ? std::vector<int>{1, 2, 4, 5}
                                                    : std::vector<int>(std::begin(kSweepRanks), std::end(kSweepRanks));

}  // namespace plait_test
