// One rank of the "a node dies" test (tests/net/netns.sh --kill-node): runs
// 1 MiB AllReduces until one fails, then reports how long the failure took
// to surface and what it said. Exit 0 when the failure is ncclRemoteError
// (the contract: a dead peer is a remote error, never a hang or a crash),
// 1 for any other result, 2 when it could not start. Prints
//   net_kill_rank: rank R: ncclRemoteError after T ms: <message>
// Launched like tests/process/allreduce_rank (plait::detectLaunch).
#include <chrono>
#include <cstdio>
#include <vector>

#include "plait/launch.hpp"

int main() {
  auto launched = plait::initLaunchedComm(plait::Deadline::afterMs(60000));
  if (!launched.isOk()) {
    fprintf(stderr, "%s\n", launched.status().toString().c_str());
    return 2;
  }
  const plait::LaunchInfo* info = &launched->info;
  ncclComm_t comm = launched->comm;
  printf("net_kill_rank: rank %d: running\n", info->rank);
  fflush(stdout);
  std::vector<float> buf(256 << 10, 1.0f);
  using Clock = std::chrono::steady_clock;
  ncclResult_t rc = ncclSuccess;
  Clock::time_point last = Clock::now();
  for (long i = 0; rc == ncclSuccess; ++i) {
    last = Clock::now();
    rc = ncclAllReduce(buf.data(), buf.data(), buf.size(), ncclFloat32, ncclMax, comm, nullptr);
  }
  const long ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - last).count();
  printf("net_kill_rank: rank %d: %s after %ld ms: %s\n", info->rank, ncclGetErrorString(rc), ms,
         ncclGetLastError(comm));
  fflush(stdout);
  ncclCommAbort(comm);
  return rc == ncclRemoteError ? 0 : 1;
}
