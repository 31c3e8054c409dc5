// launch_e2e_rank — a complete Plait rank that needs nothing from its
// launcher but the environment: detectLaunch, launchUniqueId,
// ncclCommInitRank, one AllReduce. Prints "rank R of N (<launcher>): ok" and
// exits 0, or prints what failed and exits 1. Run under plait-run or mpirun.
#include <cstdio>
#include <vector>

#include "nccl.h"
#include "plait/launch.hpp"

namespace {

constexpr int64_t kRendezvousMs = 30000;
constexpr size_t kCount = 1000;

int fail(const char* what, const std::string& why) {
  std::fprintf(stderr, "launch_e2e_rank: %s: %s\n", what, why.c_str());
  return 1;
}

}  // namespace

int main() {
  auto info = plait::detectLaunch();
  if (!info.isOk()) return fail("detectLaunch", info.status().toString());
  auto id = plait::launchUniqueId(*info, plait::Deadline::afterMs(kRendezvousMs));
  if (!id.isOk()) return fail("launchUniqueId", id.status().toString());
  ncclComm_t comm = nullptr;
  if (ncclCommInitRank(&comm, info->nranks, *id, info->rank) != ncclSuccess)
    return fail("ncclCommInitRank", ncclGetLastError(comm));
  std::vector<float> data(kCount);
  for (size_t i = 0; i < kCount; ++i) data[i] = static_cast<float>(info->rank + i);
  if (ncclAllReduce(data.data(), data.data(), kCount, ncclFloat, ncclSum, comm, nullptr) != ncclSuccess)
    return fail("ncclAllReduce", ncclGetLastError(comm));
  float n = static_cast<float>(info->nranks);
  for (size_t i = 0; i < kCount; ++i) {
    float expected = n * (n - 1) / 2 + n * static_cast<float>(i);
    if (data[i] != expected) return fail("ncclAllReduce", "wrong sum at " + std::to_string(i));
  }
  ncclCommDestroy(comm);
  std::printf("rank %d of %d (%s): ok\n", info->rank, info->nranks, info->launcher.c_str());
  return 0;
}
